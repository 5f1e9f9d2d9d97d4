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
def _dask_config_restored():
    """Each test starts from the dask config it found: a distributed.Client whose start fails (the
    refused clients of the security tests) can leave ``scheduler: dask.distributed`` behind, and a
    later test's lazy xarray read would then look for a Client that is gone."""
    import copy

    import dask

    saved = copy.deepcopy(dask.config.config)
    yield
    dask.config.config.clear()
    dask.config.config.update(saved)
