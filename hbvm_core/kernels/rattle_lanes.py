"""RATTLE's lockstep block: LANES runs of the RATTLE loop step together, one run per lane (``kernels/lanes.py``).

The step is the template's (``kernels/rattle.py``, docs/baselines.md): from (q0, p0), in docs/method.md's
convention p' = -grad U - G lambda,

    p_half = p0 - h/2 (grad U(q0) + G(q0) lam)
    q1     = q0 + h M^{-1} p_half,            g(q1) = 0                 (Newton on lam)
    p1     = p_half - h/2 (grad U(q1) + G(q1) mu),  G(q1)^T M^{-1} p1 = 0  (linear in mu)

``LANE_DRIVER`` below is ``run_chunk``'s time loop in lockstep form with the step pasted in (``NEWTON_STEP``; for nu
= 0 the Stormer-Verlet step, ``VERLET_STEP``): Newton's iteration is a loop over sweeps outside the lanes, each
sweep a masked loop over the lanes that are still iterating (as HBVM's ``FIXED_POINT_ITERATION``), with the
template's arithmetic term by term (``_newton``'s: warm start from the previous step's lam, the stopping rule on the
change of q1; ``_minv_columns`` and ``_velocity_projection`` pasted as they stand). ``lanes.LaneRewriter``
(``lane_forms.rewritten``) rewrites it with this module's ``LAYOUT`` (its per-run arrays and the callbacks' one
point per lane): each lane takes its own params row and M (diagonal or full), the small solves
(``linalg.solve_small``) become masked per-lane code, and a lane whose Newton fails is masked from then on, its
neighbours going on. Results at each run's own row, as ``run_block`` writes them.
"""

from __future__ import annotations

import types

from .lane_forms import form_module, lane_constants, rewritten
from .lanes import LANE_SCALARS, LANE_SYSTEM_MAX, LANE_WORK_MAX, LaneLayout, block_text, iteration_end

#: the callbacks of the RATTLE loop
CALLBACKS = ("grad_U", "G", "g")
#: RATTLE's per-run arrays -> shape (in the module's constants): the state and its compensations, the multiplier
#: lam (carried from step to step: Newton's start), M^{-1} G(q0) and M^{-1} G(q1), Newton's matrix and increment,
#: the projection's matrix and mu, and the step's vectors; L: the run's Cholesky factor of M
RATTLE_ARRAYS = {
    "q": ("M_SIZE",), "p": ("M_SIZE",), "cq": ("M_SIZE",), "cp": ("M_SIZE",), "lam": ("NU_SIZE",),
    "MG0": ("M_SIZE", "NU_SIZE"), "MG1": ("M_SIZE", "NU_SIZE"), "J": ("NU_SIZE", "NU_SIZE"), "dlam": ("NU_SIZE",),
    "B": ("NU_SIZE", "NU_SIZE"), "mu": ("NU_SIZE",), "v": ("M_SIZE",), "qfree": ("M_SIZE",), "q1": ("M_SIZE",),
    "p_star": ("M_SIZE",), "p1": ("M_SIZE",), "L": ("L_SIZE", "L_SIZE"),
}  # fmt: skip
#: the callbacks' arrays, one point per lane (K_SIZE = 1): the step's start Q0 (grad U and G there) and end Q1
#: (grad U, G and g there)
RATTLE_BATCH = {
    "Q0": ("K_SIZE", "M_SIZE"), "Q1": ("K_SIZE", "M_SIZE"), "f0": ("K_SIZE", "M_SIZE"), "f1": ("K_SIZE", "M_SIZE"),
    "G0": ("K_SIZE", "M_SIZE", "NU_SIZE"), "G1": ("K_SIZE", "M_SIZE", "NU_SIZE"), "gval": ("K_SIZE", "NU_SIZE"),
}  # fmt: skip
#: what a sweep computes afresh (written in every lane; a masked lane's is not kept): the points, Newton's matrix
#: and increment, the projection's system
RATTLE_SCRATCH = frozenset({"Q0", "Q1", "J", "dlam", "B", "mu", "v", "MG1"})
#: RATTLE's layout of WK: HBVM's lane scalars (h, act, live, go, dprev, it, status, fstep, tot, maxit), no tables
LAYOUT = LaneLayout(RATTLE_ARRAYS, RATTLE_BATCH, LANE_SCALARS, RATTLE_SCRATCH)

#: the lockstep time loop of RATTLE (RATTLE_STEP: ``NEWTON_STEP``, or ``VERLET_STEP`` for nu = 0), before
#: ``expand_inline`` and ``LaneRewriter`` (the markers as in ``lanes.LANE_DRIVER``; ``warm`` is unused, the
#: signature is the lockstep block's)
LANE_DRIVER = '''
@njit(cache=CACHE, error_model="numpy", nogil=True)
def lane_block(q0, p0, h0, N0, every0, run, warm, rule, L_in, params, lam0, compensated,
               status_out, fail_step, steps, iterations, max_iterations, n_saved, t, q_out, p_out, lam_out):
    """One block of LANES RATTLE runs in lockstep (``lanes.run_lanes_numba``; ``run``: their rows, -1 for an empty
    lane). L_in [R, m, m], params [R, P] and lam0 [R, nu] (Newton's first start) are the runs' own rows; outputs at
    each run's own row, as ``run_block`` writes them."""
    rtol, stall, max_iter = rule[0], rule[1], int(rule[2])
    n_lanes = run.shape[0]  # LANES, a run-time value (RUNTIME_LANES: lanes.LaneRewriter._runtime_lanes)
    LANE_LOADS
        for b in range(NU_SIZE):
            lam[b] = lam0[src, b]
    for n in range(nmax):
        RATTLE_STEP
        for _ln in lane_loop(go):
            finite = True
            for a in range(M_SIZE):
                dq = q1[a] - q[a]
                dp = p1[a] - p[a]
                if compensated:
                    q[a], cq[a] = compensated_add(q[a], dq, cq[a])
                    p[a], cp[a] = compensated_add(p[a], dp, cp[a])
                else:
                    q[a] = q[a] + dq
                    p[a] = p[a] + dp
                if not (np.isfinite(q[a]) and np.isfinite(p[a])):
                    finite = False
            status = OK if finite else NON_FINITE_STATE
            fstep = n
            tot = tot + it if finite else tot
            maxit = max(maxit, it) if finite else maxit
        LANE_SAVES
    LANE_RESULTS
'''

#: one RATTLE step in lockstep form (nu > 0): the free flight, Newton's sweeps on lam (``_newton``'s arithmetic, a
#: masked loop over the lanes still iterating per sweep, until none is), q1 and the velocity projection. A local
#: is never read across a callback (the loop over lanes is split there), so ``c`` is computed in each part.
NEWTON_STEP = """
        for _ln in lane_loop(None):
            act = 1.0 if n < Nl[_ln] and status == OK else 0.0
            live = act
            dprev = np.inf
            for a in range(M_SIZE):
                Q0[0, a] = q[a]
            grad_U(Q0, f0, P)
            G(Q0, G0, P)
            _minv_columns(L, G0, MG0, v, M_SIZE, NU_SIZE)
            for a in range(M_SIZE):
                v[a] = p[a] - 0.5 * h * f0[0, a]
            if HAS_M:
                minv(L, v)
            for a in range(M_SIZE):
                qfree[a] = q[a] + h * v[a]
        for newton in range(1, max_iter + 1):
            nlive = 0
            for _ln in lane_loop(live):
                c = 0.5 * h * h
                for a in range(M_SIZE):
                    acc = 0.0
                    for i in range(NU_SIZE):
                        acc += MG0[a, i] * lam[i]
                    q1[a] = qfree[a] - c * acc
                    Q1[0, a] = q1[a]
                g(Q1, gval, P)
                G(Q1, G1, P)
                c = 0.5 * h * h
                for i in range(NU_SIZE):
                    for j in range(NU_SIZE):
                        acc = 0.0
                        for a in range(M_SIZE):
                            acc += G1[0, a, i] * MG0[a, j]
                        J[i, j] = -c * acc
                    dlam[i] = -gval[0, i]
                solved = solve_small(J, dlam, NU_SIZE)
                d = 0.0
                scale = 1.0
                for a in range(M_SIZE):
                    acc = 0.0
                    for i in range(NU_SIZE):
                        acc += MG0[a, i] * dlam[i]
                    d = max(d, abs(c * acc))
                    scale = max(scale, abs(q1[a]))
                for i in range(NU_SIZE):
                    lam[i] = lam[i] + dlam[i] if solved else lam[i]
                ok = solved and np.isfinite(d)
                ITERATION_END
        for _ln in lane_loop(None):
            go = act if status == OK else 0.0
        for _ln in lane_loop(go):
            c = 0.5 * h * h
            for a in range(M_SIZE):
                acc = 0.0
                acc0 = 0.0
                for i in range(NU_SIZE):
                    acc += MG0[a, i] * lam[i]
                    acc0 += G0[0, a, i] * lam[i]
                q1[a] = qfree[a] - c * acc
                Q1[0, a] = q1[a]
                p_star[a] = p[a] - 0.5 * h * (f0[0, a] + acc0)
            grad_U(Q1, f1, P)
            for a in range(M_SIZE):
                p_star[a] = p_star[a] - 0.5 * h * f1[0, a]
            solved = _velocity_projection(q1, p_star, h, L, P, Q1, G1, MG1, B, mu, v, p1, M_SIZE, NU_SIZE)
            status = OK if solved else SINGULAR
            fstep = n
        for _ln in lane_loop(None):
            go = go if status == OK else 0.0
"""
#: the Stormer-Verlet step (nu = 0) in lockstep form: one sweep, its iteration count 1
VERLET_STEP = """
        for _ln in lane_loop(None):
            act = 1.0 if n < Nl[_ln] and status == OK else 0.0
            go = act
            it = 1
            for a in range(M_SIZE):
                Q0[0, a] = q[a]
            grad_U(Q0, f0, P)
            for a in range(M_SIZE):
                v[a] = p[a] - 0.5 * h * f0[0, a]
                p_star[a] = v[a]
            if HAS_M:
                minv(L, v)
            for a in range(M_SIZE):
                q1[a] = q[a] + h * v[a]
                Q1[0, a] = q1[a]
            grad_U(Q1, f1, P)
            for a in range(M_SIZE):
                p1[a] = p_star[a] - 0.5 * h * f1[0, a]
"""


def refusal(runner, m: int, nu: int) -> str | None:
    """Why RATTLE's runs of this structure do not go in lockstep, as a phrase; None where they do: m (nu + 1) (the
    multiply-adds of M^{-1} G and its products per sweep) at most ``lanes.LANE_WORK_MAX``, nu (the unrolled small
    solves) at most ``lanes.LANE_SYSTEM_MAX``."""
    if m * (nu + 1) > LANE_WORK_MAX:
        return f"RATTLE's m (nu + 1) = {m * (nu + 1)}, above lockstep's {LANE_WORK_MAX}"
    if nu > LANE_SYSTEM_MAX:
        return f"RATTLE's nu = {nu}, above lockstep's {LANE_SYSTEM_MAX}"
    return None


def constants_of(
    runner, problem, *, per_lane: bool | None = None, has_m: bool | None = None, diagonal: bool | None = None
) -> dict:
    """The module's compile-time constants (``lane_forms.lane_constants``: the same keys as HBVM's where they mean
    the same), m and nu, one point per lane (K_SIZE = PT_SIZE = 1). Its loops over lanes run to a run-time LANES
    (RUNTIME_LANES, as the blended module's: they are short): measured on the conical pendulum (one core, a loaded
    machine) 0.07-0.11 us a run-step against 0.11-0.16 over the constant range, on the rods in space (m = 6, nu = 3)
    the same within the noise."""
    own = lane_constants(problem, CALLBACKS, per_lane=per_lane, has_m=has_m, diagonal=diagonal)
    return {"M_SIZE": problem.m, "NU_SIZE": problem.nu, "K_SIZE": 1, "PT_SIZE": 1, **own}


def lane_source(constants: dict) -> str:
    """The module's source: the RATTLE template's helpers with ``LANE_DRIVER`` pasted and rewritten
    (``lane_forms.rewritten`` with ``LAYOUT``)."""
    step = NEWTON_STEP if constants["NU_SIZE"] else VERLET_STEP
    return rewritten(
        "rattle",
        block_text(LANE_DRIVER, "lam").replace("        RATTLE_STEP\n", iteration_end(step, "newton").lstrip("\n")),
        constants,
        LAYOUT,
    )


def lane_module(problem, runner, **options) -> types.ModuleType:
    """RATTLE's lockstep module for the problem's callbacks and ``options`` (``constants_of``): generated once,
    cached on disk like the loops, its per-point callbacks bound."""
    constants = constants_of(runner, problem, **options)
    return form_module("rattle_lanes.py", "rattle", problem, constants, CALLBACKS, lambda: lane_source(constants))
