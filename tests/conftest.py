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
