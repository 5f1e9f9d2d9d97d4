"""The convergence-study workflow end to end: real Snakemake, real Dask, real Zarr stores, in temporary folders.

- a small study through ``snakemake --cores 2`` (LocalCluster): stores, errors.csv,
  tables, plots, report, and the numbers against an in-process recomputation;
- incremental: adding one h computes exactly one new run, an unchanged rerun nothing;
- a real ``dask scheduler`` + ``dask worker`` on loopback with ``dask.address``;
- Snakemake's generic cluster executor with a local submit script;
- the config expanded once per run (``_trace``): the jobs read the plan;
- a failing run: the table says "failed", the aggregation completes.

Bad configs (failing before any job, naming the key, writing nothing): test_reliability_config.py.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import yaml
from _tables import check_blocks, html_blocks, latex_blocks, markdown_blocks
from _trace import check_once, traced
from zarr.storage import ZipStore

from hbvm_core import get_problem
from hbvm_workflow.reading import open_study
from hbvm_workflow.storage import open_errors, read_attrs, select_run
from hbvm_workflow.tables import COLUMNS

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PLANAR = {
    "problem": "planar_pendulum",
    "backend": "numpy",
    "methods": [{"k": 1, "s": 1}, {"k": 2, "s": 2}],
    "t_end": 1,
    "h0": 0.1,
    "halvings": 2,
    "errors": {"reference": "exact", "norm": 1, "sample": "all"},
    "expected_rates": {"e_s": 2, "e_lambda": 1, "e_hc": 2},
}
SELF = {
    "problem": "modified_pendulum",
    "backend": "numpy",
    "methods": [{"k": 3, "s": 1}],
    "t_end": 0.5,
    "h0": 0.1,
    "halvings": 1,
    "errors": {"reference": "self", "norm": "inf", "sample": 0.1, "hc_norm": 1},
}


def write_config(workdir: Path, studies: dict, **extra) -> Path:
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "config.yaml"
    path.write_text(yaml.safe_dump({"studies": studies, **extra}, sort_keys=False))
    return path


def snakemake(workdir: Path, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """Run the repository's Snakefile on workdir/config.yaml; returns the finished process."""
    cmd = [str(BIN / "snakemake"), "-s", str(ROOT / "Snakefile"), "-d", str(workdir)]
    cmd += ["--configfile", str(workdir / "config.yaml"), *args]
    env = dict(os.environ, MPLBACKEND="Agg", PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=workdir)


def ok(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, f"snakemake failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return proc


def read_csv(path: Path) -> list[dict]:
    with open(path) as fh:
        return list(csv.DictReader(fh))


def stores(workdir: Path, study: str) -> list[Path]:
    return sorted((workdir / "results" / study / "runs").glob("*/[hn]=*.zarr.zip"))


def hand_errors(store: Path, cfg: dict, partner: Path | None) -> dict:
    """The errors of one run worked out here from its stored q, p and lam, without hbvm_core.metrics: for the
    planar pendulum (M = I, U = y, g = x^2 + y^2 - 1, G^T p = 2 (x px + y py)) against its closed form in the
    1-norm at every step; for reference: self against the h/2 run's store at t = 0.1 j in the inf-norm, e_hc
    in the 1-norm (hc_norm) with G from the problem."""
    ds = xr.open_zarr(ZipStore(store, mode="r")).load()
    q, p, lam, t, ts = ds.q.values, ds.p.values, ds.lam.values, ds.t.values, ds.tstep.values
    pb = get_problem(cfg["problem"])
    assert pb.M is None  # both problems here have M = I: p is the velocity
    H = 0.5 * np.sum(p**2, axis=1) + pb.U(q)
    hidden = np.einsum("nac,na->nc", pb.G(q), p)
    out = {"e_H": np.max(np.abs(H - H[0])), "e_g": np.max(np.abs(pb.g(q)))}
    if cfg["errors"]["reference"] == "exact":
        assert cfg["problem"] == "planar_pendulum" and cfg["errors"]["norm"] == 1
        q_ex, p_ex, _ = pb.exact(t)
        _, _, lam_ex = pb.exact(ts)
        x, y, px, py = q[:, 0], q[:, 1], p[:, 0], p[:, 1]
        out["e_s"] = np.max(np.sum(np.abs(q - q_ex), axis=1) + np.sum(np.abs(p - p_ex), axis=1))
        out["e_lambda"] = np.max(np.abs(lam - lam_ex))
        out["e_hc"] = np.max(np.abs(2 * (x * px + y * py)))
        out["e_g"] = np.max(np.abs(x**2 + y**2 - 1))
        out["e_H"] = np.max(np.abs(0.5 * (px**2 + py**2) + y - (0.5 * (px[0] ** 2 + py[0] ** 2) + y[0])))
    else:
        assert cfg["errors"] == {"reference": "self", "norm": "inf", "sample": 0.1, "hc_norm": 1}
        ref = xr.open_zarr(ZipStore(partner, mode="r")).load()
        j = np.arange(round(cfg["t_end"] / 0.1) + 1) * 0.1
        on = lambda grid, times: np.abs(grid[:, None] - times[None, :]).argmin(axis=0)  # noqa: E731
        y_h = np.concatenate([q, p], axis=1)[on(t, j)]
        y_ref = np.concatenate([ref.q.values, ref.p.values], axis=1)[on(ref.t.values, j)]
        js = j[j <= ts[-1] + 1e-9]
        out["e_s"] = np.max(np.abs(y_h - y_ref))
        out["e_lambda"] = np.max(np.abs(lam[on(ts, js)] - ref.lam.values[on(ref.tstep.values, js)]))
        out["e_hc"] = np.max(np.sum(np.abs(hidden), axis=1))
    return {k: float(v) for k, v in out.items()}


def check_outputs(workdir: Path, study: str, cfg: dict, n_runs: int) -> list[dict]:
    """Every output of a study exists and holds the right numbers."""
    res = workdir / "results" / study
    runs = stores(workdir, study)
    assert len(runs) == n_runs
    for run in runs:
        ds = xr.open_zarr(ZipStore(run, mode="r"))
        a = ds.attrs
        assert a["complete"] is True and a["study"] == study and a["problem"] == cfg["problem"]
        assert ds.sizes["t"] == a["steps"] + 1 and ds.sizes["tstep"] == a["steps"]
        assert set(ds.data_vars) >= {"q", "p", "lam", "H", "g", "hc", "iterations"}
        assert {"method_entry", "h", "t_end", "wall_s", "versions", "worker", "job_hash"} <= set(a)
    with open(res / "errors.csv") as fh:
        header = next(csv.reader(fh))
    assert header[: len(COLUMNS)] == list(COLUMNS)
    rows = read_csv(res / "errors.csv")
    assert len(rows) == len(cfg["methods"]) * (cfg["halvings"] + 1)
    manifest = json.loads((res / "solve.json").read_text())["jobs"]
    store_of = {(j["label"], j["h"]): res / j["store"] for j in manifest}
    for row in rows:
        h = float(row["h"])
        partner = store_of.get((row["method"], h / 2)) if cfg["errors"]["reference"] == "self" else None
        want = hand_errors(store_of[(row["method"], h)], cfg, partner)
        for key in ("e_s", "e_lambda", "e_hc"):
            # the same sums in another order: a few eps of the error's size
            assert float(row[key]) == pytest.approx(want[key], rel=1e-12), (row["method"], h, key)
        for key in ("e_H", "e_g"):
            # at round-off: another order of the same operations on O(1) numbers moves them by a few eps
            assert abs(float(row[key]) - want[key]) <= 16 * np.finfo(float).eps, (row["method"], h, key)
    ds = open_errors(study, results=str(workdir / "results"))
    assert ds.e_s.dims == ("scheme", "h") and list(ds.scheme.values) == list(dict.fromkeys(r["method"] for r in rows))
    parsers = {"table.md": markdown_blocks, "table.tex": latex_blocks, "table.html": html_blocks}
    n_rated = sum(1 for r in rows if r["n"] != "0")
    label = "n" if "h0" in cfg else "h"
    for name, parse in parsers.items():
        checked = check_blocks(parse((res / name).read_text()), rows, label)
        assert checked >= len(rows) * 5 + n_rated * 3, (name, checked)  # every error, every rate past n = 0
    png, pdf = res / f"{study}.png", res / f"{study}.pdf"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert pdf.read_bytes()[:5] == b"%PDF-"
    return rows


def test_small_study_end_to_end_with_a_local_cluster(tmp_path, monkeypatch):
    studies = {"tiny": PLANAR, "tinyself": SELF}
    # two workers whatever the study's size (by default a study of seconds of work gets one: see runs.workers_for)
    write_config(tmp_path, studies, dask={"n_workers": 2})
    trace = traced(tmp_path, monkeypatch)
    proc = ok(snakemake(tmp_path, "--cores", "2"))
    # the config expanded once, by the parse: two problems identified, three method entries; the jobs read the plan
    check_once(trace, instances=2, methods=3)
    (plan,) = (tmp_path / "results" / ".plans").glob("*.json")
    written = plan.stat().st_mtime_ns
    rows = check_outputs(tmp_path, "tiny", PLANAR, 6)
    # the observed orders of docs/method.md: 2 in y and the hidden constraint, 1 in lambda, in every row past n = 0
    rated = [r for r in rows if r["n"] != "0"]
    assert len(rated) == 4
    assert all(abs(float(r["rate_s"]) - 2) < 0.1 and abs(float(r["rate_hc"]) - 2) < 0.1 for r in rated)
    assert all(abs(float(r["rate_lambda"]) - 1) < 0.1 for r in rated)
    assert all(r["rate_s"] == "" for r in rows if r["n"] == "0")  # no rate in a method's first row

    # reference: self: the h/2 partner runs were scheduled (2 rows, 3 runs), and e_s is their difference at t = 0.1 j
    selfrows = check_outputs(tmp_path, "tinyself", SELF, 3)
    # named by the row label n: n=0 (h = 0.1), n=1 (0.05), n=2 (0.025: the h/2 partner of n=1)
    assert [p.name for p in stores(tmp_path, "tinyself")] == ["n=0.zarr.zip", "n=1.zarr.zip", "n=2.zarr.zip"]
    h0 = xr.open_zarr(ZipStore(stores(tmp_path, "tinyself")[2], mode="r"))
    h1 = xr.open_zarr(ZipStore(stores(tmp_path, "tinyself")[1], mode="r"))
    t = np.arange(6) * 0.1
    y = lambda ds: np.concatenate([ds.q.sel(t=t, method="nearest"), ds.p.sel(t=t, method="nearest")], axis=1)  # noqa: E731
    assert float(selfrows[1]["e_s"]) == np.abs(y(h1) - y(h0)).max()

    # the stores were computed on the cluster's workers, on loopback, in parallel processes
    workers = {read_attrs(str(p))["worker"] for p in stores(tmp_path, "tiny")}
    assert all(w.startswith("tls://127.0.0.1:") for w in workers) and len(workers) == 2
    log = (tmp_path / "logs" / "tiny" / "solve.log").read_text()
    assert "6 runs: 0 reused, 6 to compute" in log and "LocalCluster (2 worker processes" in log
    assert re.search(r"6/6 hbvm_k\d_s\d/n=\d: ok, \d+ steps", log)

    # querying: errors.zarr by (k, s, h) as in the README, and the whole study as one object
    ds = open_errors("tiny", results=str(tmp_path / "results"))
    e = ds.e_s.sel(scheme="hbvm_k2_s2", h=0.05).item()
    assert e == ds.set_index(scheme=["k", "s"]).e_s.sel(k=2, s=2, h=0.05).item()
    assert e == float(next(r["e_s"] for r in rows if r["k"] == "2" and r["h"] == "0.05"))
    tree = open_study("tiny", results=str(tmp_path / "results"))
    assert sorted(tree.children) == ["hbvm_k1_s1", "hbvm_k2_s2"] and len(tree["hbvm_k2_s2"].children) == 3
    run = select_run(tree, k=2, s=2, h=0.05)
    assert run.sizes["t"] == 21 and run.attrs["h"] == 0.05

    # an unchanged rerun does nothing and touches no store
    before = {p: p.stat().st_mtime_ns for p in stores(tmp_path, "tiny")}
    again = ok(snakemake(tmp_path, "--cores", "2"))
    assert "Nothing to be done" in again.stdout + again.stderr
    assert before == {p: p.stat().st_mtime_ns for p in stores(tmp_path, "tiny")}
    assert plan.stat().st_mtime_ns == written  # the same plan: not rewritten

    # the report holds the tables and the plots
    ok(snakemake(tmp_path, "--report", str(tmp_path / "report.html")))
    report = (tmp_path / "report.html").read_text()
    assert all(name in report for name in ("tiny.png", "table.html", "errors.csv", "tinyself.png"))
    assert "Nothing" not in proc.stdout  # the first run did run


def test_adding_one_h_computes_exactly_one_new_run(tmp_path):
    study = dict(PLANAR, methods=[{"k": 1, "s": 1}], h=[0.1, 0.05], halvings=None, h0=None)
    study = {k: v for k, v in study.items() if v is not None}
    write_config(tmp_path, {"inc": study})
    ok(snakemake(tmp_path, "--cores", "2"))
    old = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in stores(tmp_path, "inc")}
    assert sorted(old) == ["h=0.05.zarr.zip", "h=0.1.zarr.zip"]

    write_config(tmp_path, {"inc": dict(study, h=[0.1, 0.05, 0.025])})
    proc = ok(snakemake(tmp_path, "--cores", "2"))
    manifest = json.loads((tmp_path / "results" / "inc" / "solve.json").read_text())
    assert manifest["computed"] == ["hbvm_k1_s1/h=0.025"]
    assert "3 runs: 2 reused, 1 to compute" in (tmp_path / "logs" / "inc" / "solve.log").read_text()
    assert proc.stderr.count("rule solve:") == 1
    new = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in stores(tmp_path, "inc")}
    assert {k: new[k] for k in old} == old and sorted(new) == ["h=0.025.zarr.zip", "h=0.05.zarr.zip", "h=0.1.zarr.zip"]
    rows = read_csv(tmp_path / "results" / "inc" / "errors.csv")
    assert [r["h"] for r in rows] == ["0.1", "0.05", "0.025"] and abs(float(rows[2]["rate_s"]) - 2) < 0.05

    # a store deleted by hand: the same command says so and recomputes only that run
    os.remove(stores(tmp_path, "inc")[0])
    warned = ok(snakemake(tmp_path, "--cores", "2"))
    assert (
        "study inc: 1 run(s) of results/inc/solve.json are not intact: hbvm_k1_s1/h=0.025 (no store); "
        "the solve step recomputes them"
    ) in warned.stderr
    manifest = json.loads((tmp_path / "results" / "inc" / "solve.json").read_text())
    assert manifest["computed"] == ["hbvm_k1_s1/h=0.025"] and len(stores(tmp_path, "inc")) == 3
    assert "Nothing to be done" in ok(snakemake(tmp_path, "--cores", "2")).stderr  # healed: nothing left to do


def test_the_default_studies_share_one_job_and_a_study_asked_for_by_name_gets_its_own(tmp_path):
    """select: [a, b] -> one solve job builds both (their own logs and manifests), one aggregate and one render job
    each; c, not selected, is built only when asked for, by solve_study (and its own aggregate and render jobs); a is
    untouched then."""
    one = dict(PLANAR, methods=[{"k": 1, "s": 1}], halvings=1)
    write_config(tmp_path, {"a": one, "b": dict(one, h0=0.05), "c": dict(one, h0=0.2)}, select=["a", "b"])
    proc = ok(snakemake(tmp_path, "--cores", "2"))
    assert proc.stderr.count("rule solve:") == 1 and proc.stderr.count("rule aggregate:") == 2
    assert proc.stderr.count("rule render:") == 2
    assert "solve_study" not in proc.stderr and not (tmp_path / "results" / "c").exists()
    for name, h in (("a", "0.1"), ("b", "0.05")):
        assert json.loads((tmp_path / "results" / name / "solve.json").read_text())["study"] == name
        assert f"[{name}] 2 runs: 0 reused, 2 to compute" in (tmp_path / "logs" / name / "solve.log").read_text()
        assert f"[{name}] aggregated 2 rows" in (tmp_path / "logs" / name / "aggregate.log").read_text()
        assert read_csv(tmp_path / "results" / name / "errors.csv")[0]["h"] == h
    before = (tmp_path / "results" / "a" / "errors.csv").stat().st_mtime_ns

    proc = ok(snakemake(tmp_path, "--cores", "2", "results/c/table.md"))
    assert proc.stderr.count("rule solve_study:") == 1 and proc.stderr.count("rule aggregate:") == 1
    assert "rule solve:" not in proc.stderr and proc.stderr.count("rule render:") == 1
    assert read_csv(tmp_path / "results" / "c" / "errors.csv")[0]["h"] == "0.2"
    assert (tmp_path / "results" / "a" / "errors.csv").stat().st_mtime_ns == before
    again = ok(snakemake(tmp_path, "--cores", "2"))  # the default target is still complete
    assert "Nothing to be done" in again.stdout + again.stderr and "rule " not in again.stderr


def _start(cmd: list[str], log: Path, **kw) -> subprocess.Popen:
    return subprocess.Popen(cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True, **kw)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


@contextlib.contextmanager
def external_cluster(folder: Path, env: dict, nworkers: int = 2):
    """A `dask scheduler` and `dask worker --nworkers N` started in ``folder`` (not the study's), on loopback, with
    ``env``; yields the scheduler's address and stops both process groups (by pid) on the way out."""
    sched_file = folder / "scheduler.json"
    cmd = [str(BIN / "dask"), "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard"]
    sched = _start(cmd + ["--scheduler-file", str(sched_file)], folder / "scheduler.log", cwd=folder, env=env)
    workers = None
    try:
        for _ in range(300):
            if sched_file.exists() and sched_file.stat().st_size:
                break
            time.sleep(0.1)
        address = json.loads(sched_file.read_text())["address"]
        cmd = [str(BIN / "dask"), "worker", address, "--nworkers", str(nworkers), "--nthreads", "1"]
        workers = _start(cmd + ["--host", "127.0.0.1", "--no-dashboard"], folder / "workers.log", cwd=folder, env=env)
        yield address
    finally:
        if workers is not None:
            _stop(workers)
        _stop(sched)


def test_an_external_dask_scheduler_and_workers(tmp_path):
    """`dask scheduler` and `dask worker` as separate processes on loopback; the config points at them."""
    sched_file = tmp_path / "scheduler.json"
    sched = _start(
        [str(BIN / "dask"), "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard"]
        + ["--dashboard-address", "127.0.0.1:0", "--scheduler-file", str(sched_file)],
        tmp_path / "scheduler.log",
    )
    workers = None
    try:
        for _ in range(300):
            if sched_file.exists() and sched_file.stat().st_size:
                break
            time.sleep(0.1)
        address = json.loads(sched_file.read_text())["address"]
        assert address.startswith("tcp://127.0.0.1:")
        workers = _start(
            [str(BIN / "dask"), "worker", "--scheduler-file", str(sched_file), "--nworkers", "2"]
            + ["--nthreads", "1", "--host", "127.0.0.1", "--no-dashboard"],
            tmp_path / "workers.log",
        )
        from distributed import Client

        with Client(address, timeout=30) as client:
            client.wait_for_workers(2, timeout=60)
            external = set(client.scheduler_info()["workers"])
        write_config(tmp_path, {"tiny": PLANAR}, dask={"address": address})
        ok(snakemake(tmp_path, "--cores", "2"))
        check_outputs(tmp_path, "tiny", PLANAR, 6)
        used = {read_attrs(str(p))["worker"] for p in stores(tmp_path, "tiny")}
        assert used <= external and used  # the runs ran on the external workers
        assert f"computing on scheduler {address}" in (tmp_path / "logs" / "tiny" / "solve.log").read_text()
    finally:
        if workers is not None:
            _stop(workers)
        _stop(sched)


def test_jobs_submitted_through_the_generic_cluster_executor(tmp_path, monkeypatch):
    """`--profile workflow/profiles/local-submit`: every job goes through the submit script. Each job is a Snakemake
    process of its own that parses the workflow again (as under SLURM): it reads the plan, expanding nothing."""
    write_config(tmp_path, {"tiny": PLANAR})
    (tmp_path / "workflow").symlink_to(ROOT / "workflow")  # the profile names the script relative to the workdir
    trace = traced(tmp_path, monkeypatch)
    ok(snakemake(tmp_path, "--profile", str(ROOT / "workflow" / "profiles" / "local-submit"), timeout=400))
    check_once(trace, instances=1, methods=2)
    check_outputs(tmp_path, "tiny", PLANAR, 6)
    submitted = (tmp_path / ".snakemake" / "local_submit" / "submitted.txt").read_text().splitlines()
    assert len(submitted) == 3  # solve, aggregate and render: each one a submitted job script
    assert all("snakejob" in line for line in submitted)


def test_a_failed_run_is_shown_as_failed_and_the_aggregation_completes(tmp_path):
    """HBVM(1,1) with h = 2 diverges at step 0 on the pendulum: the table says so, the other rows are numbers."""
    study = dict(PLANAR, methods=[{"k": 1, "s": 1}], t_end=4, h=[2.0, 0.5, 0.25], halvings=None, h0=None)
    study = {k: v for k, v in study.items() if v is not None}
    write_config(tmp_path, {"div": study})
    ok(snakemake(tmp_path, "--cores", "2"))
    res = tmp_path / "results" / "div"
    rows = read_csv(res / "errors.csv")
    assert [r["status"] for r in rows] == ["failed", "ok", "ok"]
    assert rows[0]["e_s"] == "" and "step 0" in rows[0]["error"] and float(rows[1]["e_s"]) > 0
    assert rows[1]["rate_s"] == "" and rows[2]["rate_s"] != ""  # no rate against a failed row
    assert (res / "runs" / "hbvm_k1_s1" / "h=2.0.zarr.zip.failed.json").exists()
    assert not (res / "runs" / "hbvm_k1_s1" / "h=2.0.zarr.zip").exists()
    md = (res / "table.md").read_text()
    assert "| 2 | failed |" in md and "nan" not in md.lower()
    ds = xr.open_zarr(res / "errors.zarr")
    assert list(ds.status.values[0]) == [1, 0, 0]
