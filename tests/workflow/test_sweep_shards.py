"""A save: summary sweep through Snakemake and Dask: one sharded store, read back by grid key, its errors against
the same study saved as trajectories (the per-run compiled loop as the oracle); a damaged shard recomputed and
named; a grid extended by one value computes only that value's runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from test_workflow import ok, read_csv, snakemake, write_config

from hbvm_workflow.reading import open_study

pytestmark = pytest.mark.slow

SWEEP = {
    "kind": "sweep",
    "problem": "planar_pendulum",
    "grid": {"theta_dot0": [1.0, 1.9]},
    "methods": [{"k": 2, "s": 2}, {"method": "rattle"}],
    "t_end": 1,
    "h": [0.1, 0.05, 0.025],
    "errors": {"reference": "exact", "norm": 1, "sample": "all"},
    "shard_runs": 4,
}


def _manifest(tmp_path, study="sw") -> dict:
    return json.loads((tmp_path / "results" / study / "solve.json").read_text())


def test_a_sweep_is_one_sharded_store_read_by_grid_key_with_the_errors_of_its_trajectories(tmp_path):
    trajectories = {**SWEEP, "save": "trajectory", "kind": "convergence", "plot": "convergence"}
    against_h2 = {"errors": {**SWEEP["errors"], "reference": "self"}}
    studies = {"sw": SWEEP, "tr": trajectories, "sws": SWEEP | against_h2, "trs": trajectories | against_h2}
    write_config(tmp_path, studies, select=list(studies))
    ok(snakemake(tmp_path, "--cores", "2"))
    res = tmp_path / "results"
    assert (res / "sw" / "runs.zarr").is_dir() and not (res / "sw" / "runs").exists()
    m = _manifest(tmp_path)
    assert m["runs"] == 12 and len(m["shards"]) == 3 and m["computed"] == 12 and m["failed"] == 0

    ds = open_study("sw", results=str(res))
    one = ds.sel(scheme="hbvm_k2_s2", theta_dot0=1.9, h=0.05)
    assert int(one.steps) == 20 and int(one.status) == 0 and int(one.n_saved) == 21
    assert np.isclose(float(one.t.isel(point=20)), 1.0, rtol=0, atol=1e-14)  # 20 steps of 0.05, summed
    # as a trajectory is queried: q by the problem's coordinate names, .item(), the nearest grid value
    assert list(ds.dof.values) == ["x0", "x1"] and one.q.sel(dof="x0").isel(point=0).item() == 0.0  # x0(0) = 0
    near = ds.sel(scheme="hbvm_k2_s2", theta_dot0=1.8, h=0.05, method="nearest")
    assert near.H_error.item() == one.H_error.item() and near.hash.item() == one.hash.item()
    # plain xarray, in a process without hbvm: the stored arrays by their dimension names, no warning
    plain = (
        "import sys, warnings, xarray as xr\n"
        "warnings.simplefilter('error')\n"
        "ds = xr.open_zarr(sys.argv[1])\n"
        "assert not [m for m in sys.modules if m.startswith('hbvm')]\n"
        "print(ds.y.dims, ds.y.shape, float(ds.counts.sel(count=0).max()))"
    )
    out = subprocess.run([sys.executable, "-c", plain, str(res / "sw" / "runs.zarr")], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.split() == ["('run',", "'point',", "'state')", "(12,", "41,", "4)", "0.0"]

    summary, traj = read_csv(res / "sw" / "errors.csv"), read_csv(res / "tr" / "errors.csv")
    assert list(summary[0]) == list(traj[0]) and len(summary) == len(traj) == 12
    for a, b in zip(summary, traj):
        assert (a["method"], a["h"], a["theta_dot0"]) == (b["method"], b["h"], b["theta_dot0"])
        # the same arithmetic in another loop: round-off over <= 40 steps of states of size ~2
        for key in ("e_s", "e_H", "e_g", "e_hc"):
            assert abs(float(a[key]) - float(b[key])) <= 1e-12 + 1e-9 * float(b[key]), (key, a, b)
        assert a["rate_s"] == "" or abs(float(a["rate_s"]) - float(b["rate_s"])) < 1e-6
        assert a["e_lambda"] == ""  # a summary keeps the last multiplier only
    assert (res / "sw" / "sw.png").stat().st_size > 10_000
    # each shard task wrote its runs' partial results beside its shard (a Zarr array in its group), as its record
    # says (their digest), and the aggregation took e_s from them: the same numbers as errors.csv
    import zarr

    from hbvm_workflow import partials, shards

    store = str(res / "sw" / "runs.zarr")
    for slot in range(3):
        values = np.asarray(zarr.open_array(f"{store}/shards/{slot}/partial", mode="r")[...])
        assert shards.read_record(store, slot)["partial"]["sha256"] == partials.values_digest(values)
        e_s = [float(r["e_s"]) for r in summary[4 * slot : 4 * slot + 4]]  # rows = runs (plan order), 4 a shard
        assert np.allclose(values[:, 0], e_s, rtol=1e-15, atol=0), slot  # errors.csv: floats by repr
    assert "computed again" not in (tmp_path / "logs" / "sw" / "aggregate.log").read_text()  # every partial taken

    # errors.reference self: the h/2 partners are runs of the one store (the last row's is no row's run), and the
    # errors against them are those of the runs saved as trajectories
    assert _manifest(tmp_path, "sws")["runs"] == 16
    summary, traj = read_csv(res / "sws" / "errors.csv"), read_csv(res / "trs" / "errors.csv")
    assert len(summary) == len(traj) == 12 and all(a["status"] == "ok" for a in summary)
    for a, b in zip(summary, traj):
        assert (a["method"], a["h"], a["theta_dot0"]) == (b["method"], b["h"], b["theta_dot0"])
        # as above, the difference of two runs of <= 80 steps
        assert abs(float(a["e_s"]) - float(b["e_s"])) <= 1e-12 + 1e-9 * float(b["e_s"]), (a, b)
    # the error against the h/2 run is (1 - 2^-p) C h^p: its observed order is the method's, 2 in q and p for both
    # with the pendulum's varying multiplier (docs/method.md, section 3: properties)
    last = [float(a["rate_s"]) for a in summary if a["h"] == "0.025"]
    assert len(last) == 4 and all(abs(rate - 2.0) < 0.05 for rate in last), last
    assert len(read_csv(res / "sws" / "timings.csv")) == 16


def test_a_damaged_shard_is_recomputed_and_a_new_grid_value_computes_only_its_runs(tmp_path):
    write_config(tmp_path, {"sw": SWEEP}, select=["sw"])
    ok(snakemake(tmp_path, "--cores", "2", "sweep"))
    timings = read_csv(tmp_path / "results" / "sw" / "timings.csv")
    assert {r["backend"] for r in timings} == {"numba"}  # auto: shards of 4 runs stay on the CPU
    # the ensemble backend is provenance, not identity: changing it reruns nothing (no solve, no aggregate)
    write_config(tmp_path, {"sw": {**SWEEP, "backend": "numba"}}, select=["sw"])
    same = ok(snakemake(tmp_path, "--cores", "2", "sweep"))
    assert "Nothing to be done" in same.stdout + same.stderr
    store = tmp_path / "results" / "sw" / "runs.zarr"
    shard = store / "y" / "c" / "1" / "0" / "0"
    raw = bytearray(shard.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    shard.write_bytes(bytes(raw))
    verify = [sys.executable, "-m", "hbvm_workflow", "verify", str(store)]
    found = subprocess.run(verify, capture_output=True, text=True)
    assert found.returncode == 1 and f"{store}: array y: " in found.stdout, found
    again = ok(snakemake(tmp_path, "--cores", "2", "sweep"))
    log = (tmp_path / "logs" / "sw" / "solve.log").read_text()
    assert "shard 1" in again.stderr and "damaged shard 1" in log and "array y" in log
    m = _manifest(tmp_path)
    assert m["computed"] == 4 and m["reused"] == 8  # the shard's runs, the others reused

    write_config(tmp_path, {"sw": {**SWEEP, "grid": {"theta_dot0": [1.0, 1.5, 1.9]}}}, select=["sw"])
    ok(snakemake(tmp_path, "--cores", "2", "sweep"))
    m = _manifest(tmp_path)
    assert m["runs"] == 18 and m["computed"] == 6 and m["copied"] == 12  # 2 methods x 3 h of the new value
    assert not os.path.exists(tmp_path / "results" / "sw" / "runs.previous.zarr")
    rows = read_csv(tmp_path / "results" / "sw" / "errors.csv")
    assert [r["theta_dot0"] for r in rows[:9]] == ["1.0"] * 3 + ["1.5"] * 3 + ["1.9"] * 3


@pytest.mark.parametrize("target", ["sweep", "default"])
def test_the_solve_job_aggregates_a_summary_study_and_a_numbers_change_reuses_every_shard(tmp_path, target):
    """No aggregate job for a save: summary study: its solve job (rule solve_summary, asked for by name or in the
    default target) writes errors.csv; a change of a key that defines the numbers reruns that job, which integrates
    nothing and aggregates again; a title change renders again only."""
    import re

    select, args = ([], ["sweep"]) if target == "sweep" else (["sw"], [])
    rule = "solve_summary"
    write_config(tmp_path, {"sw": SWEEP}, select=select)
    first = ok(snakemake(tmp_path, "--cores", "2", *args))
    rules = set(re.findall(r"rule (\w+):", first.stdout + first.stderr))
    assert rule in rules and "aggregate" not in rules and "render" in rules, rules
    log = (tmp_path / "logs" / "sw" / "aggregate.log").read_text()
    assert "aggregated 12 rows (0 not ok)" in log
    before = read_csv(tmp_path / "results" / "sw" / "errors.csv")

    norm_inf = {**SWEEP, "errors": {**SWEEP["errors"], "norm": "inf"}}
    write_config(tmp_path, {"sw": norm_inf}, select=select)
    again = ok(snakemake(tmp_path, "--cores", "2", *args))
    rules = set(re.findall(r"rule (\w+):", again.stdout + again.stderr))
    assert rule in rules and "aggregate" not in rules, rules
    m = _manifest(tmp_path)
    assert m["computed"] == 0 and m["copied"] == 0 and m["reused"] == 12
    after = read_csv(tmp_path / "results" / "sw" / "errors.csv")
    assert [r["h"] for r in after] == [r["h"] for r in before]
    # the same differences in the max norm instead of the 1-norm: never larger, smaller for some (2 coordinates)
    assert all(float(a["e_s"]) <= float(b["e_s"]) for a, b in zip(after, before))
    assert any(float(a["e_s"]) < float(b["e_s"]) for a, b in zip(after, before))

    write_config(tmp_path, {"sw": {**norm_inf, "title": "another title"}}, select=select)
    shown = ok(snakemake(tmp_path, "--cores", "2", *args))
    assert set(re.findall(r"rule (\w+):", shown.stdout + shown.stderr)) - {"sweep", "all"} == {"render"}


def test_the_shards_run_on_an_existing_scheduler(tmp_path):
    """The shard tasks go through the same client as any run: here workers of a scheduler started elsewhere."""
    from test_workflow import ROOT, external_cluster

    study_dir, elsewhere = tmp_path / "study", tmp_path / "elsewhere"
    study_dir.mkdir()
    elsewhere.mkdir()
    with external_cluster(elsewhere, dict(os.environ, PYTHONPATH=str(ROOT))) as address:
        write_config(study_dir, {"sw": SWEEP}, select=["sw"], dask={"address": address})
        ok(snakemake(study_dir, "--cores", "1", "sweep"))
        log = (study_dir / "logs" / "sw" / "solve.log").read_text()
        assert f"computing on scheduler {address}" in log and "12 runs to integrate in 3 shards" in log
        assert _manifest(study_dir)["computed"] == 12


def test_backend_cuda_without_a_gpu_stops_the_solve_with_one_line(tmp_path):
    """backend cuda demands the GPU: where the shards' workers have none, the solve step stops with one line naming
    the study and the key (once, however many shards), and nothing is written as done."""
    from hbvm_core.kernels.cuda import cuda_available

    if cuda_available():
        pytest.skip("a GPU (or numba-cuda's simulator) is present")
    write_config(tmp_path, {"sw": {**SWEEP, "backend": "cuda"}}, select=["sw"])
    proc = snakemake(tmp_path, "--cores", "2", "sweep")
    lines = [line for line in proc.stderr.splitlines() if line.startswith("hbvm: ")]
    assert proc.returncode != 0 and len(lines) == 1, proc.stderr[-3000:]
    assert lines[0].startswith("hbvm: studies.sw.backend = 'cuda' on host ") and "no GPU" in lines[0]
    assert lines[0].count("studies.sw.backend") == 1
    assert not (tmp_path / "results" / "sw" / "solve.json").exists()
