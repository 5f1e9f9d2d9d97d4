"""A run's identity does not depend on the host's round-off, through real Snakemake and Dask.

Another host is simulated by ``user_problems.PERTURB_ULPS``: the problem's values move by a few units in the
last place, as another BLAS or libm computes them (``sphere_quadratic``'s gradient is a BLAS matrix product).
Such a rerun reuses every run; a worker with such round-off computes every run it gets, nothing refused; a
value change beyond round-off recomputes every run.
"""

from __future__ import annotations

import json
import math
import time

import pytest
from _reliability import TESTS, snakemake, write_config
from test_workflow import BIN, _start, _stop, read_csv
from user_problems import PERTURB_ULPS

from hbvm_workflow.storage import read_attrs

pytestmark = pytest.mark.slow

STUDY = {
    "problem": "user_problems:sphere_quadratic",
    "params": {"n": 12},
    "backend": "numpy",
    "methods": [{"k": 2, "s": 2}],
    "t_end": 1,
    "h": [0.1, 0.05],
    "errors": {"reference": "self", "norm": 1, "sample": "all"},
}


def ok(proc):
    assert proc.returncode == 0, proc.stdout[-4000:]
    return proc.stdout


def reuse_line(workdir) -> str:
    """The last solve step's count of reused and computed runs (its log: '3 runs: 3 reused, 0 to compute')."""
    lines = (workdir / "logs" / "sphere" / "solve.log").read_text().splitlines()
    return [line for line in lines if " runs: " in line and " reused, " in line][-1]


def stores(workdir):
    return sorted((workdir / "results" / "sphere" / "runs").glob("*/*.zarr.zip"))


def test_a_rerun_with_another_hosts_round_off_reuses_every_run(tmp_path, monkeypatch):
    write_config(tmp_path, {"sphere": STUDY})
    ok(snakemake(tmp_path, "--cores", "1"))
    runs = {p: p.stat().st_mtime_ns for p in stores(tmp_path)}
    assert len(runs) == 3  # h = 0.1, 0.05 and the h/2 partner 0.025
    errors = read_csv(tmp_path / "results" / "sphere" / "errors.csv")

    monkeypatch.setenv(PERTURB_ULPS, "1")  # the same command on a host one unit in the last place apart
    assert "Nothing to be done" in ok(snakemake(tmp_path, "--cores", "1"))
    ok(snakemake(tmp_path, "--cores", "1", "--forcerun", "solve"))  # the solve step itself: every store reused
    assert reuse_line(tmp_path).endswith("3 runs: 3 reused, 0 to compute")
    assert {p: p.stat().st_mtime_ns for p in stores(tmp_path)} == runs
    # the aggregation evaluated the perturbed problem (H, g, the reference) on the stored runs: the same errors
    # to round-off (relative 1e-8: e_s ~ 1e-4 here, its round-off ~ steps * eps / e_s below 1e-9)
    again = read_csv(tmp_path / "results" / "sphere" / "errors.csv")
    assert [r["status"] for r in again] == [r["status"] for r in errors] == ["ok", "ok"]
    for a, b in zip(errors, again):
        for key in ("e_s", "rate_s", "e_lambda"):
            x, y = float(a[key] or "nan"), float(b[key] or "nan")
            assert x == y or abs(x - y) <= 1e-8 * abs(x) or math.isnan(x) and math.isnan(y), (key, x, y)

    monkeypatch.setenv(PERTURB_ULPS, str(10**7))  # 2.2e-9 relative: beyond round-off (PROBE_RTOL = 1e-10)
    out = ok(snakemake(tmp_path, "--cores", "1"))
    assert "Nothing to be done" not in out
    assert reuse_line(tmp_path).endswith("3 runs: 0 reused, 3 to compute")


def test_a_worker_with_other_round_off_computes_every_run_and_the_head_reuses_them(tmp_path, monkeypatch):
    """An existing scheduler on 127.0.0.1 whose one worker computes 3 ulps apart from the host that plans."""
    import os

    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    sched_file = tmp_path / "scheduler.json"
    cmd = [str(BIN / "dask"), "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard"]
    sched = _start(cmd + ["--scheduler-file", str(sched_file)], tmp_path / "scheduler.log", env=env, cwd=tmp_path)
    worker = None
    try:
        for _ in range(600):
            if sched_file.exists() and sched_file.stat().st_size:
                break
            time.sleep(0.1)
        address = json.loads(sched_file.read_text())["address"]
        cmd = [str(BIN / "dask"), "worker", address, "--nworkers", "1", "--nthreads", "1", "--host", "127.0.0.1"]
        worker_env = env | {PERTURB_ULPS: "3", "HBVM_KERNEL_CACHE": os.environ.get("HBVM_KERNEL_CACHE", "")}
        worker = _start(cmd + ["--no-dashboard"], tmp_path / "worker.log", env=worker_env, cwd=tmp_path)
        work = tmp_path / "w"
        write_config(work, {"sphere": STUDY}, dask={"address": address})
        ok(snakemake(work, "--cores", "1"))
        assert reuse_line(work).endswith("3 runs: 0 reused, 3 to compute")
        timings = read_csv(work / "results" / "sphere" / "timings.csv")
        assert [t["status"] for t in timings] == ["ok"] * 3 and all(t["host"] for t in timings)
        attrs = read_attrs(str(stores(work)[0]))
        assert attrs["host"] and attrs["cpu"] and attrs["problem_probe"]["U"]["data"]
    finally:
        if worker is not None:
            _stop(worker)
        _stop(sched)
    # the head host (no perturbation, its own local cluster): the same identity, every run reused
    write_config(work, {"sphere": STUDY})
    assert "Nothing to be done" in ok(snakemake(work, "--cores", "1"))
