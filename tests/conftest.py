"""Shared fixtures and helpers for the test-suite."""

from __future__ import annotations

import os

import pytest

import hbvm_core as hc


@pytest.fixture(scope="session")
def planar():
    return hc.get_problem("planar_pendulum")


@pytest.fixture(scope="session")
def conical():
    return hc.get_problem("conical_pendulum")


@pytest.fixture(scope="session")
def modified():
    return hc.get_problem("modified_pendulum")


@pytest.fixture(scope="session")
def tethered():
    return hc.get_problem("tethered_satellites")


@pytest.fixture(autouse=True)
def _dask_scheduler_restored():
    """Each test starts with the dask ``scheduler`` setting it found: a distributed.Client whose start
    fails (the refused clients of the security tests) leaves ``scheduler: dask.distributed`` behind, and a
    later test's lazy xarray read would then look for a Client that is gone. (Only that key: packages
    such as dask_jobqueue add their defaults to the config once, on import.)"""
    import gc

    import dask

    missing = object()
    before = dask.config.config.get("scheduler", missing)
    yield
    if dask.config.config.get("scheduler", missing) is before:
        return  # nothing changed it: no full collection after every test (seconds a test on a loaded machine)
    gc.collect()  # a refused Client restores the setting it found when it is collected: let that happen first
    if before is missing:
        dask.config.config.pop("scheduler", None)
    else:
        dask.config.config["scheduler"] = before


#: the built-in problems' compiled loops the slow tiers use, as (problems, solvers of the hbvm loop) of
#: ``python -m hbvm_core kernels warm`` (every loop: hbvm, polynomial, rattle); not theta_pendulum's, nor the blended
#: loops of the conical and modified pendulums: no test compiles those
WARM = ((("planar_pendulum", "tethered_satellites"), ("fixed-point", "blended")),
        (("conical_pendulum", "modified_pendulum"), ("fixed-point",)))  # fmt: skip


def pytest_collection_finish(session):
    """A run of the slow tiers on a cold kernel cache (a fresh clone, CI) compiles the built-in problems' loops
    first, side by side, one process per core (``python -m hbvm_core kernels warm``), instead of one after another
    in this process as the tests reach them (some 6 s of CPU each, 14 loops): the tests then load them. Nothing
    is compiled for a run of a few files or of the quick tier (``-m "not slow"``)."""
    import fcntl
    import os
    import time

    if session.config.option.collectonly or len(session.items) < 200:
        return
    if not any(item.get_closest_marker("slow") for item in session.items):
        return
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    from hbvm_core.__main__ import _warm_one, compiled_loops, loop_method, warm_tasks
    from hbvm_core.kernels import uncached_loop
    from hbvm_core.kernels.modules import cache_dir

    loops = tuple(compiled_loops())  # every method's described loop
    tasks = [task for problems, solvers in WARM for task in warm_tasks(list(problems), list(solvers), loops)]
    t0 = time.perf_counter()
    # one warmer at a time: with pytest-xdist every worker collects, the first warms, the others then find
    # the loops cached (an advisory lock of the kernel, released when its holder exits)
    cache_dir().mkdir(parents=True, exist_ok=True)
    with open(cache_dir() / ".tests-warm.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        cold = [(p, loop) for p, loop in tasks if uncached_loop(loop_method(loop), hc.get_problem(p)) is not None]
        if len(cold) < 2:
            return
        workers = min(len(cold), os.cpu_count() or 1)
        with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn")) as pool:
            list(pool.map(_warm_one, cold))
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        seconds = time.perf_counter() - t0
        reporter.write_line(f"kernel cache: {len(cold)} loops compiled side by side in {seconds:.0f} s")


# --------------------------------------------------------------------------- the quick tier compiles nothing
def _quick_tier(config) -> bool:
    """Whether this run is the quick tier (``-m "not slow"``), or asks for the report of what each test compiles
    (HBVM_COMPILE_REPORT=1; =every: every test that uses a loop, not only the first: tests/_compiles.py)."""
    return "not slow" in (config.option.markexpr or "") or os.environ.get("HBVM_COMPILE_REPORT")


def pytest_configure(config):
    if "not slow" in (config.option.markexpr or ""):
        # the sparse path's fixed-point sweep runs its numpy form there (compiled: tests marked slow)
        os.environ.setdefault("HBVM_SPARSE_SWEEP", "numpy")
    if _quick_tier(config):
        from tests._compiles import install

        config._hbvm_compiles, config._hbvm_compiled = install(), []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    seen = getattr(item.config, "_hbvm_compiles", None)
    if seen is not None:
        from tests._compiles import cache_folders, forget_loops

        if os.environ.get("HBVM_COMPILE_REPORT") == "every":
            forget_loops()
        seen.start(cache_folders())
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """At a test's teardown, what it compiled: in the quick tier a test not marked slow that compiled a loop
    fails there, naming the loop (a failed report: it counts under pytest-xdist's workers too); in a report
    (HBVM_COMPILE_REPORT) a note."""
    outcome = yield
    seen = getattr(item.config, "_hbvm_compiles", None)
    if seen is None or call.when != "teardown":
        return
    what = seen.take()
    if what is None:
        return
    slow = item.get_closest_marker("slow") is not None
    item.config._hbvm_compiled.append((item.nodeid, what, slow))
    if not slow and "not slow" in (item.config.option.markexpr or ""):
        report = outcome.get_result()
        report.outcome = "failed"
        report.longrepr = (
            f"the quick tier compiled a loop: {item.nodeid}: {what} (mark it @pytest.mark.slow, or run its numpy path)"
        )


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """One line per test that compiled a loop, in a report (HBVM_COMPILE_REPORT) without pytest-xdist."""
    for nodeid, what, slow in getattr(config, "_hbvm_compiled", []):
        terminalreporter.write_line(f"compiled{' (marked slow)' if slow else ''}: {nodeid}: {what}")


# --------------------------------------------------------------------------- pytest-xdist: a file per worker
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Under ``--dist loadgroup`` each test file runs whole on one worker (its module fixtures, a workflow run
    shared by its tests, are built once), and the multi-host lab's files share one group: one lab, one user."""
    loadgroup = bool(config.getvalue("loadgroup")) if hasattr(config.option, "loadgroup") else False
    for item in items:
        group = "lab" if item.get_closest_marker("slurm") else item.nodeid.split("::")[0]
        item.add_marker(pytest.mark.xdist_group(group))
        if loadgroup and "@" not in item.nodeid:
            # the group as xdist's scheduler reads it, "<nodeid>@<group>": pytest-xdist's own hook, which writes it
            # from the mark, ran before this one on the workers (the lab's files then ran side by side, and one lab
            # test cancelled another's jobs)
            item._nodeid = f"{item.nodeid}@{group}"
