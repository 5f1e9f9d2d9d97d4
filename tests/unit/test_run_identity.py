"""Every field that determines a run's numbers changes its job hash; the chunk, which does not, does not; the
reference ODE's cache keeps problem instances apart (each measured against its own reference).

A store is reused when its job hash matches (docs/reliability.md), so a field left out of the hash would
let a store computed with another value of it stand in for this run.
"""

from __future__ import annotations

import numpy as np
import pytest

from hbvm_core import HBVM, get_problem
from hbvm_core.references import _CACHE, reference_solution
from hbvm_workflow.storage import load_trajectory, read_attrs
from hbvm_workflow.study import expand_study
from hbvm_workflow.worker import run_to_store, solve_job

BASE = {
    "problem": "planar_pendulum",
    "methods": [{"k": 2, "s": 2}],
    "t_end": 1,
    "h": [0.1],
    "errors": {"reference": "exact", "norm": 1, "sample": "all"},
}

#: one change of each field of a run (none of them is the default)
CHANGES = {
    "save_every": {"save_every": 2},
    "compensated": {"compensated": False},
    "backend numpy": {"backend": "numpy"},
    "backend numba": {"backend": "numba"},
    "t_end": {"t_end": 2},
    "h": {"h": [0.05]},
    "params": {"params": {"gravity": 2.0}},
    "method k": {"methods": [{"k": 3, "s": 2}]},
    "method s": {"methods": [{"k": 2, "s": 1}]},
    "method solver": {"methods": [{"k": 2, "s": 2, "solver": "blended"}]},
    "method warm_start": {"methods": [{"k": 2, "s": 2, "warm_start": "p0"}]},
    "method multiplier": {"methods": [{"k": 2, "s": 2, "multiplier": "polynomial"}]},
    "method projection": {"methods": [{"k": 2, "s": 2, "multiplier": "polynomial", "projection": True}]},
    "method kind": {"methods": [{"method": "rattle"}]},
    "method rtol": {"methods": [{"method": "dop853", "rtol": 1e-8}]},
    "method atol": {"methods": [{"method": "dop853", "rtol": 1e-8, "atol": 1e-10}]},
}


def one_hash(**change) -> str:
    jobs = list(expand_study("s", BASE | change).jobs.values())
    assert len(jobs) == 1
    return jobs[0].hash


def test_each_field_of_a_run_changes_its_hash():
    base = one_hash()
    hashes = {name: one_hash(**change) for name, change in CHANGES.items()}
    assert base == one_hash()  # stable
    same = sorted(name for name, h in hashes.items() if h == base)
    assert same == [], f"fields that do not change the job hash: {same}"
    assert len(set(hashes.values())) == len(CHANGES)  # and no two changes collide


def test_each_value_of_a_grid_is_its_own_run():
    study = expand_study("s", BASE | {"grid": {"gravity": [1.0, 2.0, 3.0]}})
    hashes = [j.hash for j in study.jobs.values()]
    assert len(hashes) == 3 and len(set(hashes)) == 3
    alone = expand_study("s", BASE | {"params": {"gravity": 2.0}})
    assert next(iter(alone.jobs.values())).hash in hashes  # a grid value is the same run as that param


def test_the_chunk_is_not_in_the_hash_and_does_not_change_the_numbers(tmp_path):
    assert one_hash(chunk=7) == one_hash()
    pb = get_problem("planar_pendulum")
    stores = [str(tmp_path / f"c{c}" / "runs" / "m" / "h=0.1.zarr.zip") for c in (3, 65536)]
    for path, chunk in zip(stores, (3, 65536)):
        assert run_to_store(path, pb, HBVM(2, 2), 0.1, 1.0, chunk=chunk, backend="numpy")["status"] == "ok"
    a, b = (load_trajectory(p, pb) for p in stores)
    # the same steps in the same order, only written out in other blocks: the same bits
    for name in ("t", "q", "p", "lam", "iterations"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name


def test_the_reference_cache_keeps_instances_apart():
    """Two pendulums that differ only by their gravity (same q0, p0, callbacks): each ODE reference matches its
    own closed form, whichever was asked for first (the closed form is an independent oracle: Jacobi sn, cn)."""
    _CACHE.clear()
    times = np.linspace(0.0, 3.0, 7)
    for order in ((1.0, 2.0), (2.0, 1.0)):
        _CACHE.clear()
        for gravity in order:
            pb = get_problem("planar_pendulum", gravity=gravity, theta_dot0=0.5)
            q, p, lam = reference_solution(pb, times, reference_kind="ode")
            qx, px, lx = pb.exact(times)
            # DOP853 at rtol = atol = 1e-13 over 3 time units of an O(1) solution: 1e-9 is far above its error
            # and far below the distance between the two instances (O(1))
            assert np.max(np.abs(q - qx)) < 1e-9 and np.max(np.abs(p - px)) < 1e-9, (order, gravity)
            assert np.max(np.abs(lam - lx)) < 1e-9, (order, gravity)
    one, two = (get_problem("planar_pendulum", gravity=g, theta_dot0=0.5).exact(times)[0] for g in (1.0, 2.0))
    assert np.max(np.abs(one - two)) > 0.1  # the two instances are far apart: a mix-up cannot pass


@pytest.mark.parametrize("field", ["gravity", "length"])
def test_params_that_leave_the_initial_data_alone_still_change_the_hash(field):
    assert one_hash(params={field: 2.0}) != one_hash()


def test_a_run_is_computed_for_its_own_params(tmp_path, monkeypatch):
    """The worker builds the problem with the run's params: the store is that instance's (gravity 2 falls
    faster: its y(1) is below the default pendulum's)."""
    monkeypatch.chdir(tmp_path)
    heavy = next(iter(expand_study("s", BASE | {"params": {"gravity": 2.0}, "backend": "numpy"}).jobs.values()))
    light = next(iter(expand_study("t", BASE | {"backend": "numpy"}).jobs.values()))
    for job in (heavy, light):
        assert solve_job(job)["status"] == "ok"
    a, b = (read_attrs(j.store) for j in (heavy, light))
    assert a["params"]["gravity"] == 2.0 and a["problem_fingerprint"] == heavy.problem_fingerprint
    assert b["problem_fingerprint"] == light.problem_fingerprint != heavy.problem_fingerprint
    # from rest at the bottom with theta'(0) = 1: the heavier pendulum swings less high (y stays lower)
    y = [load_trajectory(j.store, get_problem("planar_pendulum", **j.params)).q[:, 1].max() for j in (heavy, light)]
    assert y[0] < y[1] - 0.05


def test_a_grid_study_measures_each_instance_against_its_own_reference(tmp_path, monkeypatch):
    """reference: reference (the index-reduced ODE) in a study with a grid over gravity: the aggregation's e_s of
    each instance is its distance to its own closed form (worked out here from the stores, 1-norm at every
    step), which the ODE reference matches to its tolerance; the other instance's would be off by O(1)."""
    from hbvm_workflow.tables import study_rows

    monkeypatch.chdir(tmp_path)
    _CACHE.clear()
    cfg = BASE | {
        "grid": {"gravity": [1.0, 2.0]},
        "params": {"theta_dot0": 0.5},
        "backend": "numpy",
        "t_end": 2,
        "h": [0.1],
        "errors": {"reference": "reference", "reference_kind": "ode", "norm": 1, "sample": "all"},
    }
    study = expand_study("g", cfg)
    for job in study.jobs.values():
        assert solve_job(job)["status"] == "ok"
    rows = study_rows(study)
    assert sorted(r["gravity"] for r in rows) == [1.0, 2.0]
    for row in rows:
        job = next(j for j in study.jobs.values() if j.combo == row["combo"])
        pb = get_problem("planar_pendulum", theta_dot0=0.5, gravity=row["gravity"])
        traj = load_trajectory(job.store, pb)
        q, p, _ = pb.exact(traj.t)
        by_hand = np.max(np.sum(np.abs(traj.q - q), axis=1) + np.sum(np.abs(traj.p - p), axis=1))
        # the ODE reference (rtol 1e-13) stands for the closed form far below the run's error (~1e-3)
        assert abs(row["e_s"] - by_hand) <= 1e-9, (row["gravity"], row["e_s"], by_hand)


def test_hash_is_the_sha256_of_the_sorted_json_of_its_input():
    """The hash of every run of a grid study (several methods, step sizes and instances, in any order of asking)
    is the first 16 hex digits of the sha256 of its hash input as sorted JSON (the definition, written out here):
    the planner writes that text from a template per method and instance. Values equal as numbers but not as JSON
    (1 and 1.0) keep their own text."""
    import hashlib
    import json

    from hbvm_workflow.runs import Job

    def by_definition(job) -> str:
        return hashlib.sha256(json.dumps(job.hash_input(), sort_keys=True).encode()).hexdigest()[:16]

    cfg = BASE | {
        "methods": [{"k": 2, "s": 2}, {"k": 3, "s": 2}],
        "h": [0.1, 0.05, 0.025, 0.0125],
        "grid": {"gravity": [1, 1.0, 2.5]},
    }
    jobs = list(expand_study("ident", cfg).jobs.values())
    assert len(jobs) == 2 * 4 * 3
    for job in jobs[::-1] + jobs[::2]:  # backwards, then skipping: every template change
        job.forget()
        assert job.hash == by_definition(job), job.id
    same_but_type = [j for j in jobs if j.label == jobs[0].label and j.h == 0.1]
    assert len({j.hash for j in same_but_type}) == 3  # gravity 1, 1.0 and 2.5: three runs
    one = jobs[0]
    for h in (1, 0.1, 1e-300, 0.30000000000000004):
        job = Job(**(one.as_dict() | {"h": h}))
        assert job.hash == by_definition(job), h
