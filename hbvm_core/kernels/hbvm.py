"""Compiled HBVM(k, s) step and time loop (docs/method.md section 3): the template of every per-problem kernel module.

This file is never jitted as it stands. ``hbvm_core.kernels.registry`` copies
its source into a generated module that binds ``grad_U`` and ``G`` to a
problem's numba callbacks (``grad_U(Q, out, P)``: Q (n, m), out (n, m);
``G(Q, out, P)``: out (n, m, nu); P the float array ``Kernels.params``), so
numba compiles -- and caches on disk -- one loop per callback set.

The arithmetic follows ``HBVMStepper.sweep`` and ``hbvm_core.blended`` term by
term (same warm start, same stopping rule, same Kahan update), so the results
agree with the numpy path to round-off. ``L`` is the lower Cholesky factor of
M, or an empty (0, 0) array for M = I (then M^{-1} is skipped).

Performance notes (measured with ``python -m benchmarks.step``): the helpers
below are ``@inline_source``: the generator pastes their source into
``run_chunk`` (``registry.expand_inline``), so the compiled loop is one
function in which no array crosses a call and none is taken out of a tuple.
Each of those costs numba reference-count calls: a helper-structured loop was
3-10x slower, and the same helpers as ``numba.njit(inline="always")`` made the
conical pendulum's fixed-point step 2.6x slower (0.31 -> 0.81 us, one sitting),
since numba increfs and decrefs every array parameter of an inlined call.
The problem's callbacks are inlined copies (1.6x on the conical pendulum).
m, nu, M != I and the solver are compile-time constants of the generated
module (another 2x: the loops over m and nu unroll). k and s are run-time
values, so one compiled loop serves every HBVM(k, s); HBVM_SPECIALISE_KS=1
fixes them too, one module per HBVM(k, s): 1.0-1.7x faster depending on the
problem and solver (measured: ``runner.specialise_ks``).
"""

from hbvm_core.kernels.preamble import *  # noqa: F403 (the builder pastes kernels/preamble.py here)

# and HBVM's own compile-time constants: k, s and the solver
K_SIZE = 0  # > 0: k and s are compile-time constants too (else run-time: one loop for every HBVM(k, s))
S_SIZE = 0
SOLVER = 0

# solver and warm-start codes (the status codes of run_chunk and the stopping rule: kernels/rules.py)
FIXED_POINT, BLENDED = 0, 1
EXTRAPOLATE, PREVIOUS, P0 = 0, 1, 2
CBRT_EPS = 6.055454452393343e-06  # eps^(1/3): the central-difference step of the Newton matrix


@inline_source
def _warm_start(gamma, gamma_prev, E, Mp0, first, warm, s, m):
    """The iteration's start, exactly as HBVMStepper.initial_guess."""
    if first or warm == P0:
        for j in range(s):
            for a in range(m):
                gamma[j, a] = 0.0
        for a in range(m):
            gamma[0, a] = Mp0[a]
    elif warm == EXTRAPOLATE:
        for j in range(s):
            for a in range(m):
                acc = 0.0
                for i in range(s):
                    acc += E[j, i] * gamma_prev[i, a]
                gamma[j, a] = acc
    else:
        for j in range(s):
            for a in range(m):
                gamma[j, a] = gamma_prev[j, a]


@inline_source
def _stages(q, h, gamma, Ihat, W, P, Q, Mv, gU, GQ, psi, rho, k, s, m, nu):
    """Stage positions Q_i = q0 + h sum_j Ihat[i,j] gamma_j, and psi_j, rho_j at them (both iterations)."""
    for i in range(k):
        for a in range(m):
            Mv[a] = 0.0
        for j in range(s):
            c = Ihat[i, j]
            for a in range(m):
                Mv[a] += c * gamma[j, a]
        for a in range(m):
            Q[i, a] = q[a] + h * Mv[a]
    grad_U(Q, gU, P)
    if nu > 0:
        G(Q, GQ, P)
    for j in range(s):
        for a in range(m):
            psi[j, a] = 0.0
            for r in range(nu):
                rho[j, a, r] = 0.0
        for i in range(k):
            c = W[i, j]
            for a in range(m):
                psi[j, a] += c * gU[i, a]
                for r in range(nu):
                    rho[j, a, r] += c * GQ[i, a, r]


@inline_source
def _fp_sweep(h, Mp0, X, L, s, m, nu, psi, rho, Mpsi, Mrho, XMpsi, XMrho, A, lam, new, Mv):
    """The rest of a fixed-point sweep (docs/method.md 3) after ``_stages``: lam from A lam = b, and the new
    gamma in ``new``; False if A is singular."""
    solved = True
    if HAS_M:
        for j in range(s):
            for a in range(m):
                Mv[a] = psi[j, a]
            minv(L, Mv)
            for a in range(m):
                Mpsi[j, a] = Mv[a]
            for r in range(nu):
                for a in range(m):
                    Mv[a] = rho[j, a, r]
                minv(L, Mv)
                for a in range(m):
                    Mrho[j, a, r] = Mv[a]
    for j in range(s):
        for a in range(m):
            XMpsi[j, a] = 0.0
            for r in range(nu):
                XMrho[j, a, r] = 0.0
        for l in range(s):
            c = X[j, l]
            if c != 0.0:  # X is tridiagonal
                for a in range(m):
                    XMpsi[j, a] += c * Mpsi[l, a]
                    for r in range(nu):
                        XMrho[j, a, r] += c * Mrho[l, a, r]
    for j in range(s):
        for a in range(m):
            new[j, a] = -h * XMpsi[j, a]
    for a in range(m):
        new[0, a] += Mp0[a]
    if nu > 0:
        # A lam = b (docs/method.md 3), solved by Gaussian elimination with partial pivoting
        for r in range(nu):
            for c in range(nu):
                acc = 0.0
                for j in range(s):
                    for a in range(m):
                        acc += rho[j, a, r] * XMrho[j, a, c]
                A[r, c] = h * acc
            acc0 = 0.0
            for a in range(m):
                acc0 += rho[0, a, r] * Mp0[a]
            acc = 0.0
            for j in range(s):
                for a in range(m):
                    acc += rho[j, a, r] * XMpsi[j, a]
            lam[r] = acc0 - h * acc
        solved = solve_small(A, lam, nu)
        if solved:
            for j in range(s):
                for a in range(m):
                    acc = 0.0
                    for r in range(nu):
                        acc += XMrho[j, a, r] * lam[r]
                    new[j, a] -= h * acc
    return solved


@inline_source
def _fp_increment(gamma, new, s, m):
    """The stopping rule's (d, scale, bad) of a sweep (fixed_point.StoppingRule): d = max|new - gamma|,
    scale = max(1, max|new|), bad if a difference is NaN."""
    d = 0.0
    scale = 1.0
    bad = False
    for j in range(s):
        for a in range(m):
            diff = abs(new[j, a] - gamma[j, a])
            if diff != diff:
                bad = True
            elif diff > d:
                d = diff
            scale = max(scale, abs(new[j, a]))
    return d, scale, bad


@inline_source
def _newton_matrix(q, h, lam, X2, L, P, s, m, nu, Qfd, gfd, Gfd, K, Hg, A11, delta, Mv):
    """The blended iteration's matrix, once per step; returns OK, or DIVERGED where it is not finite.

    M^{-1} K0 = M^{-1} d/dq [grad U + G lam](q0) and Hg[c, a, r] = d G[c, r] / d q_a by central differences;
    A11 = I + h^2 X^2 (x) M^{-1} K0 (factorised by ``_newton_factor``; the lockstep blocks solve (B2) whole)."""
    for i in range(2 * m):
        for a in range(m):
            Qfd[i, a] = q[a]
    for a in range(m):
        delta[a] = CBRT_EPS * max(1.0, abs(q[a]))
        Qfd[2 * a, a] += delta[a]
        Qfd[2 * a + 1, a] -= delta[a]
    grad_U(Qfd, gfd, P)
    if nu > 0:
        G(Qfd, Gfd, P)
    usable = True
    for a in range(m):
        for c in range(m):
            fp = 0.0
            fm = 0.0
            for r in range(nu):
                fp += Gfd[2 * a, c, r] * lam[r]
                fm += Gfd[2 * a + 1, c, r] * lam[r]
            Mv[c] = ((gfd[2 * a, c] + fp) - (gfd[2 * a + 1, c] + fm)) / (2.0 * delta[a])
            for r in range(nu):
                Hg[c, a, r] = (Gfd[2 * a, c, r] - Gfd[2 * a + 1, c, r]) / (2.0 * delta[a])
        if HAS_M:
            minv(L, Mv)
        for c in range(m):
            K[c, a] = Mv[c]
            usable = usable and np.isfinite(Mv[c])
    for j in range(s):
        for l in range(s):
            f = h * h * X2[j, l]
            for a in range(m):
                for c in range(m):
                    A11[j * m + a, l * m + c] = f * K[a, c]
        for a in range(m):
            A11[j * m + a, j * m + a] += 1.0
    return OK if usable else DIVERGED


@inline_source
def _newton_factor(A11, piv11, sm):
    """A11 LU-factorised in place with partial pivoting (piv11); returns OK or SINGULAR."""
    factored = OK
    for c in range(sm):
        pr = c
        big = abs(A11[c, c])
        for r in range(c + 1, sm):
            if abs(A11[r, c]) > big:
                big = abs(A11[r, c])
                pr = r
        piv11[c] = pr
        if big == 0.0:
            factored = SINGULAR
            break
        if pr != c:
            for j in range(sm):
                A11[c, j], A11[pr, j] = A11[pr, j], A11[c, j]
        for r in range(c + 1, sm):
            f = A11[r, c] / A11[c, c]
            A11[r, c] = f
            for j in range(c + 1, sm):
                A11[r, j] -= f * A11[c, j]
    return factored


@inline_source
def _newton_system(h, gamma, Mp0, lam, X, L, s, m, nu, rho, psi, Hg, HG, Bc, Cr, new, rhs, Mv):
    """The blocks of (B2) and the residual (B1) at the iterate (after ``_stages``).

    Bc = h X M^{-1} rho, Cr_l = rho_l^T + h sum_j X[j, l] (Hg gamma_j)^T;
    rhs = -(F1, F2), F1 = gamma - e0 Mp0 + h X M^{-1} (psi + rho lam), F2 = sum_j rho_j^T gamma_j."""
    for r in range(nu):
        for j in range(s):
            for a in range(m):
                Bc[j * m + a, r] = 0.0
        for l in range(s):
            for c in range(m):
                Mv[c] = rho[l, c, r]
            if HAS_M:
                minv(L, Mv)
            for j in range(s):
                f = h * X[j, l]
                if f != 0.0:
                    for a in range(m):
                        Bc[j * m + a, r] += f * Mv[a]
        for j in range(s):
            for c in range(m):
                acc = 0.0
                for a in range(m):
                    acc += Hg[c, a, r] * gamma[j, a]
                HG[j, c, r] = acc
        for l in range(s):
            for c in range(m):
                acc = 0.0
                for j in range(s):
                    acc += X[j, l] * HG[j, c, r]
                Cr[r, l * m + c] = rho[l, c, r] + h * acc
    for l in range(s):
        for a in range(m):
            acc = 0.0
            for r in range(nu):
                acc += rho[l, a, r] * lam[r]
            Mv[a] = psi[l, a] + acc
        if HAS_M:
            minv(L, Mv)
        for a in range(m):
            new[l, a] = Mv[a]
    for j in range(s):
        for a in range(m):
            acc = 0.0
            for l in range(s):
                acc += X[j, l] * new[l, a]
            rhs[j * m + a] = -(gamma[j, a] + h * acc)
    for a in range(m):
        rhs[a] += Mp0[a]
    for r in range(nu):
        acc = 0.0
        for j in range(s):
            for a in range(m):
                acc += rho[j, a, r] * gamma[j, a]
        rhs[s * m + r] = -acc


@inline_source
def _newton_solve(A11, piv11, Bc, Cr, Y, S, zw, rhs, lam_new, sm, nu):
    """Solve (B2) by the Schur complement of A11: z = A11^{-1} f1, Y = A11^{-1} Bc, (Cr Y) dlam = Cr z - f2,
    dgamma = z - Y dlam; dgamma in rhs[:sm], dlam in lam_new. False if the Schur complement is singular."""
    solved = True
    for rc in range(nu + 1):
        if rc < nu:
            for i in range(sm):
                zw[i] = Bc[i, rc]
        else:
            for i in range(sm):
                zw[i] = rhs[i]
        for c in range(sm):
            pr = piv11[c]
            if pr != c:
                zw[c], zw[pr] = zw[pr], zw[c]
        for i in range(sm):
            acc = zw[i]
            for j in range(i):
                acc -= A11[i, j] * zw[j]
            zw[i] = acc
        for i in range(sm - 1, -1, -1):
            acc = zw[i]
            for j in range(i + 1, sm):
                acc -= A11[i, j] * zw[j]
            zw[i] = acc / A11[i, i]
        if rc < nu:
            for i in range(sm):
                Y[i, rc] = zw[i]
        else:
            for i in range(sm):
                rhs[i] = zw[i]
    if nu > 0:
        for r in range(nu):
            for c in range(nu):
                acc = 0.0
                for i in range(sm):
                    acc += Cr[r, i] * Y[i, c]
                S[r, c] = acc
            acc = 0.0
            for i in range(sm):
                acc += Cr[r, i] * rhs[i]
            lam_new[r] = acc - rhs[sm + r]
        solved = solve_small(S, lam_new, nu)
        if solved:
            for i in range(sm):
                acc = 0.0
                for r in range(nu):
                    acc += Y[i, r] * lam_new[r]
                rhs[i] -= acc
    return solved


@inline_source
def _newton_update(gamma, rhs, s, m):
    """gamma += dgamma (in rhs[:s m]); returns the stopping rule's (d, scale, bad) on max|dgamma|."""
    d = 0.0
    scale = 1.0
    bad = False
    for j in range(s):
        for a in range(m):
            v = gamma[j, a] + rhs[j * m + a]
            diff = abs(v - gamma[j, a])
            if diff != diff:
                bad = True
            elif diff > d:
                d = diff
            scale = max(scale, abs(v))
            gamma[j, a] = v
    return d, scale, bad


@inline_source
def _update(q, p, cq, cp, gamma, psi, rho, lam, h, compensated, m, nu):
    """q1 = q0 + h gamma_0, p1 = p0 - h (psi_0 + rho_0 lam), Kahan-compensated; False if not finite."""
    finite = True
    for a in range(m):
        dq = h * gamma[0, a]
        force = psi[0, a]
        if nu > 0:
            acc = 0.0
            for r in range(nu):
                acc += rho[0, a, r] * lam[r]
            force = psi[0, a] + acc
        dp = -h * force
        if compensated:
            q[a], cq[a] = compensated_add(q[a], dq, cq[a])
            p[a], cp[a] = compensated_add(p[a], dp, cp[a])
        else:
            q[a] = q[a] + dq
            p[a] = p[a] + dp
        if not (np.isfinite(q[a]) and np.isfinite(p[a])):
            finite = False
    return finite


@njit(cache=CACHE)
def run_chunk(
    q, p, cq, cp, gamma_prev, lam_prev, state, h, N, save_every, warm, rule, Ihat, W, X, E, L, P,
    pt_t, pt_q, pt_p, st_t, st_lam, st_it, info,
):  # fmt: skip
    """Steps n = state[0], ... until N, or until a point or step buffer is full, or a step fails.

    state = [n, have_prev, points in pt_*, steps in st_*, total iterations, max iterations, compensated];
    lam_prev holds the multiplier of the previous step (on entry at n = 0: the blended solver's lam0);
    the pt_* (t, q, p) and st_* (t, lam, iterations) buffers have equal capacity. On failure info =
    [status, step, iterations, increment] and gamma_prev holds the initial guess of the failed step.
    Returns the status (OK when paused on a full buffer or finished).
    """
    if K_SIZE > 0:  # k, s fixed in this module (HBVM_SPECIALISE_KS=1): the loops over them unroll too
        k, s = K_SIZE, S_SIZE
    else:
        k, s = Ihat.shape
    m, nu = M_SIZE, NU_SIZE
    cap = pt_t.shape[0]
    rtol, stall, max_iter = rule[0], rule[1], int(rule[2])
    Q = np.empty((k, m))
    gU = np.empty((k, m))
    GQ = np.zeros((k, m, nu))
    psi = np.empty((s, m))
    rho = np.zeros((s, m, nu))
    Mpsi, Mrho = psi, rho  # M = I: M^{-1} psi_j, M^{-1} rho_j are psi_j, rho_j
    if HAS_M:
        Mpsi = np.empty((s, m))
        Mrho = np.zeros((s, m, nu))
    XMpsi = np.empty((s, m))
    XMrho = np.zeros((s, m, nu))
    A = np.empty((nu, nu))
    gamma = np.empty((s, m))
    new = np.empty((s, m))
    lam = np.zeros(nu)
    Mp0 = np.empty(m)
    Mv = np.empty(m)
    sm = s * m  # the blended iteration's work arrays
    A11 = np.empty((sm, sm))
    piv11 = np.empty(sm, dtype=np.int64)
    Bc = np.zeros((sm, nu))
    Cr = np.zeros((nu, sm))
    Y = np.zeros((sm, nu))
    S = np.zeros((nu, nu))
    lam_new = np.zeros(nu)
    zw = np.empty(sm)
    rhs = np.empty(sm + nu)
    Qfd = np.empty((2 * m, m))
    gfd = np.empty((2 * m, m))
    Gfd = np.zeros((2 * m, m, nu))
    K = np.empty((m, m))
    Hg = np.zeros((m, m, nu))
    HG = np.zeros((s, m, nu))
    delta = np.empty(m)
    X2 = np.zeros((s, s))
    for j in range(s):
        for l in range(s):
            for i in range(s):
                X2[j, l] += X[j, i] * X[i, l]
    compensated = state[STATE_COMPENSATED] != 0
    n = state[STATE_N]
    while n < N:
        have_prev = state[STATE_HAVE_PREV] != 0
        for a in range(m):
            Mp0[a] = p[a]
        if HAS_M:
            minv(L, Mp0)
        _warm_start(gamma, gamma_prev, E, Mp0, not have_prev, warm, s, m)
        if SOLVER == FIXED_POINT:  # fixed-point sweeps (docs/method.md 3); pruned from the blended module
            status, it, d = NO_CONVERGENCE, max_iter, np.nan
            d_prev = np.inf
            for sweep in range(1, max_iter + 1):
                _stages(q, h, gamma, Ihat, W, P, Q, Mv, gU, GQ, psi, rho, k, s, m, nu)
                solved = _fp_sweep(h, Mp0, X, L, s, m, nu, psi, rho, Mpsi, Mrho, XMpsi, XMrho, A, lam, new, Mv)
                if not solved:
                    status, it, d = SINGULAR, sweep, np.nan
                    break
                d, scale, bad = _fp_increment(gamma, new, s, m)
                if bad or not np.isfinite(d):
                    status, it, d = DIVERGED, sweep, np.nan if bad else d
                    break
                for j in range(s):
                    for a in range(m):
                        gamma[j, a] = new[j, a]
                done = converged(d, d_prev, scale, rtol, stall)
                if done:
                    status, it = OK, sweep
                    break
                d_prev = d
        else:  # simplified Newton (hbvm_core.blended), from the previous step's multiplier (lam0 on the first step)
            for r in range(nu):
                lam[r] = lam_prev[r]
            status = _newton_matrix(q, h, lam, X2, L, P, s, m, nu, Qfd, gfd, Gfd, K, Hg, A11, delta, Mv)
            if status == OK:
                status = _newton_factor(A11, piv11, sm)
            it, d = 0, np.nan
            d_prev = np.inf
            for newton in range(1, max_iter + 1 if status == OK else 1):
                _stages(q, h, gamma, Ihat, W, P, Q, Mv, gU, GQ, psi, rho, k, s, m, nu)
                _newton_system(h, gamma, Mp0, lam, X, L, s, m, nu, rho, psi, Hg, HG, Bc, Cr, new, rhs, Mv)
                solved = _newton_solve(A11, piv11, Bc, Cr, Y, S, zw, rhs, lam_new, sm, nu)
                if not solved:
                    status, it, d = SINGULAR, newton, np.nan
                    break
                d, scale, bad = _newton_update(gamma, rhs, s, m)
                if bad or not np.isfinite(d):
                    status, it, d = DIVERGED, newton, np.nan if bad else d
                    break
                for r in range(nu):
                    lam[r] += lam_new[r]
                done = converged(d, d_prev, scale, rtol, stall)
                if done:
                    status, it = OK, newton
                    break
                d_prev = d
                status, it = NO_CONVERGENCE, newton
        if status != OK:
            record_failure(info, status, n, it, d)
            # the failed step's initial guess in gamma_prev, for naming a non-finite callback
            if not have_prev or warm == P0:
                _warm_start(gamma_prev, gamma, E, Mp0, True, warm, s, m)
            elif warm == EXTRAPOLATE:
                for j in range(s):
                    for a in range(m):
                        gamma[j, a] = gamma_prev[j, a]
                _warm_start(gamma_prev, gamma, E, Mp0, False, warm, s, m)
            state[STATE_N] = n
            return status
        for j in range(s):
            for a in range(m):
                gamma_prev[j, a] = gamma[j, a]
        for r in range(nu):
            lam_prev[r] = lam[r]
        state[STATE_HAVE_PREV] = 1
        finite = _update(q, p, cq, cp, gamma, psi, rho, lam, h, compensated, m, nu)
        if not finite:
            record_failure(info, NON_FINITE_STATE, n, it, np.nan)
            state[STATE_N] = n
            return NON_FINITE_STATE
        state[STATE_ITERATIONS] += it
        if it > state[STATE_MAX_ITERATIONS]:
            state[STATE_MAX_ITERATIONS] = it
        full = save_rows(n, N, h, save_every, q, p, lam, it, state, pt_t, pt_q, pt_p, st_t, st_lam, st_it, cap, m, nu)
        n += 1
        if full:
            break
    state[STATE_N] = n
    return OK
