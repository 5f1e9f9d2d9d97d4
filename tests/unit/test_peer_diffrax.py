"""The diffrax peer benchmark's oracle and ODE (numpy, no jax), and its one line without the benchmarks extra."""

from __future__ import annotations

import math
import os
import sys

import numpy as np

import hbvm_core as hc
from benchmarks import peer_diffrax as pd

EPS = np.finfo(float).eps


def test_orbit_starts_at_the_parametric_problems_initial_data():
    """At 45 degrees and phase 0 the orbit at t = 0 is conical_pendulum(length)'s q0, p0 (radius = depth = l/sqrt 2,
    speed r w with w^2 = gravity / r), a construction of its own (hbvm_core.problems.parametric)."""
    lengths = np.array([0.5, 0.8, 1.0, 1.5])
    q, p = pd.orbit(lengths, math.pi / 4, 0.0, 0.0)
    for i, length in enumerate(lengths):
        pb = hc.get_problem("conical_pendulum", length=float(length))
        np.testing.assert_allclose(q[i], pb.q0, rtol=0, atol=4 * EPS * length)  # a few roundings of sqrt, sin
        np.testing.assert_allclose(p[i], pb.p0, rtol=0, atol=4 * EPS * length)


def test_orbit_is_a_solution_of_the_index_reduced_ode():
    """On every orbit |q| = length, q . p = 0, H constant, and the ODE's p' equals the closed-form centripetal
    acceleration q'' = -w^2 (x, y, 0) of uniform circular motion, w^2 = gravity / (length cos angle)."""
    rng = np.random.default_rng(3)
    length, angle, phase = rng.uniform(0.5, 1.5, 50), rng.uniform(0.3, 1.2, 50), rng.uniform(0, 2 * math.pi, 50)
    t = rng.uniform(0.0, 20.0, 50)
    q, p = pd.orbit(length, angle, phase, t)
    q0, p0 = pd.orbit(length, angle, phase, 0.0)
    w2 = pd.GRAVITY / (length * np.cos(angle))
    tol = 16 * EPS * np.maximum(1.0, w2)  # a few roundings of O(w^2 length) terms
    np.testing.assert_allclose(np.linalg.norm(q, axis=1), length, rtol=4 * EPS)
    np.testing.assert_allclose((q * p).sum(axis=1), 0.0, atol=8 * EPS)
    np.testing.assert_allclose(pd.energy(q, p), pd.energy(q0, p0), rtol=0, atol=8 * EPS * float(1 + w2.max()))
    expected = -w2[:, None] * q * np.array([1.0, 1.0, 0.0])
    got = pd.acceleration(q, p, np.full(50, pd.GRAVITY))
    np.testing.assert_allclose(got, expected, rtol=0, atol=float(tol.max()))
    # and the ODE keeps the hidden constraint: d/dt (q . p) = |p|^2 + q . p' = 0
    np.testing.assert_allclose((p * p).sum(axis=1) + (q * got).sum(axis=1), 0.0, atol=float(tol.max()))


def test_without_the_extra_one_line_and_exit_0(monkeypatch, capsys):
    """Without jax the benchmark says how to install it and exits 0, before pinning the process or threads."""
    monkeypatch.setitem(sys.modules, "jax", None)
    affinity, threads = os.sched_getaffinity(0), os.environ.get("NUMBA_NUM_THREADS")
    assert pd.main([]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and 'pip install -e ".[bench]"' in out
    assert os.sched_getaffinity(0) == affinity and os.environ.get("NUMBA_NUM_THREADS") == threads
