"""Compiled step and time loop of the polynomial-multiplier HBVM(k, s) (docs/method.md section 6): a template.

This file is never jitted as it stands: ``hbvm_core.kernels.registry`` writes
its source into a generated module that binds ``grad_U`` and ``G`` to a
problem's compiled callbacks (``grad_U(Q, out, params)``, ``G(Q, out, params)``)
by import, as inlined copies, exactly as for the constant-multiplier template
``hbvm.py``, and numba caches the loop on disk, once per callback set.

The arithmetic is that of ``PolynomialStepper.sweep`` and ``step`` term by term
(block matrix RR, the round-off stopping rule, warm start, projection, Kahan
update), for nu >= 1 and any M: ``L`` is the lower Cholesky factor of M, or an
empty (0, 0) array for M = I (then M^{-1} is skipped). m, nu and M != I are
compile-time constants of the generated module, as in ``hbvm.py``. The helpers
are ``@inline_source``, pasted into ``run_chunk`` with those of ``rules.py``
and ``linalg.py`` (the stopping rule, the Kahan update, the save rule,
M^{-1} x, the small solve) by ``registry.expand_inline``: no array crosses a
call. Plain loops instead of numpy's matmul/solve keep the compile time to seconds.
"""

from hbvm_core.kernels.preamble import *  # noqa: F403 (the builder pastes kernels/preamble.py here)


@inline_source
def _sweep(q0, Mp0, h, gamma, Ihat, W, X, Bf, L, params, Q, gU, Gq, psi, Mpsi, XMpsi, RR, MRR, XMRR, A, lam, new,
           phi0, Mv, k, s, m, nu):  # fmt: skip
    """One fixed-point sweep gamma -> new (``PolynomialStepper.sweep``); lam (s nu) and phi0 of the sweep,
    psi[0] = psi_0. False: the multiplier system is singular."""
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
    if HAS_M:  # Mpsi = M^{-1} psi_j (else Mpsi is psi)
        for j in range(s):
            for a in range(m):
                Mv[a] = psi[j, a]
            minv(L, Mv)
            for a in range(m):
                Mpsi[j, a] = Mv[a]
    for i in range(s):
        for a in range(m):
            acc = 0.0
            for r in range(s):
                acc += X[i, r] * Mpsi[r, a]
            XMpsi[i, a] = acc
    # RR[(i, a), (jn, b)] = R_in[a, b] = sum_l b_l P_i(c_l) P_jn(c_l) G_l[a, b]
    for i in range(s):
        for jn in range(s):
            for a in range(m):
                for b in range(nu):
                    acc = 0.0
                    for l in range(k):
                        acc += Bf[i * s + jn, l] * Gq[l, a, b]
                    RR[i * m + a, jn * nu + b] = acc
    if HAS_M:  # MRR = (I (x) M^{-1}) RR, block row by block row (else MRR is RR)
        for i in range(s):
            for c in range(s * nu):
                for a in range(m):
                    Mv[a] = RR[i * m + a, c]
                minv(L, Mv)
                for a in range(m):
                    MRR[i * m + a, c] = Mv[a]
    for i in range(s):
        for a in range(m):
            for c in range(s * nu):
                acc = 0.0
                for r in range(s):
                    acc += X[i, r] * MRR[r * m + a, c]
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
            acc += RR[a, r] * Mp0[a]
        acc2 = 0.0
        for i in range(s):
            for a in range(m):
                acc2 += RR[i * m + a, r] * XMpsi[i, a]
        lam[r] = acc - h * acc2
    solved = solve_small(A, lam, sn)
    if solved:
        for i in range(s):
            for a in range(m):
                acc = 0.0
                for c in range(sn):
                    acc += XMRR[i * m + a, c] * lam[c]
                new[i, a] = -h * (XMpsi[i, a] + acc)
        for a in range(m):
            new[0, a] += Mp0[a]
            acc = 0.0
            for c in range(sn):
                acc += RR[a, c] * lam[c]
            phi0[a] = acc
    return solved


@inline_source
def _project(q1, p0, dp, L, params, Q1, G1, MG1, B, mu, p1, Mp1, Mv, m, nu):
    """dp <- the increment of the energy-preserving projection of p0 + dp (``projected_increment``):
    mu from (G1^T M^{-1} G1) mu = G1^T M^{-1} p1, f - 1 = (1 - x)^(-1/2) - 1 by expm1/log1p. False: singular."""
    for a in range(m):
        Q1[0, a] = q1[a]
        p1[a] = p0[a] + dp[a]
        Mp1[a] = p1[a]
    G(Q1, G1, params)
    for i in range(nu):
        for a in range(m):
            MG1[a, i] = G1[0, a, i]
    if HAS_M:
        minv(L, Mp1)
        for i in range(nu):
            for a in range(m):
                Mv[a] = G1[0, a, i]
            minv(L, Mv)
            for a in range(m):
                MG1[a, i] = Mv[a]
    for i in range(nu):
        acc = 0.0
        for a in range(m):
            acc += G1[0, a, i] * Mp1[a]
        mu[i] = acc
        for j in range(nu):
            acc = 0.0
            for a in range(m):
                acc += G1[0, a, i] * MG1[a, j]
            B[i, j] = acc
    projected = solve_small(B, mu, nu)
    if projected:
        T1, GmuP, GmuGmu = 0.0, 0.0, 0.0
        for a in range(m):
            Gmu, MGmu = 0.0, 0.0
            for i in range(nu):
                Gmu += G1[0, a, i] * mu[i]
                MGmu += MG1[a, i] * mu[i]
            T1 += p1[a] * Mp1[a]
            GmuP += Gmu * Mp1[a]
            GmuGmu += Gmu * MGmu
            dp[a] -= Gmu
        if T1 > 0.0:
            xr = (2.0 * GmuP - GmuGmu) / T1
            fm1 = np.expm1(-0.5 * np.log1p(-xr)) if xr < 1.0 else 0.0
            for a in range(m):
                dp[a] = fm1 * p0[a] + (1.0 + fm1) * dp[a]
    return projected


@njit(cache=CACHE)
def run_chunk(
    q, p, cq, cp, gamma_prev, state, h, N, save_every, warm, rule, projection, Ihat, W, X, Bf, E, P0, L, params,
    pt_t, pt_q, pt_p, st_t, st_lam, st_it, info,
):  # fmt: skip
    """Steps n = state[0], ... until N, or until a point or step buffer is full, or a step fails.

    state = [n, have_prev, points in pt_*, steps in st_*, total iterations, max iterations, compensated];
    the pt_* (t, q, p) and st_* (t, lam, iterations) buffers have equal capacity. On failure info =
    [status, step, iterations, increment]. Returns the status (OK when paused on a full buffer or finished).
    """
    k, s = Ihat.shape
    m, nu = M_SIZE, NU_SIZE
    cap = pt_t.shape[0]
    rtol, stall, max_iter = rule[0], rule[1], int(rule[2])
    Q, gU, Gq = np.empty((k, m)), np.empty((k, m)), np.empty((k, m, nu))
    psi, XMpsi = np.empty((s, m)), np.empty((s, m))
    RR, XMRR, A = np.empty((s * m, s * nu)), np.empty((s * m, s * nu)), np.empty((s * nu, s * nu))
    Mpsi, MRR = psi, RR  # M = I: M^{-1} psi_j and (I (x) M^{-1}) RR are psi_j and RR
    if HAS_M:
        Mpsi, MRR = np.empty((s, m)), np.empty((s * m, s * nu))
    lam, new, gamma, phi0 = np.empty(s * nu), np.empty((s, m)), np.empty((s, m)), np.empty(m)
    lam_t = np.empty(nu)
    Q1, G1, MG1, B, mu = np.empty((1, m)), np.empty((1, m, nu)), np.empty((m, nu)), np.empty((nu, nu)), np.empty(nu)
    dq, dp, p1, q1, Mp1 = np.empty(m), np.empty(m), np.empty(m), np.empty(m), np.empty(m)
    Mp0, Mv = np.empty(m), np.empty(m)
    compensated = state[STATE_COMPENSATED] != 0
    n = state[STATE_N]
    while n < N:
        for a in range(m):
            Mp0[a] = p[a]
        if HAS_M:
            minv(L, Mp0)
        for i in range(s):
            for a in range(m):
                if state[STATE_HAVE_PREV] == 0 or warm == 2:
                    gamma[i, a] = Mp0[a] if i == 0 else 0.0
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
            solved = _sweep(q, Mp0, h, gamma, Ihat, W, X, Bf, L, params, Q, gU, Gq, psi, Mpsi, XMpsi, RR, MRR, XMRR, A, lam, new, phi0, Mv, k, s, m, nu)  # noqa: E501  # fmt: skip
            if not solved:
                record_failure(info, SINGULAR, n, it, np.nan)
                state[STATE_N] = n
                return SINGULAR
            d, big = 0.0, 1.0
            for i in range(s):
                for a in range(m):
                    d = max(d, abs(new[i, a] - gamma[i, a]))
                    big = max(big, abs(new[i, a]))
                    gamma[i, a] = new[i, a]
            if not np.isfinite(d):
                record_failure(info, DIVERGED, n, it, d)
                state[STATE_N] = n
                return DIVERGED
            done = converged(d, d_prev, big, rtol, stall)
            if done:
                break
            d_prev = d
        if not done:
            record_failure(info, NO_CONVERGENCE, n, it, d)
            state[STATE_N] = n
            return NO_CONVERGENCE
        for i in range(s):
            for a in range(m):
                gamma_prev[i, a] = gamma[i, a]
        state[STATE_HAVE_PREV] = 1
        for a in range(m):
            dq[a] = h * gamma[0, a]
            dp[a] = -h * (psi[0, a] + phi0[a])
        if projection:
            for a in range(m):
                q1[a] = q[a] + dq[a]
            projected = _project(q1, p, dp, L, params, Q1, G1, MG1, B, mu, p1, Mp1, Mv, m, nu)
            if not projected:
                record_failure(info, SINGULAR, n, it, np.nan)
                state[STATE_N] = n
                return SINGULAR
        for b in range(nu):  # lambda(t_n) = sum_i P_i(0) lambda_i
            acc = 0.0
            for i in range(s):
                acc += P0[i] * lam[i * nu + b]
            lam_t[b] = acc
        for a in range(m):
            if compensated:
                q[a], cq[a] = compensated_add(q[a], dq[a], cq[a])
                p[a], cp[a] = compensated_add(p[a], dp[a], cp[a])
            else:
                q[a] += dq[a]
                p[a] += dp[a]
        for a in range(m):
            if not (np.isfinite(q[a]) and np.isfinite(p[a])):
                record_failure(info, NON_FINITE_STATE, n, it, np.nan)
                state[STATE_N] = n
                return NON_FINITE_STATE
        state[STATE_ITERATIONS] += it
        state[STATE_MAX_ITERATIONS] = max(state[STATE_MAX_ITERATIONS], it)
        full = save_rows(n, N, h, save_every, q, p, lam_t, it, state, pt_t, pt_q, pt_p, st_t, st_lam, st_it, cap, m, nu)  # noqa: E501  # fmt: skip
        n += 1
        if full:
            break
    state[STATE_N] = n
    return OK
