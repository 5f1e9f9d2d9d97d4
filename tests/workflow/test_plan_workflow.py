"""The config is expanded once per workflow run, through real Snakemake: the parse of the main process computes
each problem's identity and each method's numerics once; the jobs (their scripts, a cluster job's own parse, the
Dask workers) read the plan and fingerprint nothing.

Every Python process of the run is traced: a ``sitecustomize`` on PYTHONPATH wraps the fingerprint functions
of ``hbvm_core.fingerprint`` so that each call appends a line (pid, the process's command line, the function)
to a file.
"""

from __future__ import annotations

import os
from collections import Counter

import pytest
from test_workflow import PLANAR, ROOT, check_outputs, ok, snakemake, write_config

pytestmark = pytest.mark.slow

TRACED = ("problem_identity", "problem_structure", "problem_probe", "problem_fingerprint", "method_fingerprint")
SITECUSTOMIZE = f"""
import os
import sys

if os.environ.get("HBVM_TEST_TRACE"):
    import hbvm_core.fingerprint as fp

    def traced(name, f):
        def wrapper(*args, **kwargs):
            with open(os.environ["HBVM_TEST_TRACE"], "a") as fh:
                fh.write(f"{{os.getpid()}}\\t{{' '.join(sys.argv)}}\\t{{name}}\\n")
            return f(*args, **kwargs)

        return wrapper

    for name in {TRACED!r}:
        setattr(fp, name, traced(name, getattr(fp, name)))
"""


@pytest.fixture
def traced(tmp_path, monkeypatch):
    """The trace file of every Python process started from here (their fingerprint calls)."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    trace = tmp_path / "trace.tsv"
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("HBVM_TEST_TRACE", str(trace))
    return trace


def calls(trace) -> list[tuple[str, str, str]]:
    """(pid, role, function) of each traced call; role: the main process's parse ("main"), a cluster job's own
    parse ("job parse"), or a job script (its rule: solve, aggregate, render) and the Dask workers forked from it."""
    out = []
    for line in trace.read_text().splitlines():
        pid, argv, name = line.split("\t")
        words = argv.split(" ")
        if os.path.basename(words[0]) == "snakemake" or words[1:3] == ["-m", "snakemake"]:
            role = "job parse" if "--mode" in words else "main"
        else:  # a script job: .snakemake/scripts/tmpXXXX.<rule>.py
            role = next((r for r in ("solve", "aggregate", "render") if words[0].endswith(f".{r}.py")), argv)
        out.append((pid, role, name))
    return out


def check_once(trace, instances: int, methods: int) -> None:
    """Each problem instance identified once and each method entry's numerics once, by the main process's parse;
    every job's own parse fingerprints nothing; the job scripts only check a problem they built against the
    planned identity (its structure and probe values): the aggregation once per instance, not once per store."""
    found = calls(trace)
    by = Counter((role, name) for _, role, name in found)
    assert by[("main", "problem_identity")] == instances, by
    assert by[("main", "method_fingerprint")] == methods, by
    assert by[("main", "problem_structure")] == by[("main", "problem_probe")] == instances, by
    assert len({pid for pid, role, _ in found if role == "main"}) == 1, found
    assert {role for role, name in by if name in ("problem_identity", "method_fingerprint")} == {"main"}, by
    assert not [c for c in found if c[2] == "problem_fingerprint"], by  # the planned identity is written as is
    assert {role for role, _ in by} <= {"main", "solve", "aggregate"}, by  # job parses and render: no call
    assert {name for role, name in by if role != "main"} <= {"problem_structure", "problem_probe"}, by
    assert by[("aggregate", "problem_structure")] <= instances, by  # one check per instance, not per store


def test_a_local_run_expands_the_config_once(tmp_path, traced):
    write_config(tmp_path, {"tiny": PLANAR})
    ok(snakemake(tmp_path, "--cores", "2"))
    check_outputs(tmp_path, "tiny", PLANAR, 6)
    check_once(traced, instances=1, methods=2)
    plans = list((tmp_path / "results" / ".plans").glob("*.json"))
    assert len(plans) == 1
    written = plans[0].stat().st_mtime_ns
    traced.unlink()
    out = ok(snakemake(tmp_path, "--cores", "2"))
    assert "Nothing to be done" in out.stdout + out.stderr
    assert plans[0].stat().st_mtime_ns == written  # the same plan: not rewritten


def test_cluster_jobs_read_the_plan_in_their_own_parse(tmp_path, traced):
    """Snakemake's generic cluster executor: each job is a Snakemake process of its own that parses the workflow
    again (as under SLURM); it reads the plan instead of expanding the config."""
    write_config(tmp_path, {"tiny": PLANAR})
    (tmp_path / "workflow").symlink_to(ROOT / "workflow")  # the profile names the script relative to the workdir
    ok(snakemake(tmp_path, "--profile", str(ROOT / "workflow" / "profiles" / "local-submit"), timeout=400))
    check_outputs(tmp_path, "tiny", PLANAR, 6)
    check_once(traced, instances=1, methods=2)
    submitted = (tmp_path / ".snakemake" / "local_submit" / "submitted.txt").read_text().splitlines()
    assert len(submitted) == 3  # solve, aggregate and render: three Snakemake processes that parsed the workflow
