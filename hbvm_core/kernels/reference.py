"""Compiled lambda(q, p) and right-hand side of the index-reduced ODE (docs/method.md section 1): a template.

    lambda(q, p) = [G^T M^{-1} G]^{-1} [d2g(q, v) - G^T M^{-1} grad U],   v = M^{-1} p
    q' = M^{-1} p,   p' = -grad U - G lambda(q, p)

Like ``hbvm.py`` this file is never jitted as it stands: ``registry.loop_module("reference", kernels, ...)``
writes a module that binds ``grad_U``, ``G`` and ``d2g`` (``Kernels.d2g``: ``d2g(Q, V, out, params)``) to a
problem's compiled callbacks, with m and nu as constants; ``Problem.multiplier`` and
``Problem.index_reduced_rhs`` call it when the problem's kernels give d2g. ``Minv`` is M^{-1} as an
(m, m) array, or an empty (0, 0) array for M = I.
"""

from hbvm_core.kernels.preamble import *  # noqa: F403 (the builder pastes kernels/preamble.py here)

# d2g, bound by the generated module as the other callbacks (kernels/preamble.py)
d2g = d2g_original = None


@njit(cache=CACHE)
def _lam(q, p, Minv, params, gu, Gq, V, dd, out):
    """lambda at one point q, p (shapes (1, m)) into out (nu,); gu, Gq, V, dd: work arrays. Returns grad U in gu."""
    m, nu = M_SIZE, NU_SIZE
    for a in range(m):
        acc = p[0, a]
        if Minv.shape[0] > 0:
            acc = 0.0
            for b in range(m):
                acc += Minv[a, b] * p[0, b]
        V[0, a] = acc
    grad_U(q, gu, params)
    if nu == 0:
        return
    G(q, Gq, params)
    d2g(q, V, dd, params)
    MG = np.empty((m, nu))
    for a in range(m):
        for i in range(nu):
            acc = Gq[0, a, i]
            if Minv.shape[0] > 0:
                acc = 0.0
                for b in range(m):
                    acc += Minv[a, b] * Gq[0, b, i]
            MG[a, i] = acc
    A = np.empty((nu, nu))
    rhs = np.empty(nu)
    for i in range(nu):
        acc = dd[0, i]
        for a in range(m):
            acc -= MG[a, i] * gu[0, a]
        rhs[i] = acc
        for j in range(nu):
            acc = 0.0
            for a in range(m):
                acc += Gq[0, a, i] * MG[a, j]
            A[i, j] = acc
    out[:] = np.linalg.solve(A, rhs)


@njit(cache=CACHE)
def multiplier(Q, P, Minv, params, out):
    """lambda(q_n, p_n) into out (n, nu) for the rows of Q, P (n, m)."""
    m, nu = M_SIZE, NU_SIZE
    gu, Gq, V, dd = np.empty((1, m)), np.empty((1, m, max(nu, 1))), np.empty((1, m)), np.empty((1, max(nu, 1)))
    for n in range(Q.shape[0]):
        _lam(Q[n : n + 1], P[n : n + 1], Minv, params, gu, Gq, V, dd, out[n])


@njit(cache=CACHE)
def rhs(y, Minv, params):
    """y' = (M^{-1} p, -grad U - G lambda) for y = (q, p) of length 2 m."""
    m, nu = M_SIZE, NU_SIZE
    q = np.empty((1, m))
    p = np.empty((1, m))
    for a in range(m):
        q[0, a] = y[a]
        p[0, a] = y[m + a]
    gu, Gq, V, dd = np.empty((1, m)), np.empty((1, m, max(nu, 1))), np.empty((1, m)), np.empty((1, max(nu, 1)))
    lam = np.empty(max(nu, 1))
    _lam(q, p, Minv, params, gu, Gq, V, dd, lam)
    out = np.empty(2 * m)
    for a in range(m):
        out[a] = V[0, a]
        f = -gu[0, a]
        for i in range(nu):
            f -= Gq[0, a, i] * lam[i]
        out[m + a] = f
    return out
