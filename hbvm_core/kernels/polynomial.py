"""Compiled step and time loop of the polynomial-multiplier HBVM(k, s) (docs/method.md section 6): a template.

This file is never jitted as it stands: ``hbvm_core.kernels.registry`` writes
its source into a generated module that binds ``grad_U`` and ``G`` to a
problem's compiled callbacks (``grad_U(Q, out, params)``, ``G(Q, out, params)``)
by import, as inlined copies, exactly as for the constant-multiplier template
``hbvm.py``, and numba caches the loop on disk, once per callback set.

The arithmetic is that of ``PolynomialStepper.sweep`` and ``step`` term by term
(block matrix RR, the round-off StoppingRule, warm start, projection, Kahan
update), for M = I and nu >= 1. Plain loops and a small Gaussian elimination
instead of numpy's matmul/solve keep the compile time to seconds.
"""

import numpy as np
from numba import njit

from hbvm_core.kernels.rules import DIVERGED, NO_CONVERGENCE, NON_FINITE_STATE, OK, SINGULAR, converged  # noqa: F401

CACHE = True  # the generator writes False for callbacks that cannot be imported by name
# bound by the generated module: the problem's compiled callbacks (inlined copies, and the originals)
grad_U = grad_U_original = None
G = G_original = None


@njit(cache=CACHE)
def _solve(A, b, n):
    """Solve A x = b in place (x in b) by Gaussian elimination with partial pivoting; False if singular."""
    for c in range(n):
        piv, big = c, abs(A[c, c])
        for r in range(c + 1, n):
            if abs(A[r, c]) > big:
                piv, big = r, abs(A[r, c])
        if big == 0.0 or not np.isfinite(big):
            return False
        if piv != c:
            for j in range(n):
                A[c, j], A[piv, j] = A[piv, j], A[c, j]
            b[c], b[piv] = b[piv], b[c]
        for r in range(c + 1, n):
            f = A[r, c] / A[c, c]
            if f != 0.0:
                for j in range(c, n):
                    A[r, j] -= f * A[c, j]
                b[r] -= f * b[c]
    for c in range(n - 1, -1, -1):
        acc = b[c]
        for j in range(c + 1, n):
            acc -= A[c, j] * b[j]
        b[c] = acc / A[c, c]
    return True


@njit(cache=CACHE)
def _sweep(q0, p0, h, gamma, Ihat, W, X, Bf, params, Q, gU, Gq, psi, XMpsi, RR, XMRR, A, lam, new, phi0):
    """One fixed-point sweep gamma -> new; lam (s nu) and phi0 of the sweep, psi[0] = psi_0. False: singular."""
    k, s = Ihat.shape
    m = q0.shape[0]
    nu = Gq.shape[2]
    for l in range(k):
        for a in range(m):
            acc = q0[a]
            for j in range(s):
                acc += h * Ihat[l, j] * gamma[j, a]
            Q[l, a] = acc
    grad_U(Q, gU, params)
    G(Q, Gq, params)
    for j in range(s):
        for a in range(m):
            acc = 0.0
            for l in range(k):
                acc += W[l, j] * gU[l, a]
            psi[j, a] = acc
    for i in range(s):
        for a in range(m):
            acc = 0.0
            for r in range(s):
                acc += X[i, r] * psi[r, a]
            XMpsi[i, a] = acc
    # RR[(i, a), (n, b)] = R_in[a, b] = sum_l b_l P_i(c_l) P_n(c_l) G_l[a, b]
    for i in range(s):
        for n in range(s):
            for a in range(m):
                for b in range(nu):
                    acc = 0.0
                    for l in range(k):
                        acc += Bf[i * s + n, l] * Gq[l, a, b]
                    RR[i * m + a, n * nu + b] = acc
    for i in range(s):
        for a in range(m):
            for c in range(s * nu):
                acc = 0.0
                for r in range(s):
                    acc += X[i, r] * RR[r * m + a, c]
                XMRR[i * m + a, c] = acc
    sn, sm = s * nu, s * m
    for r in range(sn):
        for c in range(sn):
            acc = 0.0
            for x in range(sm):
                acc += RR[x, r] * XMRR[x, c]
            A[r, c] = h * acc
        acc = 0.0
        for a in range(m):
            acc += RR[a, r] * p0[a]
        acc2 = 0.0
        for i in range(s):
            for a in range(m):
                acc2 += RR[i * m + a, r] * XMpsi[i, a]
        lam[r] = acc - h * acc2
    if not _solve(A, lam, sn):
        return False
    for i in range(s):
        for a in range(m):
            acc = 0.0
            for c in range(sn):
                acc += XMRR[i * m + a, c] * lam[c]
            new[i, a] = -h * (XMpsi[i, a] + acc)
    for a in range(m):
        new[0, a] += p0[a]
        acc = 0.0
        for c in range(sn):
            acc += RR[a, c] * lam[c]
        phi0[a] = acc
    return True


@njit(cache=CACHE)
def _project(q1, p0, dp, params, Q1, G1, B, mu, p1):
    """dp <- the increment of the energy-preserving projection of p0 + dp (``projected_increment``, M = I)."""
    m = q1.shape[0]
    nu = G1.shape[2]
    for a in range(m):
        Q1[0, a] = q1[a]
        p1[a] = p0[a] + dp[a]
    G(Q1, G1, params)
    for i in range(nu):
        acc = 0.0
        for a in range(m):
            acc += G1[0, a, i] * p1[a]
        mu[i] = acc
        for j in range(nu):
            acc = 0.0
            for a in range(m):
                acc += G1[0, a, i] * G1[0, a, j]
            B[i, j] = acc
    if not _solve(B, mu, nu):
        return False
    T1, GmuP, GmuGmu = 0.0, 0.0, 0.0
    for a in range(m):
        Gmu = 0.0
        for i in range(nu):
            Gmu += G1[0, a, i] * mu[i]
        T1 += p1[a] * p1[a]
        GmuP += Gmu * p1[a]
        GmuGmu += Gmu * Gmu
        dp[a] -= Gmu
    if T1 > 0.0:
        x = (2.0 * GmuP - GmuGmu) / T1
        fm1 = np.expm1(-0.5 * np.log1p(-x)) if x < 1.0 else 0.0
        for a in range(m):
            dp[a] = fm1 * p0[a] + (1.0 + fm1) * dp[a]
    return True


@njit(cache=CACHE)
def run_chunk(
    q, p, cq, cp, gamma_prev, state, h, N, save_every, warm, rule, projection, Ihat, W, X, Bf, E, P0, params,
    pt, pq, pp, st, slam, sit, info,
):  # fmt: skip
    """Advance from step state[0] until N or until a save buffer is full; returns the status.

    state = [n, have_prev, points in buffer, steps in buffer, total iterations, max iterations, compensated];
    on failure info = [status, step, iterations, last increment].
    """
    k, s = Ihat.shape
    m = q.shape[0]
    nu = slam.shape[1]
    rtol, stall, max_iter = rule[0], rule[1], int(rule[2])
    Q, gU, Gq = np.empty((k, m)), np.empty((k, m)), np.empty((k, m, nu))
    psi, XMpsi = np.empty((s, m)), np.empty((s, m))
    RR, XMRR, A = np.empty((s * m, s * nu)), np.empty((s * m, s * nu)), np.empty((s * nu, s * nu))
    lam, new, gamma, phi0 = np.empty(s * nu), np.empty((s, m)), np.empty((s, m)), np.empty(m)
    Q1, G1, B, mu = np.empty((1, m)), np.empty((1, m, nu)), np.empty((nu, nu)), np.empty(nu)
    dq, dp, p1, q1 = np.empty(m), np.empty(m), np.empty(m), np.empty(m)
    cap = pt.shape[0]
    while state[0] < N:
        n = state[0]
        for i in range(s):
            for a in range(m):
                if state[1] == 0 or warm == 2:
                    gamma[i, a] = p[a] if i == 0 else 0.0
                elif warm == 0:
                    acc = 0.0
                    for j in range(s):
                        acc += E[i, j] * gamma_prev[j, a]
                    gamma[i, a] = acc
                else:
                    gamma[i, a] = gamma_prev[i, a]
        d_prev, d, it, done = np.inf, 0.0, 0, False
        while it < max_iter:
            it += 1
            if not _sweep(q, p, h, gamma, Ihat, W, X, Bf, params, Q, gU, Gq, psi, XMpsi, RR, XMRR, A, lam, new, phi0):
                info[0], info[1], info[2], info[3] = SINGULAR, n, it, np.nan
                return SINGULAR
            d, big = 0.0, 1.0
            for i in range(s):
                for a in range(m):
                    d = max(d, abs(new[i, a] - gamma[i, a]))
                    big = max(big, abs(new[i, a]))
                    gamma[i, a] = new[i, a]
            if not np.isfinite(d):
                info[0], info[1], info[2], info[3] = DIVERGED, n, it, d
                return DIVERGED
            stop = converged(d, d_prev, big, rtol, stall)
            if stop:
                done = True
                break
            d_prev = d
        if not done:
            info[0], info[1], info[2], info[3] = NO_CONVERGENCE, n, it, d
            return NO_CONVERGENCE
        for i in range(s):
            for a in range(m):
                gamma_prev[i, a] = gamma[i, a]
        state[1] = 1
        for a in range(m):
            dq[a] = h * gamma[0, a]
            dp[a] = -h * (psi[0, a] + phi0[a])
        if projection:
            for a in range(m):
                q1[a] = q[a] + dq[a]
            if not _project(q1, p, dp, params, Q1, G1, B, mu, p1):
                info[0], info[1], info[2], info[3] = SINGULAR, n, it, np.nan
                return SINGULAR
        if n % save_every == 0:
            r = state[3]
            st[r] = n * h
            for b in range(nu):
                acc = 0.0
                for i in range(s):
                    acc += P0[i] * lam[i * nu + b]
                slam[r, b] = acc
            sit[r] = it
            state[3] += 1
        for a in range(m):
            if state[6]:
                y = dq[a] - cq[a]
                t = q[a] + y
                cq[a] = (t - q[a]) - y
                q[a] = t
                y = dp[a] - cp[a]
                t = p[a] + y
                cp[a] = (t - p[a]) - y
                p[a] = t
            else:
                q[a] += dq[a]
                p[a] += dp[a]
        for a in range(m):
            if not (np.isfinite(q[a]) and np.isfinite(p[a])):
                info[0], info[1], info[2], info[3] = NON_FINITE_STATE, n, it, np.nan
                return NON_FINITE_STATE
        state[4] += it
        state[5] = max(state[5], it)
        state[0] = n + 1
        if (n + 1) % save_every == 0 or n + 1 == N:
            r = state[2]
            pt[r] = (n + 1) * h
            for a in range(m):
                pq[r, a] = q[a]
                pp[r, a] = p[a]
            state[2] += 1
        if state[2] == cap or state[3] == cap:
            return OK
    return OK
