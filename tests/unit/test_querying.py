"""Querying a study as a user types it (docs/querying.md): coordinate names, ``select_run``, ``.item()``.

A study written here without Snakemake: a bead on a circle of radius r = 2 (coordinates x, y; U = y,
g = x^2 + y^2 - r^2) from expressions, run by HBVM(1,1), HBVM(2,2) and RATTLE at n = 0, 1 (h = 0.1, 0.05)
into run stores by ``run_to_store`` with the attrs the worker records, and the solve step's manifest.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import hbvm_core as hc
from hbvm_core.methods import RATTLE
from hbvm_workflow import layout
from hbvm_workflow.reading import open_study
from hbvm_workflow.storage import RunNotFoundError, open_trajectory, select_run, with_coordinates
from hbvm_workflow.worker import run_to_store

EPS = float(np.finfo(float).eps)
R = 2.0
METHODS = (hc.HBVM(1, 1), hc.HBVM(2, 2), RATTLE())


def bead():
    return hc.from_expressions(
        "bead",
        coordinates=["x", "y"],
        potential="y",
        constraints=["x**2 + y**2 - r**2"],
        q0=[0, "-r"],
        p0=[1, 0],
        params={"r": R},
    )


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> str:
    results = str(tmp_path_factory.mktemp("results"))
    problem = bead()
    jobs = []
    for method in METHODS:
        for n in (0, 1):
            h = 0.1 / 2**n
            store = layout.store_path(results, "s", method.label(), h, n)
            attrs = {"label": method.label(), "method_name": method.name, "method_entry": method.entry()}
            run_to_store(store, problem, method, h, 0.2, attrs=attrs, backend="numpy")
            jobs.append(
                {"label": method.label(), "store": str(Path(store).relative_to(Path(results) / "s")), "status": "ok"}
            )
    Path(layout.manifest_path(results, "s")).write_text(json.dumps({"jobs": jobs}))
    return results


def test_the_dof_and_constraint_coordinates_are_the_problems(results):
    assert bead().coordinates == ("x", "y") and bead().constraint_index == (0,)
    run = open_trajectory(layout.store_path(results, "s", "hbvm_k2_s2", 0.05, 1))
    assert list(run.dof.values) == ["x", "y"] and list(run.constraint.values) == [0]
    # the named component is the column of q: y(0) = -r, x'(0) = p_x(0) = 1 (M = I)
    assert run.q.sel(dof="y")[0].item() == -R and run.p.sel(dof="x")[0].item() == 1.0
    x, y = run.q.sel(dof="x").values, run.q.sel(dof="y").values
    # g by hand from the stored q: x^2 + y^2 - r^2, terms of size r^2 = 4, so a few eps of 4
    np.testing.assert_allclose(run.g.sel(constraint=0).values, x**2 + y**2 - R**2, rtol=0, atol=8 * EPS * R**2)


def test_item_works_on_a_lazily_opened_store(results):
    path = layout.store_path(results, "s", "rattle", 0.1, 0)
    run = open_trajectory(path)  # lazy: nothing read yet
    # H(q0, p0) = 1/2 |p0|^2 + y0 = 1/2 - r, exactly representable
    assert run.H[0].item() == 0.5 - R and float(run.H[0]) == 0.5 - R
    assert run.t[-1].item() == pytest.approx(0.2, rel=4 * EPS)  # two steps of 0.1, compensated sum
    dask = open_trajectory(path, chunks={})  # the dask form: .item() is dask's to refuse, compute() works
    assert float(dask.H[0].compute()) == 0.5 - R and list(dask.dof.values) == ["x", "y"]


def test_a_store_without_names_gets_x0_x1():
    ds = xr.Dataset({"q": (("t", "dof"), np.zeros((3, 2))), "g": (("t", "constraint"), np.zeros((3, 1)))})
    named = with_coordinates(ds)
    assert list(named.dof.values) == ["x0", "x1"] and list(named.constraint.values) == [0]


def test_coordinates_of_a_hand_written_problem():
    pb = hc.get_problem("planar_pendulum")
    assert pb.coordinates == ("x0", "x1")
    with pytest.raises(hc.ProblemError, match=r"coordinates = \['x'\]: expected 2 distinct names"):
        hc.Problem("p", [0.0, 0.0], [0.0, 0.0], U=pb.U, grad_U=pb.grad_U, coordinates=("x",), check=False)


def test_select_run_by_what_a_user_types(results):
    tree = open_study("s", results=results)
    # each way of naming one run, against the attrs its store recorded
    for how, label, h in (
        (dict(method="rattle", n=1), "rattle", 0.05),
        (dict(method="rattle", h=0.1), "rattle", 0.1),
        (dict(method="hbvm_k2_s2", n=0), "hbvm_k2_s2", 0.1),
        (dict(method="HBVM(1,1)", h=0.05), "hbvm_k1_s1", 0.05),
        (dict(method="hbvm", k=2, s=2, n=1), "hbvm_k2_s2", 0.05),
        (dict(k=1, s=1, h=0.1), "hbvm_k1_s1", 0.1),
        (dict(label="rattle", h=0.05), "rattle", 0.05),
    ):
        run = select_run(tree, **how)
        assert (run.attrs["label"], run.attrs["h"]) == (label, h), how
        assert list(run.dof.values) == ["x", "y"]
    with pytest.raises(RunNotFoundError, match=r"2 runs match method='hbvm': /hbvm_k1_s1/n=1, /hbvm_k2_s2/n=1"):
        select_run(tree, method="hbvm", n=1)
    with pytest.raises(RunNotFoundError, match=r"give the run's step size h= or its step number n="):
        select_run(tree, method="rattle")
    with pytest.raises(RunNotFoundError, match=r"no run n=5 with method='rattle' \(runs: n=0, n=1\)"):
        select_run(tree, method="rattle", n=5)
    with pytest.raises(
        RunNotFoundError, match=r"no run with method='dop853' \(the study's methods: hbvm_k1_s1, hbvm_k2_s2, rattle\)"
    ):
        select_run(tree, method="dop853", h=0.1)
    with pytest.raises(RunNotFoundError, match=r"no run with h = 0.2 \(nearest 0.1\)"):
        select_run(tree, method="rattle", h=0.2)


def test_a_selected_run_keeps_only_its_own_dimensions():
    """A run's node inherits the study's coordinates (errors.zarr's h and scheme at the root): the selected run
    has only the dimensions of its own arrays."""
    import xarray as xr

    root = xr.Dataset(
        coords={"h": [0.1, 0.05, 0.025], "scheme": ["a", "b"]}, data_vars={"e_s": (("scheme", "h"), np.ones((2, 3)))}
    )
    run = xr.Dataset(
        {"q": (("t", "dof"), np.zeros((4, 2)))}, coords={"dof": ["x", "y"]}, attrs={"h": 0.1, "label": "a"}
    )
    tree = xr.DataTree.from_dict({"/": root, "/a/n=0": run})
    assert set(tree["a/n=0"].to_dataset().dims) >= {"h", "scheme"}  # what the node inherits
    got = select_run(tree, method="a", h=0.1)
    assert dict(got.sizes) == {"t": 4, "dof": 2} and list(got.dof.values) == ["x", "y"]
