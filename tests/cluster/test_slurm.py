"""Scale-out on a real SLURM cluster: the same small study three ways, the same errors.csv.

The study's problem is a user module (``slurm_user_problem:pendulum``) in the working directory,
so the SLURM jobs and the Dask workers they start must import it from there.

- locally (``snakemake --cores 2``, a Dask LocalCluster): the reference errors.csv;
- through Snakemake's SLURM executor with the shipped profile
  (``--workflow-profile workflow/profiles/slurm``): solve and aggregate are sbatch jobs with
  the resources of config.yaml's ``resources:`` and the rule's threads;
- with ``dask: {cluster: slurm}``: the solve step's Dask workers are SLURM jobs started by
  dask-jobqueue's SLURMCluster, as many as the pending runs need up to ``dask.jobs``, and
  cancelled at the end; worker jobs that SLURM holds back are reported after ``dask.worker_timeout``
  with their squeue state, and cancelled.

errors.csv is compared byte for byte, the whole file (the measured wall times are in
timings.csv). A thread polls ``squeue`` while the workflow runs; what it saw is printed, attached to
the test report (``record_property``) and written to ``squeue.txt`` in the test's folder.

The tests marked ``slurm`` need a running SLURM whose node is up (``.ci/slurm_up.sh`` starts a
single-node one on 127.0.0.1, as CI does); elsewhere they skip and say why. Every address is on
127.0.0.1: SLURM's (slurm.conf), the Dask scheduler's and the workers' (hbvm_workflow.cluster).
The job-script test at the end needs no SLURM and always runs.
"""

from __future__ import annotations

import csv
import filecmp
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PROFILE = ROOT / "workflow" / "profiles" / "slurm"
#: wall-clock limit of one snakemake run (timeout -k 10 LIMIT); the plugin's status checks back off 1, 12, 33, 64 s
LIMIT = 300
#: a user problem module in the working directory: the SLURM jobs and the Dask workers must import it
USER_MODULE = (
    '"""The planar pendulum, given as a user problem (module:factory) from the working directory."""\n'
    "import hbvm_core\n\n\n"
    "def pendulum():\n"
    '    return hbvm_core.get_problem("planar_pendulum")\n'
)
STUDY = {
    "problem": "slurm_user_problem:pendulum",
    "backend": "numpy",
    "methods": [{"k": 1, "s": 1}, {"k": 2, "s": 2}],
    "t_end": 1,
    "h0": 0.1,
    "halvings": 1,
    "errors": {"reference": "exact", "norm": 1, "sample": "all"},
}
RUNS = 4  # 2 methods x 2 step sizes
#: local Dask workers of the solve job run as one SLURM job (its threads, so its --cpus-per-task)
WORKERS = 2
#: resources of the SLURM executor's jobs, from config.yaml (small enough for a 2-core CI node)
RESOURCES = {"solve": {"mem_mb": 700, "runtime": 7}, "aggregate": {"mem_mb": 600, "runtime": 6}}


def slurm_unavailable() -> str | None:
    """Why the SLURM tests cannot run here, or None when sinfo shows a node that takes jobs."""
    if shutil.which("sinfo") is None or shutil.which("sbatch") is None:
        return "SLURM is not installed (no sinfo/sbatch); CI starts one with .ci/slurm_up.sh"
    try:
        out = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"sinfo failed: {exc}"
    states = out.stdout.split()
    if out.returncode != 0 or not any(s.rstrip("*~#") in ("idle", "mixed", "allocated") for s in states):
        why = out.stderr.strip().splitlines()[-1:] or states or ["no nodes"]
        return f"no SLURM node is up (sinfo -h -o %T: {why[0]}); start one with: sudo bash .ci/slurm_up.sh"
    return None


SKIP = slurm_unavailable()


def needs_slurm(test):
    """Marked slurm (and slow), skipped with the reason where no SLURM node is up."""
    return pytest.mark.slurm(pytest.mark.slow(pytest.mark.skipif(SKIP is not None, reason=SKIP or "")(test)))


# --------------------------------------------------------------------------- helpers
def write_config(workdir: Path, **extra) -> Path:
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "slurm_user_problem.py").write_text(USER_MODULE)
    path = workdir / "config.yaml"
    path.write_text(yaml.safe_dump({"studies": {"tiny": STUDY}, **extra}, sort_keys=False))
    return path


def snakemake(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    """The repository's Snakefile on workdir/config.yaml, under `timeout -k 10 LIMIT` (Snakemake catches SIGTERM)."""
    cmd = ["timeout", "-k", "10", str(LIMIT), str(BIN / "snakemake"), "-s", str(ROOT / "Snakefile")]
    cmd += ["-d", str(workdir), "--configfile", str(workdir / "config.yaml"), *args]
    env = dict(os.environ, MPLBACKEND="Agg", PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=LIMIT + 30, env=env, cwd=workdir)
    (workdir / "snakemake.log").write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 0, f"snakemake exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return proc


def assert_same_errors(path: Path, reference: Path) -> None:
    """errors.csv byte for byte as the local run's (every run in it, none failed)."""
    assert filecmp.cmp(path, reference, shallow=False), (
        f"{path} differs from the local run:\n{path.read_text()}\n{reference.read_text()}"
    )
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == RUNS and all(r["status"] == "ok" for r in rows)


def squeue_jobs(*args: str) -> list[dict]:
    """squeue rows (every state, incl. jobs finished in the last MinJobAge seconds) as dicts."""
    fields = {"id": "%i", "name": "%j", "state": "%T", "cpus": "%C", "mem": "%m", "time": "%l", "comment": "%k"}
    fmt = "|".join(fields.values())
    out = subprocess.run(["squeue", "-h", "-t", "all", "-o", fmt, *args], capture_output=True, text=True, timeout=20)
    return [dict(zip(fields, line.split("|"), strict=True)) for line in out.stdout.splitlines() if line.strip()]


class SqueueWatch(threading.Thread):
    """Polls squeue every 0.3 s: every (job, state, ...) it saw, with the first time, for the jobs started meanwhile."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.before = {j["id"] for j in squeue_jobs()}
        self.seen: dict[tuple, float] = {}
        self.t0 = time.monotonic()
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            try:
                jobs = squeue_jobs()
            except (OSError, subprocess.SubprocessError):
                jobs = []
            for j in jobs:
                if j["id"] not in self.before:
                    self.seen.setdefault(tuple(j.values()), time.monotonic() - self.t0)
            self.halt.wait(0.3)

    def stop(self) -> None:
        self.halt.set()
        self.join(10)

    def jobs(self) -> dict[str, dict]:
        """The jobs seen, by id, with the states they were seen in."""
        out: dict[str, dict] = {}
        for key in sorted(self.seen, key=self.seen.get):
            j = dict(zip(("id", "name", "state", "cpus", "mem", "time", "comment"), key, strict=True))
            out.setdefault(j["id"], {**j, "states": []})["states"].append(j["state"])
        return out

    def report(self) -> str:
        lines = ["  t/s  JOBID NAME                 STATE       CPUS MIN_MEMORY TIME_LIMIT COMMENT"]
        for key, t in sorted(self.seen.items(), key=lambda kv: kv[1]):
            i, name, state, cpus, mem, limit, comment = key
            lines.append(f"{t:5.1f} {i:>6} {name[:20]:20} {state:11} {cpus:>4} {mem:>10} {limit:>10} {comment}")
        return "\n".join(lines)

    def cancel_leftovers(self) -> None:
        """scancel the jobs this test started that are still queued or running (by id)."""
        ids = [i for i, j in self.jobs().items() if j["states"][-1] in ("PENDING", "RUNNING", "CONFIGURING")]
        if ids:
            subprocess.run(["scancel", *ids], capture_output=True, timeout=20)


def record(watch: SqueueWatch, workdir: Path, record_property, title: str) -> str:
    text = f"{title}\n{watch.report()}\n"
    (workdir / "squeue.txt").write_text(text)
    record_property("squeue", text)
    print(text)
    return text


@pytest.fixture(scope="module")
def local_errors(tmp_path_factory) -> Path:
    """errors.csv of the study run locally (snakemake --cores 2, LocalCluster)."""
    if SKIP is not None:
        pytest.skip(SKIP)
    workdir = tmp_path_factory.mktemp("local")
    write_config(workdir)
    snakemake(workdir, "--cores", "2")
    return workdir / "results" / "tiny" / "errors.csv"


def workers_of(workdir: Path) -> set[str]:
    """The Dask worker that computed each run (recorded in its store)."""
    from hbvm_workflow.storage import read_attrs

    stores = sorted((workdir / "results" / "tiny" / "runs").glob("*/[hn]=*.zarr.zip"))
    assert len(stores) == RUNS
    return {read_attrs(str(p))["worker"] for p in stores}


# --------------------------------------------------------------------------- tests
@needs_slurm
def test_the_rules_run_as_slurm_jobs_with_the_shipped_profile(tmp_path, local_errors, record_property):
    """snakemake --workflow-profile workflow/profiles/slurm: solve, aggregate and render are sbatch jobs; same
    errors.csv."""
    write_config(tmp_path, resources=RESOURCES, dask={"n_workers": WORKERS})
    watch = SqueueWatch()
    watch.start()
    t0 = time.monotonic()
    try:
        proc = snakemake(tmp_path, "--workflow-profile", str(PROFILE), "--slurm-init-seconds-before-status-checks", "1")
    finally:
        watch.stop()
        watch.cancel_leftovers()
    wall = time.monotonic() - t0
    record(watch, tmp_path, record_property, f"squeue during `snakemake --workflow-profile slurm` ({wall:.0f} s):")
    out = proc.stdout + proc.stderr

    # each rule with an action was one sbatch job (one study: one solve, one aggregate, one render),
    # and squeue saw it with the rule's resources
    submitted = dict(re.findall(r"slurm_logs/rule_(\w+?)/(\d+)\.log", out))
    assert sorted(submitted) == ["aggregate", "render", "solve"], out[-3000:]
    jobs = watch.jobs()
    for rule, jobid in submitted.items():
        assert jobid in jobs, f"squeue never showed the {rule} job {jobid}:\n{watch.report()}"
        job = jobs[jobid]
        assert job["comment"] == f"rule_{rule}"
        res = RESOURCES["aggregate" if rule == "render" else rule]  # render takes resources.aggregate
        assert job["mem"] == f"{res['mem_mb']}M"  # config resources.<rule>.mem_mb -> --mem
        assert job["time"] == f"{res['runtime']}:00"  # runtime (minutes) -> -t
        assert "RUNNING" in job["states"] and job["states"][-1] == "COMPLETED"
    assert jobs[submitted["solve"]]["cpus"] == str(WORKERS)  # threads (dask.n_workers) -> --cpus-per-task
    assert jobs[submitted["aggregate"]]["cpus"] == jobs[submitted["render"]]["cpus"] == "1"
    assert "localrule all" in out  # only the target rule ran here

    # the runs were computed inside the solve job, on its LocalCluster on loopback; the numbers are the local ones
    assert all(w.startswith("tls://127.0.0.1:") for w in workers_of(tmp_path))  # TLS: temporary credentials
    assert f"LocalCluster ({WORKERS} worker processes" in (tmp_path / "logs" / "tiny" / "solve.log").read_text()
    assert_same_errors(tmp_path / "results" / "tiny" / "errors.csv", local_errors)


@needs_slurm
def test_dask_workers_run_as_slurm_jobs(tmp_path, local_errors, record_property):
    """dask: {cluster: slurm}: the solve step's workers are SLURM jobs (dask-jobqueue); same errors.csv."""
    cap = RUNS - 1  # fewer worker jobs than runs: the cap holds
    dask = {
        "cluster": "slurm",
        "cores": 1,
        "memory": "500MB",
        "walltime": "00:10:00",
        "queue": "debug",
        "jobs": cap,
        "worker_timeout": 120,
    }
    write_config(tmp_path, dask=dask)
    watch = SqueueWatch()
    watch.start()
    t0 = time.monotonic()
    try:
        snakemake(tmp_path, "--cores", "2")
        wall = time.monotonic() - t0
        time.sleep(1.0)  # one more poll: the cancelled worker jobs' final state
    finally:
        watch.stop()
        watch.cancel_leftovers()
    record(
        watch,
        tmp_path,
        record_property,
        f"squeue during `snakemake --cores 2` with dask.cluster: slurm ({wall:.0f} s):",
    )

    # the worker jobs: as many as the pending runs need, up to dask.jobs, with the config's resources
    jobs = {i: j for i, j in watch.jobs().items() if j["name"] == "dask-worker"}
    assert len(jobs) == cap, watch.report()
    for j in jobs.values():
        assert "RUNNING" in j["states"], watch.report()
        assert (j["cpus"], j["mem"], j["time"]) == ("1", "477M", "10:00")  # 500 MB = 477 MiB; walltime
    # closed at the end: none is still queued or running
    final = {j["id"]: j["state"] for j in squeue_jobs("-j", ",".join(jobs))}
    assert set(final.values()) <= {"CANCELLED", "COMPLETED"}, final

    # every run was computed on one of those workers, and every worker address was on loopback
    logs = {i: (tmp_path / "logs" / "dask-slurm" / f"dask-worker-{i}.err").read_text() for i in jobs}
    # "Start Nanny at: 'tls://...'", "Start worker at: tls://...", "dashboard at: 127.0.0.1:port"
    listen = re.compile(r"(?:Start Nanny|Start worker|dashboard) at:\s+'?([^'\s]+)'?$", re.M)
    addresses = {i: listen.findall(text) for i, text in logs.items()}
    assert all(len(a) == 3 for a in addresses.values()), addresses
    assert all(re.fullmatch(r"(tls://)?127\.0\.0\.1:\d+", a) for a in sum(addresses.values(), [])), addresses
    started = {m for t in logs.values() for m in re.findall(r"Start worker at:\s+(\S+)", t)}
    assert workers_of(tmp_path) <= started
    log = (tmp_path / "logs" / "tiny" / "solve.log").read_text()
    assert f"computing on SLURMCluster (up to {cap} worker jobs of 1 cores, on 127.0.0.1)" in log
    manifest = json.loads((tmp_path / "results" / "tiny" / "solve.json").read_text())
    assert len(manifest["computed"]) == RUNS
    assert_same_errors(tmp_path / "results" / "tiny" / "errors.csv", local_errors)


@needs_slurm
def test_workers_that_never_start_are_reported_and_cancelled(tmp_path, monkeypatch):
    """Worker jobs held back by SLURM: the solve step's client fails after dask.worker_timeout, naming their state."""
    from hbvm_core.errors import HBVMError
    from hbvm_workflow.cluster import dask_client

    monkeypatch.chdir(tmp_path)
    cfg = {"cluster": "slurm", "memory": "200MB", "job_extra_directives": ["--begin=now+1hour"], "worker_timeout": 3}
    with pytest.raises(HBVMError) as err, dask_client(cfg, tasks=2):
        pytest.fail("a worker joined")  # pragma: no cover
    msg = str(err.value)
    assert "no Dask worker joined within dask.worker_timeout = 3 s" in msg
    ids = re.findall(r"(\d+) PENDING BeginTime", msg)
    assert len(ids) == 2, msg  # two pending runs: two worker jobs
    states = {j["id"]: j["state"] for j in squeue_jobs("-j", ",".join(ids))}
    assert states == dict.fromkeys(ids, "CANCELLED"), states  # closed: the held jobs are gone too


def test_the_worker_job_script_is_on_loopback_and_runs_this_python(tmp_path, monkeypatch):
    """The SLURMCluster built from a config: its sbatch script (no SLURM needed to write it)."""
    from dask_jobqueue import SLURMCluster

    from hbvm_core.errors import ConfigError
    from hbvm_workflow.cluster import slurm_jobs, slurm_options, slurm_security, temporary_security

    monkeypatch.chdir(tmp_path)
    cfg = {"cluster": "slurm", "cores": 2, "memory": "2GB", "walltime": "01:00:00", "queue": "short"}
    cfg |= {"account": "proj", "job_extra_directives": ["--qos=low"], "job_script_prologue": ["module load x"]}
    kw = slurm_options(cfg, env={"HBVM_X": "a b"})
    with SLURMCluster(**kw) as cluster:
        script = cluster.job_script()
        assert cluster.scheduler_address.startswith("tcp://127.0.0.1:")
    for line in ("#SBATCH -p short", "#SBATCH -A proj", "#SBATCH --cpus-per-task=2", "#SBATCH -t 01:00:00"):
        assert line in script
    assert "#SBATCH --qos=low" in script and "#SBATCH --mem=2G" in script
    assert script.index("module load x") < script.index("export OMP_NUM_THREADS=1") < script.index(sys.executable)
    assert "export HBVM_X='a b'" in script and f"export PYTHONPATH={tmp_path}" in script
    loopback = r"--host 127\.0\.0\.1 --dashboard-address 127\.0\.0\.1:0$"
    assert re.search(r"--nthreads 1 .*--nworkers 2 .*" + loopback, script, re.M)
    assert re.search(r"dask_worker tcp://127\.0\.0\.1:\d+ ", script)
    # as the workflow starts it: TLS, the workers' temporary credentials in files next to their logs
    with SLURMCluster(**kw, **slurm_security(kw, temporary_security())) as cluster:
        script = cluster.job_script()
        assert cluster.scheduler_address.startswith("tls://127.0.0.1:")
    creds = re.findall(r"--tls-(?:ca-file|cert|key) (\S+)", script)
    assert len(creds) == 3 and all(os.path.isfile(os.path.expandvars(c)) for c in creds), script
    assert all(Path(c).parent == Path(kw["log_directory"]).resolve() for c in creds), creds

    # the number of worker jobs: one worker process per pending run, at most dask.jobs (default 8)
    assert [slurm_jobs({"cores": 1}, n) for n in (1, 3, 8, 20)] == [1, 3, 8, 8]
    assert [slurm_jobs({"cores": 4, "jobs": 2}, n) for n in (1, 5, 9)] == [1, 2, 2]
    # another network: an interface instead of loopback, no --host for the workers
    other = slurm_options({"cluster": "slurm", "interface": "ib0"})
    assert other["interface"] == "ib0" and "worker_extra_args" not in other
    with pytest.raises(ConfigError, match="interface or scheduler_host"):
        slurm_options({"interface": "ib0", "scheduler_host": "10.0.0.1"})
    with pytest.raises(ConfigError, match=r"dask\.processes = 3"):
        slurm_options({"cores": 4, "processes": 3})
