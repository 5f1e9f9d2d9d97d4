"""Which process fingerprints what, in a real workflow run: the config is expanded once per run.

Every Python process started by a test is traced: a ``sitecustomize`` on PYTHONPATH wraps the fingerprint
functions of ``hbvm_core.fingerprint`` so that each call appends a line (pid, the process's command line, the
function) to a file. ``check_once`` then asserts that the parse of the main Snakemake process computed each
problem's identity and each method's numerics once, and that the jobs (their scripts, a cluster job's own parse,
the Dask workers) read the plan (``hbvm_workflow.plan``) and fingerprinted nothing.
"""

from __future__ import annotations

import os
from collections import Counter

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


def traced(tmp_path, monkeypatch):
    """The trace file of every Python process started from here on (their fingerprint calls)."""
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
        if words[0].endswith(("/snakemake", "snakemake/__main__.py")) or words[0] == "snakemake":  # python -m too
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
