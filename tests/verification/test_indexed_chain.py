"""The indexed form (hbvm_core.indexed) against the built-in chain (hbvm_core.problems.chain, written by hand in
numpy): the same callbacks at random states, the same sparse pattern, and the same short integration, for 3 and
50 links (50: the sparse path); and a 1000-link chain built from the indexed form in seconds."""

from __future__ import annotations

import time

import numpy as np
import pytest

import hbvm_core as hc
from hbvm_core.methods import HBVM, RATTLE
from hbvm_core.problems import chain

#: the unit round-off of float64
EPS = np.finfo(float).eps
THETA, OMEGA, LENGTH, GRAVITY = 0.5, 0.3, 1.2, 1.0
#: bead i (from 1) has mass 1 + 0.5 sin(i - 1): the built-in chain's mass[j] = 1 + 0.5 sin(j), j = i - 1
MASS = "1 + 0.5*sin(i - 1)"


def indexed_chain(n: int, linear_algebra: str = "auto"):
    """n beads in the plane, rod i from bead i - 1 (x[0] = y[0] = 0: the pin) to bead i; straight at angle theta,
    turning rigidly at omega about the pin (bead i's velocity omega i l (cos, sin) theta)."""
    return hc.from_indexed(
        "indexed_chain",
        {"x": "i in 1..links", "y": "i in 1..links"},
        {"sum": "i in 1..links", "term": f"gravity*({MASS})*y[i]"},
        {"x": "i*l*sin(theta)", "y": "-i*l*cos(theta)"},
        {"x": f"({MASS})*omega*i*l*cos(theta)", "y": f"({MASS})*omega*i*l*sin(theta)"},
        params={"links": n, "l": LENGTH, "gravity": GRAVITY, "theta": THETA, "omega": OMEGA},
        mass=MASS,
        constraints=[{"for": "i in 1..links", "g": "(x[i] - x[i-1])**2 + (y[i] - y[i-1])**2 - l**2"}],
        fixed={"x[0]": 0, "y[0]": 0},
        linear_algebra=linear_algebra,
    )


def builtin_chain(n: int):
    return chain(n=n, length=LENGTH, mass=1.0 + 0.5 * np.sin(np.arange(n)), gravity=GRAVITY, theta0=THETA,
                 omega0=OMEGA)  # fmt: skip


@pytest.mark.parametrize("n", [3, 50])
def test_the_indexed_chain_is_the_builtin_chain(n):
    """Same coordinates (x[i], y[i] one bead after the other as x_{i-1}, y_{i-1}), mass, initial state and, at random
    states of size ~1, U, grad U, H, g, G and d2g to a few eps times their scale (one rounding per operation of
    sums of up to n terms)."""
    a, b = indexed_chain(n), builtin_chain(n)
    assert a.coordinates[:4] == ("x[1]", "y[1]", "x[2]", "y[2]") and (a.m, a.nu) == (b.m, b.nu) == (2 * n, n)
    scale = n * LENGTH  # the chain's reach: the size of q0 and of the sums below
    np.testing.assert_allclose(a.q0, b.q0, rtol=0, atol=4 * n * EPS * scale)  # b: a cumulative sum of n rods
    np.testing.assert_allclose(a.p0, b.p0, rtol=0, atol=4 * n * EPS * scale)
    np.testing.assert_allclose(a.minv(np.ones(a.m)), b.minv(np.ones(b.m)), rtol=4 * EPS)
    rng = np.random.default_rng(n)
    Q, P, V = (rng.normal(size=(5, 2 * n)) for _ in range(3))
    tol = 16 * n * EPS
    for key in ("U", "grad_U", "g"):
        want = getattr(b, key)(Q)
        np.testing.assert_allclose(getattr(a, key)(Q), want, rtol=0, atol=tol * (1 + np.abs(want).max()), err_msg=key)
    np.testing.assert_allclose(a.hamiltonian(Q, P), b.hamiltonian(Q, P), rtol=0, atol=tol * 10 * n)
    np.testing.assert_allclose(a.d2g(Q, V), b.d2g(Q, V), rtol=0, atol=tol * 10)
    # G: the same matrix, from the same pattern of nonzeros (4 per rod, 2 for the pinned one: 4 n - 2 by hand)
    assert a.sparse.nnz == b.sparse.nnz == 4 * n - 2
    for q in Q[:2]:
        Ga, Gb = a.sparse.matrix(q).toarray(), b.sparse.matrix(q).toarray()
        np.testing.assert_allclose(Ga, Gb, rtol=0, atol=tol * (1 + np.abs(Gb).max()))
    if n <= 3:  # the dense callback of a small problem
        np.testing.assert_allclose(a.G(Q), b.G(Q), rtol=0, atol=tol * 10)


@pytest.mark.parametrize("n", [3, 50])
@pytest.mark.parametrize("method", [HBVM(2, 2), RATTLE()], ids=["hbvm22", "rattle"])
def test_a_short_integration_agrees_with_the_builtin_chain(n, method):
    """20 steps on the path the size chooses (dense for 3 links, sparse for 50): the two trajectories differ by
    the round-off of their callbacks carried over the steps (a few eps times the scale per step)."""
    h, steps = 0.01, 20
    runs = [hc.integrate(p, method, h, h * steps, backend="numpy") for p in (indexed_chain(n), builtin_chain(n))]
    assert runs[0].attrs["linear_algebra"] == runs[1].attrs["linear_algebra"] == ("dense" if n < 32 else "sparse")
    scale = n * LENGTH
    for key in ("q", "p"):
        a, b = (np.asarray(getattr(r, key))[-1] for r in runs)
        np.testing.assert_allclose(a, b, rtol=0, atol=10 * EPS * scale * steps, err_msg=key)


def test_a_thousand_links_build_in_seconds_on_the_sparse_path():
    """The terms are derived once (not per link): 1000 links (m = 2000) build in under 5 s of CPU, with 4 n - 2
    nonzeros of G, and keep H and g to round-off over 10 HBVM(2,2) steps (U linear, g quadratic: docs/method.md 3)."""
    t0 = time.process_time()
    problem = indexed_chain(1000)
    assert time.process_time() - t0 < 5.0
    assert problem.sparse.nnz == 4 * 1000 - 2
    traj = hc.integrate(problem, HBVM(2, 2), 1e-3, 1e-2, backend="numpy")
    assert traj.attrs["linear_algebra"] == "sparse"
    H, scale = traj.H(), 1000 * LENGTH
    assert np.abs(H - H[0]).max() <= 10 * EPS * np.abs(H[0]) * traj.steps  # round-off per step
    assert np.abs(traj.g()).max() <= 10 * EPS * scale**2 * traj.steps  # g_i ~ |x|^2 evaluated at |x| ~ scale
