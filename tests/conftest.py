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
