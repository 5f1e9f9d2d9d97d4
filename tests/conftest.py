"""Shared fixtures and helpers for the test-suite."""

from __future__ import annotations

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
    import os
    import time

    if session.config.option.collectonly or len(session.items) < 200:
        return
    if not any(item.get_closest_marker("slow") for item in session.items):
        return
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    from hbvm_core.__main__ import LOOPS, _warm_one, loop_method, warm_tasks
    from hbvm_core.kernels import uncached_loop

    tasks = [task for problems, solvers in WARM for task in warm_tasks(list(problems), list(solvers), LOOPS)]
    cold = [(p, loop) for p, loop in tasks if uncached_loop(loop_method(loop), hc.get_problem(p)) is not None]
    if len(cold) < 2:
        return
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=min(len(cold), os.cpu_count() or 1), mp_context=get_context("spawn")) as pool:
        list(pool.map(_warm_one, cold))
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        seconds = time.perf_counter() - t0
        reporter.write_line(f"kernel cache: {len(cold)} loops compiled side by side in {seconds:.0f} s")
