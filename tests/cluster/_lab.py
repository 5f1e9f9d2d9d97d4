"""The multi-host lab of ``.ci/lab_up.sh`` as the tests see it (``.ci/lab.md``).

A head host and compute hosts, each a network namespace with its own hostname, on a private bridge,
with SLURM (slurmctld on the head, one slurmd per compute host). The test process stays in the root
namespace, which has no route to the lab: every command that talks to the lab (snakemake, sbatch,
squeue, dask scheduler and workers) runs on a lab host through ``nsenter`` (``Lab.cmd``), in that host's
network and UTS namespaces and the lab's mount namespace (where /etc/slurm/slurm.conf is the lab's).
nsenter execs the command: the pid a test gets is the command's own, and a test kills what it started by
that pid (``Lab.start``/``Lab.stop_all``).
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

LAB_DIR = Path("/run/hbvm-lab")
ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
RESTART = "restart it: sudo bash .ci/lab_down.sh; sudo bash .ci/lab_up.sh"


def _env_file() -> dict[str, str]:
    out = {}
    for line in (LAB_DIR / "lab.env").read_text().splitlines():
        key, _, value = line.partition("=")
        out[key] = shlex.split(value)[0] if value else ""
    return out


class Lab:
    """The lab's hosts (head first), their addresses, and commands run on them."""

    def __init__(self) -> None:
        env = _env_file()
        self.hosts: list[str] = env["HBVM_LAB_HOSTS"].split()
        self.net: str = env["HBVM_LAB_NET"]
        self.mount_ns: str = env["HBVM_LAB_MOUNT_NS"]
        self.ns_dir = Path(env["HBVM_LAB_DIR"]) / "ns"
        self.procs: list[subprocess.Popen] = []

    @property
    def head(self) -> str:
        return self.hosts[0]

    @property
    def compute(self) -> list[str]:
        return self.hosts[1:]

    def address(self, host: str) -> str:
        """The host's address on the lab's bridge (interface lab0)."""
        return f"{self.net}.{self.hosts.index(host) + 1}"

    def cmd(self, host: str, *argv: str, cwd: Path | str | None = None) -> list[str]:
        """``argv`` as run on ``host`` (in ``cwd``, default this process's)."""
        return [
            "nsenter",
            f"--net=/run/netns/hbvm-lab-{host}",
            f"--uts={self.ns_dir / host}",
            f"--mount={self.mount_ns}",
            f"--wd={cwd or os.getcwd()}",
            "--",
            *argv,
        ]

    @staticmethod
    def env(**extra: str) -> dict[str, str]:
        """This environment with the venv's bin first on PATH and the checkout on PYTHONPATH (the workers,
        SLURM jobs and snakemake import this checkout's packages)."""
        path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
        return dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", PYTHONPATH=path, **extra)

    def run(self, host: str, *argv: str, cwd=None, env=None, timeout: float = 60) -> subprocess.CompletedProcess:
        """Run ``argv`` on ``host`` to completion (killed after ``timeout`` s)."""
        return subprocess.run(
            self.cmd(host, *argv, cwd=cwd), capture_output=True, text=True, timeout=timeout, env=env or self.env()
        )

    def start(self, host: str, *argv: str, log: Path, cwd=None, env=None) -> subprocess.Popen:
        """Start ``argv`` on ``host`` in a session of its own (output to ``log``); ``stop_all`` kills it by pid."""
        with open(log, "wb") as fh:
            proc = subprocess.Popen(
                self.cmd(host, *argv, cwd=cwd),
                stdout=fh,
                stderr=subprocess.STDOUT,
                env=env or self.env(),
                start_new_session=True,
            )
        self.procs.append(proc)
        return proc

    def stop_all(self) -> None:
        """SIGTERM to each started process's group (its pid), SIGKILL after 10 s."""
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for proc in self.procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        self.procs.clear()

    def sinfo(self) -> subprocess.CompletedProcess:
        return self.run(self.head, "sinfo", "-h", "-N", "-o", "%N %T", timeout=20)


def unavailable() -> str | None:
    """Why the lab cannot be used here (the tests skip), or None when it is up and its compute hosts take jobs.
    Where the lab must be up (``HBVM_LAB_REQUIRED=1``, set by .ci/run) a reason is an error instead."""
    why = _why_unavailable()
    if why is not None and os.environ.get("HBVM_LAB_REQUIRED") == "1":
        raise RuntimeError(f"HBVM_LAB_REQUIRED=1 but {why}")
    return why


def _why_unavailable() -> str | None:
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        return "the multi-host lab needs Linux and root (CI starts it with: sudo bash .ci/lab_up.sh)"
    if not (LAB_DIR / "lab.env").is_file():
        return f"the multi-host lab is not up (no {LAB_DIR / 'lab.env'}); start it with: sudo bash .ci/lab_up.sh"
    try:
        lab = Lab()
        out = lab.sinfo()
    except (OSError, KeyError, IndexError, subprocess.SubprocessError) as exc:
        return f"the multi-host lab does not answer ({type(exc).__name__}: {exc}); {RESTART}"
    up = [
        line.split()[0] for line in out.stdout.splitlines() if line.split()[1:2] in (["idle"], ["mixed"], ["allocated"])
    ]
    if out.returncode != 0 or sorted(up) != sorted(lab.compute):
        why = (out.stderr.strip().splitlines() or [out.stdout.strip() or "no nodes"])[-1]
        return f"the lab's compute hosts are not all up (sinfo on {lab.head}: {why}); {RESTART}"
    return None


def run_hosts(study_dir: Path) -> dict[str, str]:
    """{store: the host that computed it}, read from each run store's attrs (``host``; a host name, possibly
    followed by more about the host, such as its CPU model)."""
    from hbvm_workflow.storage import read_attrs

    out = {}
    for store in sorted((study_dir / "runs").rglob("*.zarr.zip")):
        host = read_attrs(str(store))["host"]
        name = host.get("name") if isinstance(host, dict) else str(host)
        out[str(store.relative_to(study_dir))] = name.split()[0].split("(")[0]
    return out
