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


# --------------------------------------------------------------------------- a sweep: its one sharded store
A1 = (0.1, 0.3, 0.5)
SCHEMES = ("hbvm_k1_s1", "hbvm_k2_s2")
HS = (0.1, 0.05)


def _sweep_table():
    """Runs in plan order (scheme, a1, h decreasing) of a problem with q = (x, y) and one constraint."""
    from hbvm_workflow import shards

    keys = [(s, c, h) for s in range(len(SCHEMES)) for c in range(len(A1)) for h in HS]
    return shards.RunTable(
        hash=np.arange(1, len(keys) + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15),
        scheme=np.array([k[0] for k in keys], dtype=np.int16),
        combo=np.array([k[1] for k in keys], dtype=np.int32),
        h=np.array([k[2] for k in keys]),
        n=np.full(len(keys), -1),
        N=np.array([round(1 / k[2]) for k in keys]),
        sample_every=np.array([round(0.5 / k[2]) for k in keys]),
        schemes=list(SCHEMES),
        combos=[{"a1": a} for a in A1],
        grid=["a1"],
        m=2,
        nu=1,
        shard_runs=5,
    )


def _oracle_y(R: int, S: int) -> np.ndarray:
    """y[r, j, c] = 1000 r + 10 j + c: which run, point and column (q_x, q_y, p_x, p_y) a number was read from."""
    r, j, c = np.meshgrid(np.arange(R), np.arange(S), np.arange(4), indexing="ij")
    return 1000.0 * r + 10.0 * j + c


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> tuple[str, object]:
    """results/sw/runs.zarr written as the solve step and its shard tasks write it, and the manifest naming it."""
    from hbvm_workflow import shards

    results = str(tmp_path_factory.mktemp("results"))
    table = _sweep_table()
    path = shards.shard_store(results, "sw")
    shards.create(path, table, "sw", layout.tmp_dir(results, "sw"), coordinates=["x", "y"])
    y = _oracle_y(table.runs, table.S)
    for slot, (a, b) in enumerate(table.slots()):
        counts = np.zeros((b - a, len(shards.COUNTS)), dtype=np.int64)
        scalars = np.stack([1e-3 * np.arange(a, b), np.full(b - a, 2e-15), np.arange(a, b) + 0.5], axis=1)
        rows = {"counts": counts, "scalars": scalars, "t": np.zeros((b - a, table.S)), "y": y[a:b]}
        shards.write_shard(path, slot, a, rows, table.digest(a, b), {})
    manifest = {"save": "summary", "store": "runs.zarr", "runs": table.runs}
    Path(layout.manifest_path(results, "sw")).write_text(json.dumps(manifest))
    return results, table


def _row(table, scheme: str, a1: float, h: float) -> int:
    """The store's row of a run, found by numpy in the table written."""
    (r,) = np.flatnonzero((table.scheme == SCHEMES.index(scheme)) & (table.combo == A1.index(a1)) & (table.h == h))
    return int(r)


def test_a_sweep_is_queried_by_dof_name_with_item_as_a_trajectory_is(sweep):
    results, table = sweep
    ds = open_study("sw", results=results)
    assert list(ds.dof.values) == ["x", "y"] and list(ds.constraint.values) == [0]
    y = _oracle_y(table.runs, table.S)
    np.testing.assert_array_equal(ds.q.sel(dof="y").values, y[:, :, 1])
    np.testing.assert_array_equal(ds.p.sel(dof="x").values, y[:, :, 2])
    r = _row(table, "hbvm_k2_s2", 0.3, 0.05)
    one = ds.sel(scheme="hbvm_k2_s2", a1=0.3, h=0.05)
    assert one.q.sel(dof="y").isel(point=1).item() == 1000 * r + 10 + 1
    assert one.H_error.item() == 1e-3 * r and one.lam.sel(constraint=0).item() == r + 0.5
    assert one.steps.item() == 0 and float(one.g_error.sel(constraint=0)) == 2e-15
    # a grid value written otherwise (0.1 + 0.2 = 0.30000000000000004) is the one within a relative 1e-9
    assert ds.sel(scheme="hbvm_k2_s2", a1=0.1 + 0.2, h=0.05).H_error.item() == 1e-3 * r
    dask = open_study("sw", results=results, chunks={})  # the dask form: compute() where .item() is refused
    assert float(dask.sel(scheme="hbvm_k2_s2", a1=0.3, h=0.05).H_error.compute()) == 1e-3 * r
    assert dask.q.chunks is not None and list(dask.dof.values) == ["x", "y"]


def test_a_sweep_selects_the_nearest_grid_value_and_step(sweep):
    results, table = sweep
    ds = open_study("sw", results=results)
    block = ds.sel(a1=0.34, method="nearest")  # every run of a1 = 0.3, of both schemes and steps
    np.testing.assert_array_equal(block.H_error.values, 1e-3 * np.flatnonzero(table.combo == 1))
    assert block.a1.item() == 0.3
    r = _row(table, "hbvm_k1_s1", 0.5, 0.05)
    assert ds.sel(scheme="hbvm_k1_s1", a1=0.9, h=0.06, method="nearest").H_error.item() == 1e-3 * r
    along_h = ds.sel(scheme="hbvm_k1_s1", a1=0.5)  # the runs of one grid value, along h: nearest there too
    assert along_h.sel(h=0.07, method="nearest").H_error.item() == 1e-3 * r


def test_a_value_not_on_the_grid_is_one_line_naming_the_nearest_values_there(sweep):
    results, _ = sweep
    ds = open_study("sw", results=results)
    cases = [
        (lambda: ds.sel(a1=0.4), r"^a1 = 0.4 is not on the grid: the nearest values there are 0.3 and 0.5 \("),
        (lambda: ds.sel(a1=0.7), r"^a1 = 0.7 is not on the grid: the nearest values there are 0.5 \("),
        (lambda: ds.sel(scheme="hbvm_k1_s1", a1=0.5).sel(h=0.07), r"^h = 0.07 is not on the grid: .* 0.05 and 0.1 "),
        (lambda: ds.sel(a1=0.34, method="nearest", tolerance=0.01), r"^a1 = 0.34 is not on the grid: .*tolerance 0.01"),
        (lambda: ds.sel(scheme="rattle"), r"^scheme = 'rattle' is not one of the runs' values: 'hbvm_k1_s1', "),
    ]
    for select, message in cases:
        with pytest.raises(RunNotFoundError, match=message) as info:
            select()
        assert "\n" not in str(info.value) and isinstance(info.value, KeyError)


PLAIN = """
import json, sys, warnings
import xarray as xr
import zarr

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    ds = xr.open_zarr(sys.argv[1])
    y = ds.y.values
    dims = {name: list(ds[name].dims) for name in ds.variables}
    coords = sorted(ds.coords)
    hashes = [int(x) for x in ds.hash.values]
    nodes = sorted(k for k, _ in zarr.open_group(sys.argv[1], mode="r", use_consolidated=False).members(max_depth=None))
hbvm = sorted(m for m in sys.modules if m.startswith("hbvm"))
print(json.dumps({"hbvm": hbvm, "warnings": [str(w.message) for w in caught], "y": y.tolist(), "dims": dims,
                  "coords": coords, "hashes": hashes, "nodes": nodes, "names": ds.attrs["coordinates"]}))
"""


def test_plain_xarray_and_zarr_open_a_sweeps_store_without_hbvm(sweep):
    """In a process that imports neither hbvm_core nor hbvm_workflow: xr.open_zarr reads every array by its dimension
    names and the run coordinates, without a warning (no non-Zarr component, consolidated metadata); zarr-python
    lists the store's nodes (the shard records are groups of their own) without one either."""
    import subprocess
    import sys

    from hbvm_workflow import shards

    results, table = sweep
    path = shards.shard_store(results, "sw")
    done = subprocess.run([sys.executable, "-c", PLAIN, path], capture_output=True, text=True, check=True)
    out = json.loads(done.stdout)
    assert out["hbvm"] == [] and out["warnings"] == [], out["warnings"]
    np.testing.assert_array_equal(np.array(out["y"]), _oracle_y(table.runs, table.S))
    assert out["dims"]["y"] == ["run", "point", "state"] and out["dims"]["counts"] == ["run", "count"]
    assert out["dims"]["scalars"] == ["run", "scalar"] and out["dims"]["h"] == ["run"]
    assert out["coords"] == sorted(shards.COORDS) and out["hashes"] == [int(x) for x in table.hash]
    slots = [f"shards/{s}" for s in range(len(table.slots()))]
    assert out["nodes"] == sorted([*shards.DATA, *shards.COORDS, "shards", *slots]) and out["names"] == ["x", "y"]


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
