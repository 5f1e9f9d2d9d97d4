"""The compile (or cache load) seconds of each generated loop: registry.LOOP_TIMES, and the solve log's lines."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hbvm_core.kernels import modules, registry

ROOT = Path(__file__).resolve().parents[2]

# a generated module as the registry makes it: a loop, and an outer loop that calls it
SOURCE = """
from numba import njit

CACHE = True


@njit(cache=CACHE)
def run_chunk(x):
    return x + 1


@njit(cache=CACHE)
def run_block(x):
    return run_chunk(x) * 2
"""


@pytest.mark.slow  # it compiles a (small) generated module of its own
def test_each_new_signature_of_a_loop_is_timed_once_and_an_inner_one_within_the_outer():
    tag = f"hbvm_test{time.monotonic_ns()}"
    module = modules.generated_module(
        tag, SOURCE, {}, {}, registry.LOOP_BINDING, "a test", finish=registry.timed_loops, in_memory=True
    )
    since = len(registry.LOOP_TIMES)
    t0 = time.perf_counter()
    assert module.run_block(1) == 4  # compiles run_block, and run_chunk inside it
    wall = time.perf_counter() - t0
    first = registry.loop_times(since)
    assert [(r.loop, r.cached) for r in first] == [("run_block", False)]  # in memory: never from numba's cache
    assert 0 < first[0].seconds <= wall  # the test's own clock around the call bounds it
    assert module.run_block(2) == 6 and module.run_chunk(1) == 2  # signatures compiled above: nothing new
    assert len(registry.loop_times(since)) == 1
    assert module.run_chunk(1.5) == 2.5  # another signature: compiled, on its own
    assert [(r.loop, r.cached) for r in registry.loop_times(since)] == [("run_block", False), ("run_chunk", False)]
    assert first[0].phrase().startswith(f"ensemble block of {first[0].module}: compiled in ")


@pytest.mark.slow  # compiles its loop in a subprocess where the kernel cache is cold (a fresh clone)
def test_warm_up_tells_each_loop_with_its_seconds_and_where_it_came_from(tmp_path):
    """A fresh process (nothing compiled there yet) warms a study's jobs; the loop is warm in the kernel cache
    (compiled first if not), so it is loaded from it, and named with the job's problem and method."""
    script = """
import json, sys, time
from hbvm_workflow.study import expand_study
from hbvm_workflow.worker import warm_up
cfg = {"problem": "planar_pendulum", "methods": [{"k": 2, "s": 2}], "t_end": 0.2, "h": [0.1],
       "errors": {"reference": "exact", "norm": "inf", "sample": "all"}}
lines = []
t0 = time.perf_counter()
n = warm_up(expand_study("s", cfg).jobs.values(), tell=lambda studies, line: lines.append([sorted(studies), line]))
print(json.dumps({"n": n, "wall": time.perf_counter() - t0, "lines": lines}))
"""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    run = [sys.executable, "-c", script]
    subprocess.run(run, env=env, check=True, capture_output=True)  # the loop into the cache (if it was not)
    out = json.loads(subprocess.run(run, env=env, check=True, capture_output=True, text=True).stdout)
    assert out["n"] == 1 and len(out["lines"]) == 1
    studies, line = out["lines"][0]
    hit = re.fullmatch(r"planar_pendulum, hbvm_k2_s2: per-run loop of hbvm_\w+: loaded from the kernel cache "
                       r"in ([\d.]+) s", line)  # fmt: skip
    assert studies == ["s"] and hit, line
    assert float(hit.group(1)) <= out["wall"] + 0.05  # rounded to 0.1 s


def test_cold_loops_compile_in_up_to_the_run_s_cores_side_by_side(monkeypatch):
    """compile_processes: at least the job's threads; at most the run's cores (HBVM_COMPILE_PROCESSES, which the
    Snakefile sets to --cores), the CPUs this process may use, and the cold loops (worked by hand)."""
    from hbvm_workflow.worker import compile_processes

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    monkeypatch.setenv("HBVM_COMPILE_PROCESSES", "2")
    assert compile_processes(1, 5) == 2  # a one-thread job of five cold loops, --cores 2: two side by side
    assert compile_processes(1, 1) == 1  # one loop: one process
    assert compile_processes(3, 0) == 3  # never fewer than the job's threads
    monkeypatch.setenv("HBVM_COMPILE_PROCESSES", "16")
    assert compile_processes(1, 6) == 4  # the CPUs this process may run on (a SLURM allocation's) bound it
    monkeypatch.delenv("HBVM_COMPILE_PROCESSES")
    assert compile_processes(2, 6) == 2  # outside Snakemake: the job's threads
