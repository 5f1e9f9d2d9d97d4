"""The polynomial-multiplier HBVM(k, s)'s lockstep block: LANES runs step together, one per lane (``lanes.py``).

The step is the template's (``kernels/polynomial.py``, docs/method.md 6): fixed-point sweeps of gamma, each
solving the multiplier system A lam = ... of size s nu (``_sweep``), then the optional energy-preserving
projection (``_project``) and the compensated update. ``LANE_DRIVER`` below is ``run_chunk``'s time loop in
lockstep form: the warm start, a masked loop over the lanes still iterating per sweep (as HBVM's
``FIXED_POINT_ITERATION``), the template's helpers pasted as they stand, the projection where the method has it
(PROJECTION, a compile-time constant). ``lane_forms.rewritten`` rewrites it with ``LAYOUT`` (each lane its own
params row and M, diagonal or full; the small solves masked per lane; the tables Ihat, W, X, Bf, E, P0 module
constants). The template's sizes s nu and s m are the constants SN_SIZE and SM_SIZE here, so that the loops of
the multiplier system unroll. Results at each run's own row, as ``run_block`` writes them (lam: the last step's
lambda(t_n)).
"""

from __future__ import annotations

import re
import types

from .lane_forms import form_module, lane_constants, rewritten
from .lanes import LANE_SCALARS, LANE_SYSTEM_MAX, LANE_WORK_MAX, LaneLayout, block_text, iteration_end

#: the callbacks of the polynomial loop
CALLBACKS = ("grad_U", "G")
#: per-run arrays -> shape (in the module's constants): the state, its compensations and increments, M^{-1} p0, the
#: iterate and its last step's, the forces psi and M^{-1} psi (Mpsi, sized 0 for M = I: psi stands in), the blocks
#: RR, (I (x) M^{-1}) RR (MRR, likewise), X M^{-1} RR, the multiplier system A and lam (s nu), phi0, lambda(t_n), the
#: projection's vectors and system; L: the run's Cholesky factor of M
POLYNOMIAL_ARRAYS = {
    "q": ("M_SIZE",), "p": ("M_SIZE",), "cq": ("M_SIZE",), "cp": ("M_SIZE",), "dq": ("M_SIZE",), "dp": ("M_SIZE",),
    "Mp0": ("M_SIZE",), "Mv": ("M_SIZE",), "phi0": ("M_SIZE",), "q1": ("M_SIZE",), "p1": ("M_SIZE",),
    "Mp1": ("M_SIZE",), "gamma": ("S_SIZE", "M_SIZE"), "gamma_prev": ("S_SIZE", "M_SIZE"),
    "new": ("S_SIZE", "M_SIZE"), "psi": ("S_SIZE", "M_SIZE"), "XMpsi": ("S_SIZE", "M_SIZE"),
    "Mpsi": ("S_SIZE", "L_SIZE"), "RR": ("SM_SIZE", "SN_SIZE"), "MRR": ("SL_SIZE", "SN_SIZE"),
    "XMRR": ("SM_SIZE", "SN_SIZE"), "A": ("SN_SIZE", "SN_SIZE"), "lam": ("SN_SIZE",), "lam_t": ("NU_SIZE",),
    "MG1": ("M_SIZE", "NU_SIZE"), "B": ("NU_SIZE", "NU_SIZE"), "mu": ("NU_SIZE",), "L": ("L_SIZE", "L_SIZE"),
}  # fmt: skip
#: the callbacks' arrays: the k stage points of each lane (Q, grad U, G there) and the projection's one point Q1
POLYNOMIAL_BATCH = {
    "Q": ("K_SIZE", "M_SIZE"), "gU": ("K_SIZE", "M_SIZE"), "Gq": ("K_SIZE", "M_SIZE", "NU_SIZE"),
    "Q1": ("ONE", "M_SIZE"), "G1": ("ONE", "M_SIZE", "NU_SIZE"),
}  # fmt: skip
#: what a sweep computes afresh from gamma (written in every lane); psi, lam and phi0, which the update takes from
#: the last live sweep, are kept (their stores masked)
POLYNOMIAL_SCRATCH = frozenset(
    {"Q", "gU", "Gq", "Q1", "G1", "Mv", "Mpsi", "XMpsi", "RR", "MRR", "XMRR", "A", "new", "MG1", "B", "mu", "p1", "Mp1"}
)
#: the method's tables (``driver.polynomial_tables``), module constants
TABLES = ("Ihat", "W", "X", "Bf", "E", "P0")
#: the polynomial HBVM's layout of WK: HBVM's lane scalars
LAYOUT = LaneLayout(POLYNOMIAL_ARRAYS, POLYNOMIAL_BATCH, LANE_SCALARS, POLYNOMIAL_SCRATCH, TABLES)

#: the lockstep time loop (PROJECTION_STEP: ``PROJECTION_STEP`` where the method projects, else nothing), before
#: ``expand_inline`` and ``LaneRewriter`` (the markers as in ``lanes.LANE_DRIVER``)
LANE_DRIVER = '''
@njit(cache=CACHE, error_model="numpy", nogil=True)
def lane_block(q0, p0, h0, N0, every0, run, warm, rule, L_in, params, lam0, compensated,
               status_out, fail_step, steps, iterations, max_iterations, n_saved, t, q_out, p_out, lam_out):
    """One block of LANES polynomial-multiplier HBVM runs in lockstep (``lanes.run_lanes_numba``; ``run``: their
    rows, -1 for an empty lane). L_in [R, m, m] and params [R, P] are the runs' own rows (lam0 unused: the sweeps
    start from gamma); outputs at each run's own row, as ``run_block`` writes them."""
    rtol, stall, max_iter = rule[0], rule[1], int(rule[2])
    n_lanes = run.shape[0]  # LANES, a run-time value (RUNTIME_LANES: lanes.LaneRewriter._runtime_lanes)
    LANE_LOADS
    for n in range(nmax):
        for _ln in lane_loop(None):
            act = 1.0 if n < Nl[_ln] and status == OK else 0.0
            live = act
            dprev = np.inf
            for a in range(M_SIZE):
                Mp0[a] = p[a]
            if HAS_M:
                minv(L, Mp0)
            for i in range(S_SIZE):
                for a in range(M_SIZE):
                    if n == 0 or warm == 2:
                        gamma[i, a] = Mp0[a] if i == 0 else 0.0
                    elif warm == 0:
                        acc = 0.0
                        for j in range(S_SIZE):
                            acc += E[i, j] * gamma_prev[j, a]
                        gamma[i, a] = acc
                    else:
                        gamma[i, a] = gamma_prev[i, a]
        for sweep in range(1, max_iter + 1):
            nlive = 0
            for _ln in lane_loop(live):
                solved = _sweep(q, Mp0, h, gamma, Ihat, W, X, Bf, L, P, Q, gU, Gq, psi, Mpsi, XMpsi, RR, MRR, XMRR, \\
                                A, lam, new, phi0, Mv, K_SIZE, S_SIZE, M_SIZE, NU_SIZE)
                d = 0.0
                scale = 1.0
                for i in range(S_SIZE):
                    for a in range(M_SIZE):
                        d = max(d, abs(new[i, a] - gamma[i, a]))
                        scale = max(scale, abs(new[i, a]))
                for i in range(S_SIZE):
                    for a in range(M_SIZE):
                        gamma[i, a] = new[i, a] if solved else gamma[i, a]
                ok = solved and np.isfinite(d)
                ITERATION_END
        for _ln in lane_loop(None):
            go = act if status == OK else 0.0
        for _ln in lane_loop(go):
            for i in range(S_SIZE):
                for a in range(M_SIZE):
                    gamma_prev[i, a] = gamma[i, a]
            for a in range(M_SIZE):
                dq[a] = h * gamma[0, a]
                dp[a] = -h * (psi[0, a] + phi0[a])
        PROJECTION_STEP
        for _ln in lane_loop(go):
            for b in range(NU_SIZE):
                acc = 0.0
                for i in range(S_SIZE):
                    acc += P0[i] * lam[i * NU_SIZE + b]
                lam_t[b] = acc
            finite = True
            for a in range(M_SIZE):
                if compensated:
                    q[a], cq[a] = compensated_add(q[a], dq[a], cq[a])
                    p[a], cp[a] = compensated_add(p[a], dp[a], cp[a])
                else:
                    q[a] = q[a] + dq[a]
                    p[a] = p[a] + dp[a]
                if not (np.isfinite(q[a]) and np.isfinite(p[a])):
                    finite = False
            status = OK if finite else NON_FINITE_STATE
            fstep = n
            tot = tot + it if finite else tot
            maxit = max(maxit, it) if finite else maxit
        LANE_SAVES
    LANE_RESULTS
'''
#: the energy-preserving projection of the step in lockstep form (``_project``, a lane whose system is singular
#: fails as the per-run loop's)
PROJECTION_STEP = """
        for _ln in lane_loop(go):
            for a in range(M_SIZE):
                q1[a] = q[a] + dq[a]
            projected = _project(q1, p, dp, L, P, Q1, G1, MG1, B, mu, p1, Mp1, Mv, M_SIZE, NU_SIZE)
            status = OK if projected else SINGULAR
            fstep = n
        for _ln in lane_loop(None):
            go = go if status == OK else 0.0
"""


def refusal(runner, m: int, nu: int) -> str | None:
    """Why the runs of this structure do not go in lockstep, as a phrase; None where they do: k s m (nu + 1) (the
    stage forces and the blocks RR per sweep) at most ``lanes.LANE_WORK_MAX``, s nu (the multiplier system,
    unrolled) at most ``lanes.LANE_SYSTEM_MAX``."""
    k, s = runner.arrays[0].shape
    if k * s * m * (nu + 1) > LANE_WORK_MAX:
        return f"k s m (nu + 1) = {k * s * m * (nu + 1)}, above lockstep's {LANE_WORK_MAX}"
    if s * nu > LANE_SYSTEM_MAX:
        return f"the multiplier system's s nu = {s * nu}, above lockstep's {LANE_SYSTEM_MAX}"
    return None


def constants_of(
    runner, problem, *, per_lane: bool | None = None, has_m: bool | None = None, diagonal: bool | None = None
) -> dict:
    """The module's compile-time constants (``lane_forms.lane_constants``), m, nu, k, s and the sizes of the blocks
    (SM_SIZE = s m, SN_SIZE = s nu, SL_SIZE = s m for M != I, else 0), the k stage points that take a params row
    each (PT_SIZE), and whether the step is projected (PROJECTION)."""
    k, s = runner.arrays[0].shape
    m, nu = problem.m, problem.nu
    own = lane_constants(problem, CALLBACKS, per_lane=per_lane, has_m=has_m, diagonal=diagonal)
    return {"M_SIZE": m, "NU_SIZE": nu, "K_SIZE": k, "S_SIZE": s, "SM_SIZE": s * m, "SN_SIZE": s * nu,
            "SL_SIZE": s * own["L_SIZE"], "ONE": 1, "PT_SIZE": k, "PROJECTION": bool(runner.projection),
            **own}  # fmt: skip


def _sizes(text: str) -> str:
    """The template's helpers with s nu and s m as the module's constants SN_SIZE and SM_SIZE (its locals sn, sm)."""
    text = text.replace("    sn, sm = s * nu, s * m\n", "", 1)
    return re.sub(r"\bsm\b", "SM_SIZE", re.sub(r"\bsn\b", "SN_SIZE", text))


def lane_source(constants: dict, tables) -> str:
    """The module's source: the template's helpers with ``LANE_DRIVER`` pasted and rewritten (``lane_forms``)."""
    driver = iteration_end(block_text(LANE_DRIVER, "lam_t"), "sweep").replace(
        "        PROJECTION_STEP\n", PROJECTION_STEP.lstrip("\n") if constants["PROJECTION"] else ""
    )
    if not constants["HAS_M"]:  # M^{-1} psi_j and (I (x) M^{-1}) RR are psi_j and RR
        driver = driver.replace("psi, Mpsi, XMpsi, RR, MRR,", "psi, psi, XMpsi, RR, RR,")
    return rewritten("polynomial", driver, constants, LAYOUT, tables, edit=_sizes)


def lane_module(problem, runner, **options) -> types.ModuleType:
    """The lockstep module for the problem's callbacks, the runner's HBVM(k, s) and ``options`` (``constants_of``):
    generated once, cached on disk like the loops, its per-point callbacks bound."""
    constants = constants_of(runner, problem, **options)
    tables = runner.arrays

    def source() -> str:
        return lane_source(constants, tables)

    return form_module("polynomial_lanes.py", "polynomial", problem, constants, CALLBACKS, source, tables)
