"""Compiled RATTLE step and time loop (``hbvm_core.methods.rattle``, docs/baselines.md): a template.

This file is never jitted as it stands: ``hbvm_core.kernels.registry`` writes
its source into a generated module that binds ``grad_U``, ``G`` and the
constraint ``g`` (``g(Q, out, params)``, out (n, nu)) to a problem's compiled
callbacks, as inlined copies, exactly as for the HBVM templates ``hbvm.py``
and ``polynomial.py``; numba caches the loop on disk, once per callback set.

One step from (q0, p0), in docs/method.md's convention p' = -grad U - G lambda:

    p_half = p0 - h/2 (grad U(q0) + G(q0) lam)
    q1     = q0 + h M^{-1} p_half,            g(q1) = 0                 (Newton on lam)
    p1     = p_half - h/2 (grad U(q1) + G(q1) mu),  G(q1)^T M^{-1} p1 = 0  (linear in mu)

The arithmetic is that of ``RattleStepper.step`` term by term (Newton warm
started from the previous step's lam, the round-off StoppingRule on the change
of q1, the same order of operations), so both paths agree to round-off.
m, nu and M != I are compile-time constants of the generated module; nu = 0 is
the Stormer-Verlet step. The helpers are ``@inline_source`` (pasted into
``run_chunk`` by ``registry.expand_inline``): no array crosses a call.
"""

from hbvm_core.kernels.preamble import *  # noqa: F403 (the builder pastes kernels/preamble.py here)

# the constraint g, bound by the generated module as the other callbacks (kernels/preamble.py)
g = g_original = None


@inline_source
def _minv_columns(L, Gq, MG, v, m, nu):
    """MG <- M^{-1} Gq[0] column by column (a copy for M = I)."""
    for r in range(nu):
        for a in range(m):
            v[a] = Gq[0, a, r]
        if HAS_M:
            minv(L, v)
        for a in range(m):
            MG[a, r] = v[a]


@inline_source
def _velocity_projection(q1, p_star, h, L, P, Q1, G1, MG1, B, mu, v, p1, m, nu):
    """p1 = p_star - h/2 G(q1) mu with G(q1)^T M^{-1} p1 = 0; False if G^T M^{-1} G is singular."""
    for a in range(m):
        Q1[0, a] = q1[a]
    G(Q1, G1, P)
    _minv_columns(L, G1, MG1, v, m, nu)
    for a in range(m):
        v[a] = p_star[a]
    if HAS_M:
        minv(L, v)
    for i in range(nu):
        acc = 0.0
        for a in range(m):
            acc += G1[0, a, i] * v[a]
        mu[i] = acc
        for j in range(nu):
            acc = 0.0
            for a in range(m):
                acc += G1[0, a, i] * MG1[a, j]
            B[i, j] = acc
    solved = solve_small(B, mu, nu)
    for i in range(nu):
        mu[i] = mu[i] / (0.5 * h)
    for a in range(m):
        acc = 0.0
        for i in range(nu):
            acc += G1[0, a, i] * mu[i]
        p1[a] = p_star[a] - 0.5 * h * acc
    return solved


@inline_source
def _newton(h, lam, rtol, stall, max_iter, P, Q1, MG0, G1, gval, J, dlam, qfree, q1, m, nu):
    """Newton on lam for g(q1) = 0 (``RattleStepper.step``); (status, iterations, last change of q1)."""
    status, it, d, d_prev = NO_CONVERGENCE, max_iter, np.nan, np.inf
    c = 0.5 * h * h
    for newton in range(1, max_iter + 1):
        for a in range(m):
            acc = 0.0
            for i in range(nu):
                acc += MG0[a, i] * lam[i]
            q1[a] = qfree[a] - c * acc
            Q1[0, a] = q1[a]
        g(Q1, gval, P)
        G(Q1, G1, P)
        for i in range(nu):
            for j in range(nu):
                acc = 0.0
                for a in range(m):
                    acc += G1[0, a, i] * MG0[a, j]
                J[i, j] = -c * acc
            dlam[i] = -gval[0, i]
        solved = solve_small(J, dlam, nu)
        if not solved:
            status, it, d = SINGULAR, newton, np.nan
            break
        d, scale = 0.0, 1.0
        for a in range(m):
            acc = 0.0
            for i in range(nu):
                acc += MG0[a, i] * dlam[i]
            d = max(d, abs(c * acc))
            scale = max(scale, abs(q1[a]))
        for i in range(nu):
            lam[i] = lam[i] + dlam[i]
        if not np.isfinite(d):
            status, it = DIVERGED, newton
            break
        done = converged(d, d_prev, scale, rtol, stall)
        if done:
            status, it = OK, newton
            break
        d_prev = d
    return status, it, d


@njit(cache=CACHE)
def run_chunk(
    q, p, cq, cp, lam, state, h, N, save_every, rule, L, P, pt_t, pt_q, pt_p, st_t, st_lam, st_it, info, q_fail,
):  # fmt: skip
    """Steps n = state[0], ... until N, or until a point or step buffer is full, or a step fails.

    state = [n, have_prev, points in pt_*, steps in st_*, total iterations, max iterations, compensated];
    lam holds the previous step's multiplier (the Newton start). On failure info = [status, step,
    iterations, increment] and q_fail the last q1 of the Newton iteration. Returns the status.
    """
    m, nu = M_SIZE, NU_SIZE
    cap = pt_t.shape[0]
    rtol, stall, max_iter = rule[0], rule[1], int(rule[2])
    Q0, Q1 = np.empty((1, m)), np.empty((1, m))
    f0, f1 = np.empty((1, m)), np.empty((1, m))
    G0, G1 = np.zeros((1, m, nu)), np.zeros((1, m, nu))
    MG0, MG1 = np.zeros((m, nu)), np.zeros((m, nu))
    gval, J, B = np.zeros((1, nu)), np.zeros((nu, nu)), np.zeros((nu, nu))
    dlam, mu = np.zeros(nu), np.zeros(nu)
    v, qfree, q1, p_star, p1 = np.empty(m), np.empty(m), np.empty(m), np.empty(m), np.empty(m)
    compensated = state[STATE_COMPENSATED] != 0
    n = state[STATE_N]
    while n < N:
        for a in range(m):
            Q0[0, a] = q[a]
        grad_U(Q0, f0, P)
        it = 1
        if nu == 0:  # Stormer-Verlet
            for a in range(m):
                v[a] = p[a] - 0.5 * h * f0[0, a]
                p_star[a] = v[a]
            if HAS_M:
                minv(L, v)
            for a in range(m):
                q1[a] = q[a] + h * v[a]
                Q1[0, a] = q1[a]
            grad_U(Q1, f1, P)
            for a in range(m):
                p1[a] = p_star[a] - 0.5 * h * f1[0, a]
        else:
            G(Q0, G0, P)
            _minv_columns(L, G0, MG0, v, m, nu)
            for a in range(m):
                v[a] = p[a] - 0.5 * h * f0[0, a]
            if HAS_M:
                minv(L, v)
            for a in range(m):
                qfree[a] = q[a] + h * v[a]  # q1 without the constraint force
            status, it, d = _newton(h, lam, rtol, stall, max_iter, P, Q1, MG0, G1, gval, J, dlam, qfree, q1, m, nu)
            if status != OK:
                record_failure(info, status, n, it, d)
                for a in range(m):
                    q_fail[a] = q1[a]
                state[STATE_N] = n
                return status
            c = 0.5 * h * h
            for a in range(m):
                acc, acc0 = 0.0, 0.0
                for i in range(nu):
                    acc += MG0[a, i] * lam[i]
                    acc0 += G0[0, a, i] * lam[i]
                q1[a] = qfree[a] - c * acc
                Q1[0, a] = q1[a]
                p_star[a] = p[a] - 0.5 * h * (f0[0, a] + acc0)
            grad_U(Q1, f1, P)
            for a in range(m):
                p_star[a] = p_star[a] - 0.5 * h * f1[0, a]
            solved = _velocity_projection(q1, p_star, h, L, P, Q1, G1, MG1, B, mu, v, p1, m, nu)
            if not solved:
                record_failure(info, SINGULAR, n, it, np.nan)
                state[STATE_N] = n
                return SINGULAR
        finite = True
        for a in range(m):
            dq, dp = q1[a] - q[a], p1[a] - p[a]
            if compensated:
                q[a], cq[a] = compensated_add(q[a], dq, cq[a])
                p[a], cp[a] = compensated_add(p[a], dp, cp[a])
            else:
                q[a] = q[a] + dq
                p[a] = p[a] + dp
            finite = finite and np.isfinite(q[a]) and np.isfinite(p[a])
        if not finite:
            record_failure(info, NON_FINITE_STATE, n, it, np.nan)
            state[STATE_N] = n
            return NON_FINITE_STATE
        state[STATE_HAVE_PREV] = 1
        state[STATE_ITERATIONS] += it
        if it > state[STATE_MAX_ITERATIONS]:
            state[STATE_MAX_ITERATIONS] = it
        full = save_rows(n, N, h, save_every, q, p, lam, it, state, pt_t, pt_q, pt_p, st_t, st_lam, st_it, cap, m, nu)
        n += 1
        if full:
            break
    state[STATE_N] = n
    return OK
