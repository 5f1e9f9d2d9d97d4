"""Scale-out on a real SLURM cluster of several hosts: the same small studies three ways, the same errors.csv.

The cluster is the multi-host lab of ``.ci/lab_up.sh`` (``.ci/lab.md``): a head host and two compute
hosts, each a network namespace with its own hostname, SLURM's slurmctld on the head and a slurmd on each
compute host (partition with ``LLN=YES``: each job goes to the least loaded node). The test process stays
in the root namespace; snakemake, sbatch and squeue run on the head host (``_lab.Lab.cmd``: nsenter).

The studies' problem is a user module (``slurm_user_problem:pendulum``) in the working directory, so the
SLURM jobs and the Dask workers they start must import it from there. Its gradient sleeps a little at each
call, as an expensive callback would: the runs overlap the workers' start-up (so that every worker gets
some), without loading the 2-core CI machine.

- locally (``snakemake --cores 2``, a Dask LocalCluster, in the root namespace): the reference errors.csv;
- through Snakemake's SLURM executor with the shipped profile
  (``--workflow-profile workflow/profiles/slurm``): one solve job per study (``solve_per_study``), which
  SLURM puts on both compute hosts, then an aggregate and a render job per study, with the resources of config.yaml's
  ``resources:`` and the rule's threads;
- with ``dask: {cluster: slurm, interface: lab0}``: the solve step (on the head) starts its Dask workers as
  SLURM jobs (dask-jobqueue's SLURMCluster), on both compute hosts, as many as the pending runs need up to
  ``dask.jobs``, and cancels them at the end; worker jobs that SLURM holds back are reported after
  ``dask.worker_timeout`` with their squeue state, and cancelled.
- a ``save: summary`` sweep above ``dask.spread_after`` through the profile alone: its one-CPU solve job submits
  Dask worker jobs of half a node, sized from the study and the partition; its shards run on both compute hosts.

Each test reads from the run stores which host computed each run and asserts two distinct compute hosts.
errors.csv is compared byte for byte, the whole file: every host is this machine, with the same code and
libraries (the measured wall times are in timings.csv). A thread polls ``squeue`` while the workflow runs;
what it saw is printed, attached to the test report (``record_property``) and written to ``squeue.txt``.

Without the lab (no root, or not started) the tests marked ``slurm`` skip and say why. Every address is on
loopback or inside the lab. The job-script test at the end needs no SLURM and always runs.
"""

from __future__ import annotations

import csv
import filecmp
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from _lab import Lab, run_hosts, unavailable
from _trace import check_once, traced

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PROFILE = ROOT / "workflow" / "profiles" / "slurm"
#: wall-clock limit of one snakemake run (timeout -k 10 LIMIT); the plugin's status checks back off 1, 12, 33, 64 s
LIMIT = 300
#: a user problem module in the working directory: the SLURM jobs and the Dask workers must import it
USER_MODULE = (
    '"""The planar pendulum, given as a user problem (module:factory) from the working directory; its gradient\n'
    'sleeps DELAY s per call, as an expensive callback would (the numbers are the built-in problem\'s)."""\n'
    "import dataclasses\nimport time\n\nimport hbvm_core\n\nDELAY = 0.02\n\n\n"
    "def pendulum():\n"
    '    pb = hbvm_core.get_problem("planar_pendulum")\n\n'
    "    def grad_U(Q):\n"
    "        time.sleep(DELAY)\n"
    "        return pb.grad_U(Q)\n\n"
    "    return dataclasses.replace(pb, grad_U=grad_U)\n"
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
#: two studies: the SLURM profile makes one solve job of each, on two hosts
STUDIES = {"tiny": STUDY, "tiny2": STUDY | {"h0": 0.125}}
#: local Dask workers of each solve job (its threads, so its --cpus-per-task)
WORKERS = 2
#: resources of the SLURM executor's jobs, from config.yaml (small enough for a 2-core CI machine)
RESOURCES = {"solve": {"mem_mb": 700, "runtime": 7}, "aggregate": {"mem_mb": 600, "runtime": 6}}

SKIP = unavailable()


def needs_slurm(test):
    """Marked slurm (and slow), skipped with the reason where the lab is not up."""
    return pytest.mark.slurm(pytest.mark.slow(pytest.mark.skipif(SKIP is not None, reason=SKIP or "")(test)))


@pytest.fixture(scope="module")
def lab():
    if SKIP is not None:
        pytest.skip(SKIP)
    lab = Lab()
    yield lab
    lab.stop_all()


# --------------------------------------------------------------------------- helpers
def write_config(workdir: Path, studies: dict | None = None, **extra) -> Path:
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "slurm_user_problem.py").write_text(USER_MODULE)
    path = workdir / "config.yaml"
    path.write_text(yaml.safe_dump({"studies": studies or {"tiny": STUDY}, **extra}, sort_keys=False))
    return path


def snakemake_cmd(workdir: Path, *args: str) -> list[str]:
    """The repository's Snakefile on workdir/config.yaml, under `timeout -k 10 LIMIT` (Snakemake catches SIGTERM)."""
    cmd = ["timeout", "-k", "10", str(LIMIT), str(BIN / "snakemake"), "-s", str(ROOT / "Snakefile")]
    return cmd + ["-d", str(workdir), "--configfile", str(workdir / "config.yaml"), *args]


def finished(workdir: Path, proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    (workdir / "snakemake.log").write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 0, f"snakemake exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return proc


def snakemake_here(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    """snakemake in this (the root) namespace: a local run."""
    env = Lab.env(MPLBACKEND="Agg")
    cmd = snakemake_cmd(workdir, *args)
    return finished(
        workdir, subprocess.run(cmd, capture_output=True, text=True, timeout=LIMIT + 30, env=env, cwd=workdir)
    )


def snakemake_on(lab: Lab, workdir: Path, *args: str) -> subprocess.CompletedProcess:
    """snakemake on the lab's head host (SLURM jobs, Dask workers on the compute hosts)."""
    proc = lab.run(
        lab.head, *snakemake_cmd(workdir, *args), cwd=workdir, env=Lab.env(MPLBACKEND="Agg"), timeout=LIMIT + 30
    )
    return finished(workdir, proc)


def assert_same_errors(path: Path, reference: Path) -> None:
    """errors.csv byte for byte as the local run's (every run in it, none failed): every lab host is this
    machine, with the same code and libraries."""
    assert filecmp.cmp(path, reference, shallow=False), (
        f"{path} differs from the local run:\n{path.read_text()}\n{reference.read_text()}"
    )
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == RUNS and all(r["status"] == "ok" for r in rows)


SQUEUE_FIELDS = {"id": "%i", "name": "%j", "state": "%T", "cpus": "%C", "mem": "%m", "time": "%l", "comment": "%k"}
SQUEUE_FIELDS |= {"nodes": "%N", "workdir": "%Z"}


def squeue_jobs(lab: Lab, *args: str) -> list[dict]:
    """squeue rows on the head (every state, incl. jobs finished in the last MinJobAge seconds) as dicts."""
    fmt = "|".join(SQUEUE_FIELDS.values())
    out = lab.run(lab.head, "squeue", "-h", "-t", "all", "-o", fmt, *args, timeout=20)
    return [dict(zip(SQUEUE_FIELDS, line.split("|"), strict=True)) for line in out.stdout.splitlines() if line.strip()]


#: the states of a job that still holds (or waits for) a node's CPUs and memory
ACTIVE = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED")


def node_states(lab: Lab) -> dict[str, str]:
    """{compute host: its state as sinfo gives it (idle, mix, alloc, comp, down*, ...)}."""
    out = lab.run(lab.head, "sinfo", "-h", "-N", "-o", "%N %t", timeout=20).stdout
    return dict(line.split(None, 1) for line in out.splitlines() if line.strip())


def wait_idle(lab: Lab, timeout: float = 60) -> None:
    """Wait until no job of the lab holds or waits for a node (an earlier test's cancelled jobs are COMPLETING for
    up to KillWait) and every compute host is idle: a test's jobs then find both free, as its assertions about
    where they ran assume (the spread test's second worker job once stayed PENDING, its first on the node of the
    solve job, until the first had done all the work)."""
    t0 = time.monotonic()
    while any(j["state"] in ACTIVE for j in squeue_jobs(lab)) or set(node_states(lab).values()) != {"idle"}:
        assert time.monotonic() - t0 < timeout, f"lab not idle after {timeout} s: {node_states(lab)}"
        time.sleep(0.5)


class SqueueWatch(threading.Thread):
    """Polls squeue every 0.3 s: every (job, state, ...) it saw, with the first time, for the jobs started meanwhile
    from ``workdir`` (their working directory: this test's, so that a test sees and cancels its own jobs only)."""

    def __init__(self, lab: Lab, workdir: Path) -> None:
        super().__init__(daemon=True)
        self.lab = lab
        self.workdir = Path(workdir).resolve()
        wait_idle(lab)
        self.before = {j["id"] for j in squeue_jobs(lab)}
        self.seen: dict[tuple, float] = {}
        self.t0 = time.monotonic()
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            try:
                jobs = squeue_jobs(self.lab)
            except (OSError, subprocess.SubprocessError):
                jobs = []
            for j in jobs:
                if j["id"] not in self.before and Path(j["workdir"]).resolve().is_relative_to(self.workdir):
                    self.seen.setdefault(tuple(j.values()), time.monotonic() - self.t0)
            self.halt.wait(0.3)

    def stop(self) -> None:
        self.halt.set()
        self.join(10)

    def jobs(self) -> dict[str, dict]:
        """The jobs seen, by id, with the states they were seen in and the nodes they ran on."""
        out: dict[str, dict] = {}
        for key in sorted(self.seen, key=self.seen.get):
            j = dict(zip(SQUEUE_FIELDS, key, strict=True))
            job = out.setdefault(j["id"], {**j, "states": [], "on": set()})
            job["states"].append(j["state"])
            job["on"] |= set(j["nodes"].split(",")) - {""}
        return out

    def report(self) -> str:
        lines = ["  t/s  JOBID NAME                 STATE       CPUS MIN_MEMORY TIME_LIMIT NODES  COMMENT"]
        for key, t in sorted(self.seen.items(), key=lambda kv: kv[1]):
            i, name, state, cpus, mem, limit, comment, nodes, _ = key
            lines.append(
                f"{t:5.1f} {i:>6} {name[:20]:20} {state:11} {cpus:>4} {mem:>10} {limit:>10} {nodes:6} {comment}"
            )
        return "\n".join(lines)

    def cancel_leftovers(self) -> None:
        """scancel the jobs this test started that are still queued or running (by id)."""
        ids = [i for i, j in self.jobs().items() if j["states"][-1] in ("PENDING", "RUNNING", "CONFIGURING")]
        if ids:
            self.lab.run(self.lab.head, "scancel", *ids, timeout=20)


def record(watch: SqueueWatch, workdir: Path, record_property, title: str) -> str:
    text = f"{title}\n{watch.report()}\n"
    (workdir / "squeue.txt").write_text(text)
    record_property("squeue", text)
    print(text)
    return text


@pytest.fixture(scope="module")
def local_errors(tmp_path_factory) -> dict[str, Path]:
    """errors.csv of each study run locally (snakemake --cores 2, LocalCluster), by study."""
    if SKIP is not None:
        pytest.skip(SKIP)
    workdir = tmp_path_factory.mktemp("local")
    write_config(workdir, STUDIES)
    snakemake_here(workdir, "--cores", "2")
    return {name: workdir / "results" / name / "errors.csv" for name in STUDIES}


def workers_of(workdir: Path, study: str = "tiny") -> set[str]:
    """The Dask worker that computed each run (recorded in its store)."""
    from hbvm_workflow.storage import read_attrs

    stores = sorted((workdir / "results" / study / "runs").glob("*/[hn]=*.zarr.zip"))
    assert len(stores) == RUNS
    return {read_attrs(str(p))["worker"] for p in stores}


# --------------------------------------------------------------------------- tests
@needs_slurm
def test_the_shipped_profile_spreads_the_studies_over_the_compute_hosts(
    tmp_path, lab, local_errors, record_property, monkeypatch
):
    """snakemake --workflow-profile workflow/profiles/slurm: one solve job per study, on both compute hosts, then
    an aggregate and a render job per study; the same errors.csv as locally. Each SLURM job parses the workflow
    again on its compute host: it reads the plan of the head's parse, which alone expanded the config."""
    write_config(tmp_path, STUDIES, resources=RESOURCES, dask={"n_workers": WORKERS})
    trace = traced(tmp_path, monkeypatch)
    watch = SqueueWatch(lab, tmp_path)
    watch.start()
    t0 = time.monotonic()
    try:
        proc = snakemake_on(
            lab, tmp_path, "--workflow-profile", str(PROFILE), "--slurm-init-seconds-before-status-checks", "1"
        )
    finally:
        watch.stop()
        watch.cancel_leftovers()
    wall = time.monotonic() - t0
    record(watch, tmp_path, record_property, f"squeue during `snakemake --workflow-profile slurm` ({wall:.0f} s):")
    out = proc.stdout + proc.stderr

    # each rule with an action was sbatch jobs, one per study: solve_study (solve_per_study), aggregate, render
    submitted = re.findall(r"slurm_logs/rule_(\w+?)/(?:(\w+)/)?(\d+)\.log", out)
    rules = sorted((rule, study) for rule, study, _ in submitted)
    assert rules == [(r, s) for r in ("aggregate", "render", "solve_study") for s in sorted(STUDIES)], out[-3000:]
    jobs = watch.jobs()
    for rule, _, jobid in submitted:
        assert jobid in jobs, f"squeue never showed the {rule} job {jobid}:\n{watch.report()}"
        job = jobs[jobid]
        resources = "solve" if rule == "solve_study" else "aggregate"  # render takes resources.aggregate
        assert job["comment"].startswith(f"rule_{rule}")
        assert job["mem"] == f"{RESOURCES[resources]['mem_mb']}M"  # config resources.<rule>.mem_mb -> --mem
        assert job["time"] == f"{RESOURCES[resources]['runtime']}:00"  # runtime (minutes) -> -t
        assert "RUNNING" in job["states"] and job["states"][-1] == "COMPLETED"
        # threads -> --cpus-per-task: the solve job's local workers; aggregate and render: one
        assert job["cpus"] == str(WORKERS if resources == "solve" else 1)
    assert "localrule all" in out  # only the target rule ran here
    check_once(trace, instances=len(STUDIES), methods=2 * len(STUDIES))  # the config expanded once, on the head

    # the two solve jobs ran side by side on the two compute hosts: each study's runs carry its job's host
    solve_nodes = {study: jobs[jobid]["on"] for rule, study, jobid in submitted if rule == "solve_study"}
    hosts = {study: set(run_hosts(tmp_path / "results" / study).values()) for study in STUDIES}
    assert all(len(h) == 1 for h in hosts.values()), hosts  # a study's runs: its one job's LocalCluster
    assert hosts == solve_nodes, (hosts, watch.report())  # the host in the stores is the job's node
    assert set().union(*hosts.values()) == set(lab.compute), (hosts, watch.report())  # both compute hosts

    for study in STUDIES:
        # computed inside the solve job, on its LocalCluster on loopback; the numbers are the local ones
        assert all(w.startswith("tls://127.0.0.1:") for w in workers_of(tmp_path, study))  # TLS, temporary
        assert f"LocalCluster ({WORKERS} worker processes" in (tmp_path / "logs" / study / "solve.log").read_text()
        assert_same_errors(tmp_path / "results" / study / "errors.csv", local_errors[study])


@needs_slurm
def test_dask_workers_run_as_slurm_jobs_on_both_compute_hosts(tmp_path, lab, local_errors, record_property):
    """dask: {cluster: slurm, interface: lab0}: the solve step (on the head) starts its workers as SLURM jobs
    (dask-jobqueue), on both compute hosts; same errors.csv."""
    cap = RUNS - 1  # fewer worker jobs than runs: the cap holds
    dask = {
        "cluster": "slurm",
        "interface": "lab0",  # every lab host's interface on the bridge (as ib0 on a real cluster)
        "cores": 1,
        "memory": "500MB",
        "walltime": "00:10:00",
        "queue": "lab",
        "jobs": cap,
        "worker_timeout": 120,
    }
    write_config(tmp_path, dask=dask)
    watch = SqueueWatch(lab, tmp_path)
    watch.start()
    t0 = time.monotonic()
    try:
        snakemake_on(lab, tmp_path, "--cores", "2")
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
        assert (j["cpus"], j["mem"], j["time"]) == ("1", "476M", "10:00")  # 476.8 MiB, rounded down
    # closed at the end: none is still queued or running
    final = {j["id"]: j["state"] for j in squeue_jobs(lab, "-j", ",".join(jobs))}
    assert set(final.values()) <= {"CANCELLED", "COMPLETED"}, final

    # every run was computed on one of those workers, each on its job's compute host, and the runs on both
    logs = {i: (tmp_path / "logs" / "dask-slurm" / f"dask-worker-{i}.err").read_text() for i in jobs}
    # "Start Nanny at: 'tls://...'", "Start worker at: tls://...", "dashboard at: host:port"
    listen = re.compile(r"(?:Start Nanny|Start worker|dashboard) at:\s+'?([^'\s]+)'?$", re.M)
    addresses = {i: listen.findall(text) for i, text in logs.items()}
    assert all(len(a) == 3 for a in addresses.values()), addresses
    for i, found in addresses.items():  # each on its node's lab address: inside the lab
        node = next(iter(jobs[i]["on"]))
        assert all(re.fullmatch(rf"(tls://)?{re.escape(lab.address(node))}:\d+", a) for a in found), (node, found)
    started = {m for t in logs.values() for m in re.findall(r"Start worker at:\s+(\S+)", t)}
    assert workers_of(tmp_path) <= started
    hosts = run_hosts(tmp_path / "results" / "tiny")
    assert len(hosts) == RUNS and set(hosts.values()) == set(lab.compute), (hosts, watch.report())
    log = (tmp_path / "logs" / "tiny" / "solve.log").read_text()
    assert f"computing on SLURMCluster (up to {cap} worker jobs of 1 cores, on lab0)" in log
    manifest = json.loads((tmp_path / "results" / "tiny" / "solve.json").read_text())
    assert len(manifest["computed"]) == RUNS
    assert_same_errors(tmp_path / "results" / "tiny" / "errors.csv", local_errors["tiny"])


#: a save: summary sweep of 16 runs in 8 shards of 2 whose estimated work (17 s: 4 workers wanted, 2 worker jobs of
#: half a lab node) is above its dask.spread_after; each shard takes a few seconds, so that both jobs' workers get some
SWEEP = {
    "kind": "sweep",
    "problem": "planar_pendulum",
    "grid": {"theta_dot0": [1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7]},
    "methods": [{"k": 1, "s": 1}],
    "t_end": 7000,
    "h": [0.01, 0.005],
    "errors": {"reference": "exact", "norm": 1, "sample": 1000},
    "shard_runs": 2,
}


@needs_slurm
def test_the_shipped_profile_spreads_a_large_summary_study_over_both_compute_hosts(tmp_path, lab, record_property):
    """snakemake --workflow-profile workflow/profiles/slurm on a save: summary sweep above dask.spread_after: its
    one solve job asks for one CPU and submits Dask worker jobs of half a node (dask-jobqueue), sized from the
    study and the partition; its shards land on both compute hosts (their records say where), the solve log says
    what it chose in one line, and the errors are the local run's."""
    from hbvm_workflow.layout import shard_store
    from hbvm_workflow.shards import read_record

    # min_workers 4: the shards wait for both worker jobs' two workers each; they take some 5 s, less than SLURM
    # may take to start the second job (its first then did every shard, in CI: one host only)
    config = {"select": ["sw"], "resources": RESOURCES, "dask": {"spread_after": 1, "min_workers": 4}}
    local = tmp_path / "local"
    write_config(local, {"sw": SWEEP}, select=["sw"])
    snakemake_here(local, "--cores", "2")
    spread = tmp_path / "spread"
    write_config(spread, {"sw": SWEEP}, **config)
    watch = SqueueWatch(lab, tmp_path)
    watch.start()
    t0 = time.monotonic()
    try:
        snakemake_on(lab, spread, "--workflow-profile", str(PROFILE), "--slurm-init-seconds-before-status-checks", "1")
        wall = time.monotonic() - t0
        time.sleep(1.0)  # one more poll: the cancelled worker jobs' final state
    finally:
        watch.stop()
        watch.cancel_leftovers()
    record(watch, spread, record_property, f"squeue during a spread sweep through the profile ({wall:.0f} s):")

    jobs = watch.jobs()
    solve = [j for j in jobs.values() if j["comment"].startswith("rule_solve_summary")]
    assert len(solve) == 1 and solve[0]["cpus"] == "1", watch.report()  # the solve job: one CPU, no local cluster
    workers = [j for j in jobs.values() if j["name"] == "dask-worker"]
    # 8 runs of 7*10^5 and 8 of 1.4*10^6 steps: 17 s estimated, one worker per 5 s: 4, 2 per job of half a node
    assert len(workers) == 2, watch.report()
    node_mb = int(lab.run(lab.head, "sinfo", "-h", "-N", "-o", "%m", timeout=20).stdout.split()[0])
    for j in workers:
        assert "RUNNING" in j["states"] and j["cpus"] == "2", watch.report()
        mem = int(j["mem"][:-1]) * (1024 if j["mem"].endswith("G") else 1)  # squeue: 3150M, or 3G for 3072M
        assert mem == node_mb // 2, (j, node_mb)  # half the node's memory, rounded down: fits beside the solve job
    log = (spread / "logs" / "sw" / "solve.log").read_text()
    chose = [line for line in log.splitlines() if "spread over SLURM" in line]
    assert len(chose) == 1 and "8 shard tasks" in chose[0] and "2 worker jobs of 2 cores" in chose[0], log
    assert "scheduler on lab0" in chose[0], chose  # this node's interface, found, not loopback

    store = shard_store(str(spread / "results"), "sw")
    hosts = [read_record(store, slot)["host"] for slot in range(8)]
    assert set(hosts) == set(lab.compute), (hosts, watch.report())  # both compute hosts computed shards
    record_property("shard_hosts", hosts)
    ours, theirs = (read_csv_rows(d / "results" / "sw" / "errors.csv") for d in (spread, local))
    assert len(ours) == len(theirs) == 16 and all(r["status"] == "ok" for r in ours)
    for a, b in zip(ours, theirs, strict=True):  # the same loop on the same machine: round-off at most
        for key in ("e_s", "e_H", "e_g"):
            x, y = float(a[key]), float(b[key])
            # eps per step over 1.4*10^6 steps (x10): 3.1e-9 relative; e_g may be round-off itself: 1e-14 absolute
            assert abs(x - y) <= 10 * 2.2e-16 * 1.4e6 * abs(y) + 1e-14, (key, a, b)


def log_tails(workdir: Path, lines: int = 15) -> str:
    """The last lines of each worker job's log (logs/dask-slurm/*.err), for a failure message."""
    out = []
    for path in sorted((workdir / "logs" / "dask-slurm").glob("*.err")):
        out += [f"== {path.name}", *path.read_text(errors="replace").splitlines()[-lines:]]
    return "\n".join(out)


def read_csv_rows(path: Path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


#: run on the head: a SLURMCluster whose worker jobs SLURM holds back (--begin in an hour)
HELD_BACK = """
from hbvm_core.errors import HBVMError
from hbvm_workflow.cluster import dask_client
cfg = {"cluster": "slurm", "memory": "200MB", "job_extra_directives": ["--begin=now+1hour"], "worker_timeout": 3}
try:
    with dask_client(cfg, tasks=2):
        print("a worker joined")
except HBVMError as exc:
    print(exc)
"""


@needs_slurm
def test_workers_that_never_start_are_reported_and_cancelled(tmp_path, lab):
    """Worker jobs held back by SLURM: the solve step's client fails after dask.worker_timeout, naming their state."""
    proc = lab.run(lab.head, sys.executable, "-c", HELD_BACK, cwd=tmp_path, timeout=120)
    msg = proc.stdout.strip()
    assert "2 of 2 worker jobs not started within dask.worker_timeout = 3 s" in msg, proc.stdout + proc.stderr
    assert "0 Dask worker(s) joined, dask.min_workers = 1: stopping" in msg and "\n" not in msg, msg
    ids = re.findall(r"(\d+) PENDING BeginTime", msg)
    assert len(ids) == 2, msg  # two pending runs: two worker jobs
    states = {j["id"]: j["state"] for j in squeue_jobs(lab, "-j", ",".join(ids))}
    assert states == dict.fromkeys(ids, "CANCELLED"), states  # closed: the held jobs are gone too


#: run on the head: two worker jobs that only one compute host may run, one at a time (--exclusive): one starts,
#: the other waits (PENDING Resources); argv: the host, dask.min_workers
ONE_AT_A_TIME = """
import sys, time
from hbvm_core.errors import HBVMError
from hbvm_workflow.cluster import dask_client
node, need = sys.argv[1], int(sys.argv[2])
cfg = {"cluster": "slurm", "interface": "lab0", "memory": "200MB", "worker_timeout": 30, "min_workers": need,
       "job_extra_directives": [f"--nodelist={node}", "--exclusive"]}  # the workers reach the head on the bridge
told = []
try:
    with dask_client(cfg, tasks=2, tell=told.append) as client:
        time.sleep(35)  # past the timeout: the job not started is named
        print("went on with", len(client.scheduler_info(n_workers=-1)["workers"]), "worker(s)")
        print("told:", *told)
except HBVMError as exc:
    print("stopped:", exc)
"""


@needs_slurm
def test_a_worker_job_that_cannot_start_is_named_and_min_workers_decides(tmp_path, lab):
    """Two worker jobs, room for one: the other is named in one line with its squeue state; with min_workers 1 the
    client goes on with one worker, with min_workers 2 it stops."""
    node = lab.compute[0]
    watch = SqueueWatch(lab, tmp_path)
    watch.start()
    try:
        proc = lab.run(lab.head, sys.executable, "-c", ONE_AT_A_TIME, node, "1", cwd=tmp_path, timeout=150)
    finally:
        watch.stop()
    out = proc.stdout
    # on failure: what squeue showed of the two jobs and the end of each worker's log
    assert "went on with 1 worker(s)" in out, "\n".join([out + proc.stderr, watch.report(), log_tails(tmp_path)])
    told = [line for line in out.splitlines() if line.startswith("told:")]
    assert len(told) == 1 and "1 of 2 worker jobs not started within dask.worker_timeout = 30 s" in told[0], out
    assert re.search(r"\(\d+ PENDING \w+\); 1 Dask worker\(s\) joined: going on", told[0]), told[0]
    proc = lab.run(lab.head, sys.executable, "-c", ONE_AT_A_TIME, node, "2", cwd=tmp_path, timeout=150)
    assert "stopped: " in proc.stdout and "dask.min_workers = 2: stopping" in proc.stdout, proc.stdout + proc.stderr


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
    assert "#SBATCH --qos=low" in script and "#SBATCH --mem=1907M" in script  # 2e9 B = 1907.3 MiB, down
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


def test_solve_per_study_gives_each_study_its_solve_job_and_the_profile_sets_it(tmp_path):
    """solve_per_study: one solve_study job per study of the default target (a dry run; no SLURM needed), one
    solve job for all of them without it; the SLURM profile sets it."""
    write_config(tmp_path, STUDIES)

    def planned(*args: str) -> list[str]:
        cmd = snakemake_cmd(tmp_path, "-n", "--cores", "2", *args)
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=LIMIT, env=Lab.env(), cwd=tmp_path)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        return sorted(re.findall(r"^rule (solve\w*):\n\s+output: (\S+)", out.stdout + out.stderr, re.M))

    assert planned() == [("solve", "results/tiny/solve.json,")]  # both studies' manifests: one job
    assert planned("--config", "solve_per_study=True") == [
        ("solve_study", "results/tiny/solve.json"),
        ("solve_study", "results/tiny2/solve.json"),
    ]
    assert "solve_per_study=True" in yaml.safe_load(PROFILE.joinpath("config.yaml").read_text())["config"]
