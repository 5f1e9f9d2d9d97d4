"""One study over several hosts of the lab (``.ci/lab_up.sh``, ``.ci/lab.md``): an existing Dask scheduler
on the head host, reached over TLS with the certificates the config gives (``dask: {address, security}``),
one worker on each compute host; then the same with one compute host of another floating-point behaviour.

The test process stays in the root namespace; the scheduler, the workers and snakemake run on lab hosts
(``_lab.Lab``: nsenter), started and killed by pid by the test. The certificates are made here (a CA, and
one certificate it signs for the lab's addresses). Each test reads from the run stores which host computed
each run and asserts both compute hosts.

The other floating-point behaviour: the worker on the second compute host runs with
``HBVM_TEST_PERTURB_ULPS=1``, which makes the study's problem (``user_problems:sphere_quadratic``, a
particle on the unit sphere in a dense quadratic potential) compute its callbacks' values and initial
values one unit in the last place apart, as another BLAS or libm would. The study completes there,
nothing is refused, errors.csv agrees with a run on one host to round-off, and running the same command
again from the head reuses every run.
"""

from __future__ import annotations

import csv
import datetime
import ipaddress
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from _lab import Lab, run_hosts, unavailable

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
LIMIT = 300  # s, one snakemake run
SKIP = unavailable()
pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.skipif(SKIP is not None, reason=SKIP or "")]

#: another host's round-off on demand (read by tests/user_problems.py where the problem is built: a worker)
PERTURB = "HBVM_TEST_PERTURB_ULPS"
STUDY = {
    "problem": "user_problems:sphere_quadratic",
    "backend": "numpy",
    "methods": [{"k": 2, "s": 2}, {"k": 1, "s": 1}],
    "t_end": 1,
    "h0": 0.1,
    "halvings": 2,
    "errors": {"reference": "self", "norm": "inf", "sample": "all"},
}
RUNS = 8  # 2 methods x 3 step sizes, and the h/2 partners of the smallest (reference: self)
#: the TLS test's study: a user problem that every version of tests/user_problems.py has
TLS_STUDY = STUDY | {"problem": "user_problems:double_pendulum"}
#: the error quantities of errors.csv: each of scale about one (q on the unit sphere, |p| < 1, lambda, H, g)
ERRORS = ("e_s", "e_lambda", "e_H", "e_g", "e_hc")
RATES = ("rate_s", "rate_lambda", "rate_hc")
ORDERS = ("order_s", "order_lambda", "order_hc")


@pytest.fixture
def lab():
    lab = Lab()
    yield lab
    lab.stop_all()  # the scheduler and the workers, by pid, also when the test failed


# --------------------------------------------------------------------------- helpers
def certificates(folder: Path, lab: Lab) -> dict[str, str]:
    """A CA and one certificate it signs for every lab address (scheduler, workers and client use it):
    the ``dask.security`` section of the config."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    folder.mkdir()
    now = datetime.datetime.now(datetime.UTC)
    valid = (now - datetime.timedelta(minutes=5), now + datetime.timedelta(hours=2))

    def build(subject, issuer, public, signer, ca: bool, sans=()):
        b = x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(public)
        b = b.serial_number(x509.random_serial_number()).not_valid_before(valid[0]).not_valid_after(valid[1])
        b = b.add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        if sans:
            b = b.add_extension(x509.SubjectAlternativeName(list(sans)), critical=False)
        return b.sign(signer, hashes.SHA256())

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "hbvm lab CA")])
    ca = build(ca_name, ca_name, ca_key.public_key(), ca_key, True)
    sans = [x509.IPAddress(ipaddress.ip_address(lab.address(h))) for h in lab.hosts]
    sans += [x509.DNSName(h) for h in lab.hosts]
    cert = build(
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "hbvm lab")]), ca_name, key.public_key(), ca_key, False, sans
    )
    pem = serialization.Encoding.PEM
    (folder / "ca.pem").write_bytes(ca.public_bytes(pem))
    (folder / "cert.pem").write_bytes(cert.public_bytes(pem))
    (folder / "key.pem").write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    os.chmod(folder / "key.pem", 0o600)
    return {
        "tls_ca_file": str(folder / "ca.pem"),
        "tls_client_cert": str(folder / "cert.pem"),
        "tls_client_key": str(folder / "key.pem"),
        "require_encryption": True,
    }


def tls_args(security: dict) -> list[str]:
    return ["--tls-ca-file", security["tls_ca_file"], "--tls-cert", security["tls_client_cert"]] + [
        "--tls-key",
        security["tls_client_key"],
    ]


def start_cluster(lab: Lab, workdir: Path, security: dict, perturbed: str | None = None) -> str:
    """A Dask scheduler on the head (TLS) and one single-threaded worker on each compute host (on ``perturbed``
    with another floating-point behaviour); returns the scheduler's address once both workers joined."""
    head = lab.address(lab.head)
    sched_file = workdir / "scheduler.json"
    sched_log = workdir / "scheduler.log"
    lab.start(
        lab.head,
        *[sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", head, "--port", "0"],
        *["--protocol", "tls", "--no-dashboard", "--scheduler-file", str(sched_file), *tls_args(security)],
        log=sched_log,
        cwd=workdir,
    )
    deadline = time.monotonic() + 60
    while not sched_file.exists():
        assert time.monotonic() < deadline, f"no scheduler after 60 s:\n{sched_log.read_text()}"
        time.sleep(0.2)
    time.sleep(0.2)  # the file is written in one go, but give it a moment
    address = yaml.safe_load(sched_file.read_text())["address"]
    assert address.startswith(f"tls://{head}:"), address
    for host in lab.compute:
        env = Lab.env(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
        if host == perturbed:
            env[PERTURB] = "1"
        else:
            env.pop(PERTURB, None)
        me = lab.address(host)
        lab.start(
            host,
            *[sys.executable, "-m", "distributed.cli.dask_worker", address, "--nworkers", "1", "--nthreads", "1"],
            *["--host", me, "--dashboard-address", f"{me}:0", "--name", host, *tls_args(security)],
            log=workdir / f"worker-{host}.log",
            cwd=workdir,
            env=env,
        )
    while len(re.findall(r"Register worker addr: tls://", sched_log.read_text())) < len(lab.compute):
        assert time.monotonic() < deadline + 60, f"workers did not join:\n{sched_log.read_text()}"
        time.sleep(0.3)
    return address


def write_config(workdir: Path, study: dict = STUDY, **extra) -> None:
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "config.yaml").write_text(yaml.safe_dump({"studies": {"het": study}, **extra}, sort_keys=False))


def snakemake_cmd(workdir: Path, *args: str) -> list[str]:
    cmd = ["timeout", "-k", "10", str(LIMIT), str(BIN / "snakemake"), "-s", str(ROOT / "Snakefile")]
    return cmd + ["-d", str(workdir), "--configfile", str(workdir / "config.yaml"), "--cores", "1", *args]


def study_env() -> dict:
    """The environment of snakemake (and so of the solve step): tests/ on the path for user_problems, this
    host's own floating-point behaviour."""
    env = Lab.env(MPLBACKEND="Agg")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tests"), env["PYTHONPATH"]])
    env.pop(PERTURB, None)
    return env


def check(proc: subprocess.CompletedProcess, workdir: Path, name: str) -> str:
    out = proc.stdout + proc.stderr
    (workdir / f"{name}.log").write_text(out)
    assert proc.returncode == 0, f"snakemake ({name}) exited {proc.returncode}:\n{out[-6000:]}"
    return out


def rows(path: Path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture(scope="module")
def single_host(tmp_path_factory) -> Path:
    """errors.csv of the study computed on one host (this one: snakemake --cores 1, a LocalCluster)."""
    workdir = tmp_path_factory.mktemp("single")
    write_config(workdir)
    cmd = snakemake_cmd(workdir)
    check(subprocess.run(cmd, capture_output=True, text=True, timeout=LIMIT + 30, env=study_env()), workdir, "local")
    return workdir / "results" / "het" / "errors.csv"


def solve_on_lab(lab: Lab, workdir: Path, name: str, *args: str) -> str:
    proc = lab.run(lab.head, *snakemake_cmd(workdir, *args), cwd=workdir, env=study_env(), timeout=LIMIT + 30)
    return check(proc, workdir, name)


# --------------------------------------------------------------------------- tests
def test_an_existing_tls_scheduler_with_workers_on_two_hosts(tmp_path, lab):
    """dask: {address: tls://head:port, security: {...}}: the runs are computed on both compute hosts, over TLS
    with the config's certificates."""
    security = certificates(tmp_path / "tls", lab)
    address = start_cluster(lab, tmp_path, security)
    write_config(tmp_path, TLS_STUDY, dask={"address": address, "security": security})
    solve_on_lab(lab, tmp_path, "snakemake")

    hosts = run_hosts(tmp_path / "results" / "het")
    assert len(hosts) == RUNS and set(hosts.values()) == set(lab.compute), hosts
    from hbvm_workflow.storage import read_attrs

    workers = {read_attrs(str(tmp_path / "results" / "het" / s))["worker"] for s in hosts}
    assert {w.rpartition(":")[0] for w in workers} == {f"tls://{lab.address(h)}" for h in lab.compute}, workers
    table = rows(tmp_path / "results" / "het" / "errors.csv")
    assert len(table) == RUNS - 2 and all(r["status"] == "ok" for r in table), table


def test_a_heterogeneous_cluster_completes_agrees_to_round_off_and_reruns_nothing(tmp_path, lab, single_host):
    """One compute host computes the problem one unit in the last place apart: every run completes (none is
    refused), errors.csv agrees with the single-host run to round-off, and the same command again from the
    head reuses every run (also when the solve step is forced to look at every store)."""
    perturbed = lab.compute[-1]
    security = certificates(tmp_path / "tls", lab)
    address = start_cluster(lab, tmp_path, security, perturbed=perturbed)
    write_config(tmp_path, dask={"address": address, "security": security})
    out = solve_on_lab(lab, tmp_path, "first")
    study = tmp_path / "results" / "het"

    hosts = run_hosts(study)
    assert len(hosts) == RUNS and set(hosts.values()) == set(lab.compute), hosts  # both, one of them perturbed
    got, ref = rows(study / "errors.csv"), rows(single_host)
    assert len(got) == len(ref) == RUNS - 2 and all(r["status"] == "ok" for r in got), out[-3000:]
    steps = max(int(r["steps"]) for r in ref)
    # a 1-ulp change of the callbacks and of q0, p0 moves each step's result by a few ulps (16 also covers the
    # Newton stopping rule's round-off-level last increment) and grows at most linearly over the steps; each
    # error is of scale <= 1 here (q on the unit sphere, |p| < 1), so eps times the scale is eps
    tol = 16 * steps * np.finfo(float).eps
    for a, b in zip(got, ref, strict=True):
        label = f"{b['method']} h={b['h']}"
        for key in b:
            if key in ERRORS:
                assert abs(float(a[key]) - float(b[key])) <= tol * max(1.0, abs(float(b[key]))), (label, key, a, b)
            elif key in RATES and b[key]:
                # a rate is log2(e(h) / e(h/2)): its round-off is the errors' relative round-off over ln 2
                e = float(b["e_" + key.removeprefix("rate_")])
                assert abs(float(a[key]) - float(b[key])) <= 2 * tol / e / math.log(2), (label, key, a, b)
            elif key in ORDERS and b[key]:
                # the least-squares slope of log e against log h over the fitted rows: its weights sum to at most
                # 1 / ln 2 in absolute value here (h halving), so its round-off is at most a rate's, at the
                # smallest error of the fitted rows
                e = min(
                    float(r["e_" + key.removeprefix("order_")]) for r in ref if r["method"] == b["method"] and r[key]
                )
                assert abs(float(a[key]) - float(b[key])) <= 2 * tol / e / math.log(2), (label, key, a, b)
            elif key == "mean_iterations":
                # Newton may stop one iteration earlier or later on a step: at most one per step
                assert abs(float(a[key]) - float(b[key])) <= 1.0, (label, a, b)
            elif key != "wall_s":
                assert a[key] == b[key], (label, key, a, b)
    gaps = [abs(float(a[k]) - float(b[k])) for a, b in zip(got, ref, strict=True) for k in ERRORS]
    eps = np.finfo(float).eps
    print(
        f"error values that differ from the single-host run: {sum(g > 0 for g in gaps)} of {len(gaps)}, "
        f"by at most {max(gaps) / eps:.1f} eps (tolerance {tol / eps:.0f} eps)"
    )

    # the same command from the head: nothing is recomputed
    stamps = {s: os.stat(study / s).st_mtime_ns for s in hosts}
    again = solve_on_lab(lab, tmp_path, "again")
    assert "Nothing to be done" in again, again[-3000:]
    # the solve step made to look at every store: each is reused
    forced = solve_on_lab(lab, tmp_path, "forced", "--forcerun", "solve")
    log = (tmp_path / "logs" / "het" / "solve.log").read_text()
    assert f"{RUNS} runs: {RUNS} reused, 0 to compute" in log, log[-3000:] + forced[-3000:]
    assert {s: os.stat(study / s).st_mtime_ns for s in hosts} == stamps
