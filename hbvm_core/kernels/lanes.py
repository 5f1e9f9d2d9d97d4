"""Lockstep ensembles: LANES runs of a block step together, their loops over runs vectorised.

The per-run block (``kernels/ensemble.py``) runs each run's whole time loop in
turn: per run-step it costs what the scalar loop costs. Here the runs of a
block advance step by step together, one run per lane, so that every
arithmetic statement of the step runs over LANES runs in one loop that LLVM
turns into SIMD instructions (8 doubles a vector with AVX-512).

The step is the template's own arithmetic. ``LANE_DRIVER`` below is the time
loop of the HBVM step in lockstep form, with the solver's iteration pasted in
(``FIXED_POINT_ITERATION``, ``BLENDED_ITERATION``): it calls the template's
``@inline_source`` helpers (``kernels/hbvm.py``: the warm start, the stages,
the fixed-point sweep, its increment, the blended solver's Newton matrix and
system, the compensated update; ``rules.py``: the stopping rule and the save
rule; ``linalg.py``), which ``registry.expand_inline`` pastes
in as for ``run_chunk``. ``lane_source`` then rewrites the pasted code on its
syntax tree (``LaneRewriter``):

- a ``for _ln in lane_loop(mask):`` loop is a loop over the LANES lanes; inside
  it every per-run array of the step (``LANE_ARRAYS``: q, p, gamma, psi, rho,
  ...) and every per-run scalar (``LANE_SCALARS``: h, the live flag, the
  iteration count, the status, ...) is read and written at its lane, as one
  flat work array ``WK[(slot) * LANES + _ln]`` at compile-time offsets: one
  base pointer, so LLVM proves the lanes independent (separate arrays would
  need run-time alias checks, and it gives up);
- a store in a masked loop to what a run keeps (its state, counts, and the
  forces and multiplier of its last live sweep) keeps the lane's old value
  where the mask is 0: a converged, failed or finished run is masked, not
  iterated further, and keeps the values of its last live sweep, as the scalar
  loop keeps those it broke out with; what a sweep computes afresh
  (``SCRATCH``) is written in every lane;
- the problem's callbacks are called once per sweep on all lanes' stage
  points at once (``Q [K LANES, m]``, a Fortran-ordered view of WK, so the
  callback's loop over points runs along the lanes): the lane loop is split
  there;
- branches on compile-time constants (``NU_SIZE > 0``, ``HAS_M``) are pruned,
  branches the same for every lane are taken outside the loop, branches per
  lane that store become masked stores, ``and``/``or`` become ``&``/``|``; a
  conditional expression of two values without effects (a masked store's) is
  one ``select`` (``lane_select``), not a branch in numba's front end;
- the triangular loops of the elimination are unrolled; the method's tables
  are module constants (``TABLES``).

Every loop inside a lane loop has a compile-time trip count (k, s, m, nu are
the module's constants), so LLVM unrolls it (``unrolled``: with its threshold
raised while the module compiles, as far as the module's size needs,
``unroll_threshold``) and the loop over lanes is the innermost: that is the
one it vectorises. The module is compiled with numba's
``error_model="numpy"``: a division by zero gives inf or NaN instead of
raising, so a loop over lanes has no exit (a masked lane may divide by zero;
its result is not kept).

Where it applies (``applies``): HBVM with a constant multiplier, either
solver, k s m (nu + 1) at most ``LANE_WORK_MAX`` (and for the blended solver s m
+ nu at most ``LANE_SYSTEM_MAX``); RATTLE and PolynomialHBVM, whose loop
descriptions name their own lockstep forms (``lane_form``: ``rattle_lanes.py``,
``polynomial_lanes.py``, each a driver text and a ``LaneLayout`` of WK rewritten
by this module's ``LaneRewriter``, ``lane_forms.py``; their sizes limited alike,
``refusal``): a run-step 0.78x and 0.18x the scalar loop on the conical pendulum,
0.22x and 0.09x on the rods in space (benchmarks/README.md).
Each lane takes
its run's own M (``HAS_M``: the run's Cholesky factor is a lane array;
``linalg.minv`` rewritten as the rest, its sizes the constant L_SIZE, with the
products with the zeros off the diagonal dropped where every M is diagonal,
``DIAGONAL``) and its own params
row: a module with ``LANE_PARAMS`` hands the callbacks that read params their
per-point form (``lane_callbacks.per_point``: a params row per stage point, the
loop over points still along the lanes), or, where a callback cannot be so
rewritten, calls it once per lane on that lane's points (then a block whose
lanes share one params row takes a module of its own, which calls it once). So
the runs of one structure go together (``ensemble.py``: runs sharing a params
row fill blocks first); fewer than ``MIN_GROUP`` runs go to the per-run block.
Results agree with the per-run loop to round-off (the same operations in the
same order: the small solve, ``linalg.solve_small``, is written so that its
per-lane branches and row swap become masked stores). The blended block solves
the bordered system (B2) whole by that solve, in each lane (the per-run loop:
A11's LU and its Schur complement, whose row swaps at a per-run pivot the loop
over lanes cannot vectorise): the same iterates to round-off, and the same
iteration counts but at a step whose increments stall at round-off, where the
stopping rule decides on the rounding (a sweep more or less).
"""

from __future__ import annotations

import ast
import contextlib
import copy as copy_module
import re
import types
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import ConfigError
from . import lane_callbacks
from .callbacks import CALLBACK_NAMES
from .description import template_path, template_source
from .modules import by_key, generated_module, module_tag
from .registry import LOOP_BINDING, SHARED, bound_callbacks, expand_inline, resolve_callback, timed_loops

#: runs of a lockstep block: two vectors of 8 doubles (AVX-512). Measured per run-step over the per-run block,
#: one core (a loaded machine): 16 lanes 0.29x (conical HBVM(2,2)) and 0.48x (tethered HBVM(6,2)); 32 lanes
#: 0.27x and 0.56x; 64 lanes 0.34x and 1.05x: a block's work array (LANES x some 600 slots for the tethered
#: satellites) must stay in the caches
LANES = 16
#: the largest k s m (nu + 1) (the multiply-adds of psi and rho per sweep) that gets a lockstep block; past it
#: the unrolled loops grow the module (and its compile) beyond what was measured
LANE_WORK_MAX = 1024
#: the most unknowns s m + nu of the blended solver's bordered system that get a lockstep block: its solve costs
#: some (s m + nu)^3 / 3 multiply-adds an iteration per lane, where the per-run loop factorises A11 once a step and
#: solves by its Schur complement; measured faster than the per-run block up to 15 (rods in space, HBVM(4,2))
LANE_SYSTEM_MAX = 16
#: the fewest runs that get lockstep blocks (fewer would leave most lanes empty)
MIN_GROUP = LANES // 2

#: per-run arrays of the step -> shape (in the module's constants); each is a range of slots of WK
LANE_ARRAYS = {
    "q": ("M_SIZE",), "p": ("M_SIZE",), "cq": ("M_SIZE",), "cp": ("M_SIZE",), "Mp0": ("M_SIZE",), "Mv": ("M_SIZE",),
    "gamma": ("S_SIZE", "M_SIZE"), "gamma_prev": ("S_SIZE", "M_SIZE"), "new": ("S_SIZE", "M_SIZE"),
    "psi": ("S_SIZE", "M_SIZE"), "XMpsi": ("S_SIZE", "M_SIZE"),
    "rho": ("S_SIZE", "M_SIZE", "NU_SIZE"), "XMrho": ("S_SIZE", "M_SIZE", "NU_SIZE"),
    "A": ("NU_SIZE", "NU_SIZE"), "lam": ("NU_SIZE",), "lam_prev": ("NU_SIZE",),
    "psi_k": ("S_SIZE", "M_SIZE"), "rho_k": ("S_SIZE", "M_SIZE", "NU_SIZE"), "lam_k": ("NU_SIZE",),
    "Mpsi": ("S_SIZE", "L_SIZE"), "Mrho": ("S_SIZE", "L_SIZE", "NU_SIZE"), "L": ("L_SIZE", "L_SIZE"),
    # the blended solver's (sizes 0 in a fixed-point module): K0, Hg, the central differences' steps, A11, the
    # coupling blocks, the bordered matrix J of (B2) and its right-hand side
    "K": ("FM_SIZE", "FM_SIZE"), "Hg": ("FM_SIZE", "FM_SIZE", "NU_SIZE"), "delta": ("FM_SIZE",),
    "HG": ("S_SIZE", "FM_SIZE", "NU_SIZE"), "A11": ("SM_SIZE", "SM_SIZE"), "Bc": ("SM_SIZE", "NU_SIZE"),
    "Cr": ("NU_SIZE", "SM_SIZE"), "J": ("SB_SIZE", "SB_SIZE"), "rhs": ("SB_SIZE",),
}  # fmt: skip
#: what a sweep computes afresh from gamma (the stage points, forces, the multiplier system, the new iterate):
#: written in every lane, masked or not (cheaper, and fewer branches for LLVM); what a run keeps from its last
#: live sweep is copied out masked (psi_k, rho_k, lam_k: the forces and multiplier the update takes)
SCRATCH = frozenset(
    {
        "Q",
        "gU",
        "GQ",
        "Mv",
        "Mp0",
        "Mpsi",
        "Mrho",
        "XMpsi",
        "XMrho",
        "A",
        "new",
        "psi",
        "rho",
        "lam",
        "Qfd",
        "gfd",
        "Gfd",
        "K",
        "Hg",
        "delta",
        "HG",
        "A11",
        "Bc",
        "Cr",
        "J",
        "rhs",
    }
)
#: per-run scalars (one slot each): the step size, whether the run steps now (act), iterates (live), steps this
#: step after its sweeps (go); the last increment, the sweep it stopped at, its status, the step it failed at,
#: the total and largest iteration counts
LANE_SCALARS = ("h", "act", "live", "go", "dprev", "it", "status", "fstep", "tot", "maxit")
#: the callbacks' arrays -> their shape as the callbacks index them (point i of lane l is row i LANES + l); held in
#: WK with the axes reversed (Q[i, a] of lane l at slot a K + i), so the callbacks get Fortran-ordered views whose
#: loop over points runs along the lanes
BATCH_ARRAYS = {
    "Q": ("K_SIZE", "M_SIZE"),
    "gU": ("K_SIZE", "M_SIZE"),
    "GQ": ("K_SIZE", "M_SIZE", "NU_SIZE"),
    "Qfd": ("FD_SIZE", "M_SIZE"),
    "gfd": ("FD_SIZE", "M_SIZE"),
    "Gfd": ("FD_SIZE", "M_SIZE", "NU_SIZE"),
}
#: the method's tables (``runner.constant_tables``: functions of k and s alone; X2 = X X, summed as ``run_chunk``
#: does): module globals of the lockstep module, which numba freezes into the compiled code, so that their entries
#: fold into the unrolled arithmetic (and the loops over lanes read one array only, WK)
TABLES = ("Ihat", "W", "X", "E", "X2")
#: lane arrays that are diagonal in every lane when a constant says so: the Cholesky factor of a diagonal M
#: (DIAG_M). Its products with the zeros off the diagonal are dropped (``LaneRewriter._unroll``): acc - 0 y is
#: acc for finite y, so ``linalg.minv`` becomes x_a / L_aa / L_aa
DIAGONAL = {"L": "DIAG_M"}
#: the lane index of a lane loop
LANE = "_ln"


@dataclass(frozen=True)
class LaneLayout:
    """What one lockstep driver keeps in WK: its lane arrays (name -> shape in the module's constants), the
    callbacks' arrays (``BATCH_ARRAYS``' form), its lane scalars, what a sweep writes in every lane (``SCRATCH``'s
    rule) and its tables (``TABLES``). HBVM's (``HBVM_LAYOUT``) is this module's; RATTLE's is ``rattle_lanes``'."""

    arrays: dict
    batch: dict
    scalars: tuple[str, ...]
    scratch: frozenset
    tables: tuple[str, ...] = ()


#: HBVM's layout: this module's tables above
HBVM_LAYOUT = LaneLayout(LANE_ARRAYS, BATCH_ARRAYS, LANE_SCALARS, SCRATCH, TABLES)

#: the lines every lockstep driver shares (``block_text`` pastes them at its markers): LANE_LOADS, the block's
#: arrays and each lane's run loaded (its state, h, steps, save rule, params row and M's factor; the loop over the
#: lanes goes on in the driver, which loads its own multiplier there); LANE_SAVES, a step's saved points; and
#: LANE_RESULTS, each run's status, counts and last multiplier (KEPT: the driver's name of it)
LANE_LOADS = """
    WK = np.zeros(LANE_SLOTS * LANES)
    batch_views()
    P = params[run[0]]
    PL = np.empty((LANES, params.shape[1]))
    PPW = np.empty((params.shape[1], PT_SIZE * LANES))
    PP = PPW.T
    Nl = np.zeros(LANES, dtype=np.int64)
    every = np.ones(LANES, dtype=np.int64)
    nsv = np.ones(LANES, dtype=np.int64)
    nmax = 0
    for _ln in range(LANES):
        src = run[_ln] if run[_ln] >= 0 else run[0]
        if run[_ln] >= 0:
            Nl[_ln] = N0[src]
            every[_ln] = every0[src]
            nmax = max(nmax, Nl[_ln])
            t[src, 0] = 0.0
        for a in range(M_SIZE):
            q[a] = q0[src, a]
            p[a] = p0[src, a]
            if run[_ln] >= 0:
                q_out[src, 0, a] = q0[src, a]
                p_out[src, 0, a] = p0[src, a]
        h = h0[src]
        for j in range(params.shape[1]):
            PL[_ln, j] = params[src, j]
            for i in range(PT_SIZE):
                PPW[j, i * LANES + _ln] = params[src, j]
        for a in range(L_SIZE):
            for c in range(L_SIZE):
                L[a, c] = L_in[src, a, c]
"""
LANE_SAVES = """
        for _ln in range(LANES):
            if go > 0.0 and status == OK and run[_ln] >= 0:
                keep = point_saved(n + 1, Nl[_ln], every[_ln])
                if keep:
                    src, row = run[_ln], nsv[_ln]
                    t[src, row] = (n + 1) * h
                    for a in range(M_SIZE):
                        q_out[src, row, a] = q[a]
                        p_out[src, row, a] = p[a]
                    nsv[_ln] = row + 1
"""
LANE_RESULTS = """
    for _ln in range(LANES):
        src = run[_ln]
        if src >= 0:
            code = int(status)
            status_out[src] = code
            fail_step[src] = -1 if code == OK else int(fstep)
            steps[src] = Nl[_ln] if code == OK else int(fstep)
            iterations[src] = int(tot)
            max_iterations[src] = int(maxit)
            n_saved[src] = nsv[_ln]
            for b in range(NU_SIZE):
                lam_out[src, b] = KEPT[b] if code == OK and Nl[_ln] > 0 else np.nan
"""


def block_text(driver: str, kept: str) -> str:
    """A lockstep driver's text with the shared lines pasted at its markers (``LANE_LOADS``, ``LANE_SAVES``,
    ``LANE_RESULTS``; ``kept``: the name of the multiplier a run's last step keeps)."""
    pasted = {"    LANE_LOADS\n": LANE_LOADS, "        LANE_SAVES\n": LANE_SAVES, "    LANE_RESULTS\n": LANE_RESULTS}
    for marker, text in pasted.items():
        driver = driver.replace(marker, text.lstrip("\n"))
    return driver.replace("KEPT[b]", f"{kept}[b]")


#: the lockstep time loop (HBVM; SOLVER_ITERATION: the solver's iteration of a step, ``FIXED_POINT_ITERATION`` or
#: ``BLENDED_ITERATION``), before ``expand_inline`` and ``LaneRewriter``: ``for _ln in
#: lane_loop(mask)`` is a loop over the lanes whose stores to what a run keeps are masked by the lane scalar
#: ``mask`` (None: every lane), ``for _ln in range(LANES)`` one whose stores are not (and which is not meant to
#: vectorise: the loads and the saved points), ``batch_views()`` binds the callbacks' arrays Q, gU, GQ to their
#: views of WK; LANE_LOADS, LANE_SAVES, LANE_RESULTS the lines every driver shares (``block_text``); a line ending
#: in a backslash goes on in the next (one line a call, for ``expand_inline``)
LANE_DRIVER = '''
@njit(cache=CACHE, error_model="numpy", nogil=True)
def lane_block(q0, p0, h0, N0, every0, run, warm, rule, L_in, params, lam0, compensated,
               status_out, fail_step, steps, iterations, max_iterations, n_saved, t, q_out, p_out, lam_out):
    """One block of LANES runs in lockstep (``run``: their rows, -1 for an empty lane; ``run_lanes_numba`` hands
    the blocks to threads). L_in [R, m, m] (each run's Cholesky factor of M; [R, 0, 0] for M = I) and params
    [R, P] and lam0 [R, nu] (the blended solver's first multiplier) are the runs' own rows; outputs at each run's
    own row, as ``run_block`` writes them. P: the first
    run's params row (the callbacks' where the lanes share it); PL [LANES, P]: each lane's, PP [K LANES, P]: each
    stage point's (Fortran-ordered, as Q), where they differ (LANE_PARAMS)."""
    rtol, stall, max_iter = rule[0], rule[1], int(rule[2])
    n_sys = SB_SIZE * run.shape[0] // LANES  # SB_SIZE, a run-time value (the blended solve's loops stay loops)
    n_lanes = run.shape[0]  # LANES, a run-time value (LaneRewriter._runtime_lanes)
    LANE_LOADS
        for b in range(NU_SIZE):
            lam_prev[b] = lam0[src, b]
    for n in range(nmax):
        for _ln in lane_loop(None):
            act = 1.0 if n < Nl[_ln] and status == OK else 0.0
            live = act
            dprev = np.inf
            for a in range(M_SIZE):
                Mp0[a] = p[a]
            if HAS_M:
                minv(L, Mp0)
            _warm_start(gamma, gamma_prev, E, Mp0, n == 0, warm, S_SIZE, M_SIZE)
        SOLVER_ITERATION
        for _ln in lane_loop(None):
            go = act if status == OK else 0.0
        for _ln in lane_loop(go):
            for j in range(S_SIZE):
                for a in range(M_SIZE):
                    gamma_prev[j, a] = gamma[j, a]
            for b in range(NU_SIZE):
                lam_prev[b] = lam_k[b]
            finite = _update(q, p, cq, cp, gamma, psi_k, rho_k, lam_k, h, compensated, M_SIZE, NU_SIZE)
            status = OK if finite else NON_FINITE_STATE
            tot = tot + it if finite else tot
            maxit = max(maxit, it) if finite else maxit
        LANE_SAVES
    LANE_RESULTS
'''


#: the end of an iteration of a step, either solver's (``ITERATE`` its count): the increment of gamma from ``new``,
#: accepted where the iteration did not fail (``ACCEPT``, then the blended solver's lam), the stopping rule and the
#: status (``STOP``), the forces of the iteration (``RECORD``, then the fixed point's lam), what the lane keeps
#: (``KEEP``); ``STOP`` and ``KEEP`` end RATTLE's and the polynomial multiplier's iterations too (``iteration_end``)
ACCEPT = """
                d, scale, bad = _fp_increment(gamma, new, S_SIZE, M_SIZE)
                ok = solved and not bad and np.isfinite(d)
                for j in range(S_SIZE):
                    for a in range(M_SIZE):
                        gamma[j, a] = new[j, a] if ok else gamma[j, a]
"""
STOP = """
                done = converged(d, dprev, scale, rtol, stall)
                code = OK if ok else (SINGULAR if not solved else DIVERGED)
                if ok and not done and ITERATE == max_iter:
                    code = NO_CONVERGENCE
"""
RECORD = """
                for j in range(S_SIZE):
                    for a in range(M_SIZE):
                        psi_k[j, a] = psi[j, a]
                        for b in range(NU_SIZE):
                            rho_k[j, a, b] = rho[j, a, b]
"""
KEEP = """
                status = code
                fstep = n
                it = ITERATE
                dprev = d
                live = 1.0 if ok and not done else 0.0
                nlive += 1 if _mask and ok and not done and ITERATE < max_iter else 0
            if nlive == 0:
                break
"""


def _iteration(head: str, middle: str, tail: str, iterate: str) -> str:
    """An iteration's text: its own ``head``, ``ACCEPT``, its ``middle``, ``STOP``, ``RECORD``, its ``tail``,
    ``KEEP``, with ``iterate`` the name of its count."""
    parts = (head, ACCEPT, middle, STOP, RECORD, tail, KEEP)
    return "".join(part.strip("\n") + "\n" for part in parts if part.strip()).replace("ITERATE", iterate)


def iteration_end(text: str, iterate: str) -> str:
    """A driver's text with ``STOP`` and ``KEEP`` pasted at its line ``ITERATION_END`` (after ``ok``, ``solved``,
    ``d`` and ``scale`` of an iteration whose count is ``iterate``)."""
    end = (STOP.strip("\n") + "\n" + KEEP.strip("\n") + "\n").replace("ITERATE", iterate)
    return text.replace("                ITERATION_END\n", end)


#: the fixed-point sweeps of a step in lockstep form (``LANE_DRIVER``'s SOLVER_ITERATION with SOLVER 0)
FIXED_POINT_ITERATION = _iteration(
    """
        for sweep in range(1, max_iter + 1):
            nlive = 0
            for _ln in lane_loop(live):
                _stages(q, h, gamma, Ihat, W, P, Q, Mv, gU, GQ, psi, rho, K_SIZE, S_SIZE, M_SIZE, NU_SIZE)
                solved = _fp_sweep(h, Mp0, X, L, S_SIZE, M_SIZE, NU_SIZE, psi, rho, psi, rho, XMpsi, XMrho, A, \\
                                   lam, new, Mv)
""",
    "",
    """
                for b in range(NU_SIZE):
                    lam_k[b] = lam[b]
""",
    "sweep",
)
#: the blended solver's simplified Newton iteration of a step in lockstep form (``run_chunk``'s, docs/method.md 3):
#: K0, Hg and A11 once per step (``_newton_matrix``, its central differences one callback call on all lanes'
#: 2 m points), then per iteration the residual and blocks of (B2) (``_newton_system``) and the bordered system
#: J (dgamma, dlam) = -(F1, F2) solved whole by ``linalg.solve_small`` (as ``hbvm_core.blended``'s numpy path;
#: the per-run loop factorises A11 once and solves by its Schur complement, whose row swaps at a per-run pivot
#: the loop over lanes cannot vectorise). The solve is a ``lane_sunk`` loop (``LaneRewriter._sunk``): its loops
#: stay loops, a loop over lanes inside each, and its size n_sys a run-time value (SB_SIZE, which LLVM cannot
#: see through ``run.shape[0]``), so that LLVM does not unroll (s m + nu)^3 statements: the rods in space's module
#: (s m + nu = 15) compiled in 111 s unrolled, 57 s so at load 5 and 3.5 (32 s at load 1.4)
BLENDED_ITERATION = _iteration(
    """
        for _ln in lane_loop(act):
            for r in range(NU_SIZE):
                lam_k[r] = lam_prev[r]
            code = _newton_matrix(q, h, lam_k, X2, L, P, S_SIZE, M_SIZE, NU_SIZE, Qfd, gfd, Gfd, K, Hg, A11, \\
                                  delta, Mv)
            status = code
            fstep = n
            it = 0
            live = act if code == OK else 0.0
        for newton in range(1, max_iter + 1):
            nlive = 0
            for _ln in lane_loop(live):
                _stages(q, h, gamma, Ihat, W, P, Q, Mv, gU, GQ, psi, rho, K_SIZE, S_SIZE, M_SIZE, NU_SIZE)
                _newton_system(h, gamma, Mp0, lam_k, X, L, S_SIZE, M_SIZE, NU_SIZE, rho, psi, Hg, HG, Bc, Cr, new, \\
                               rhs, Mv)
                for i in range(SM_SIZE):
                    for j in range(SM_SIZE):
                        J[i, j] = A11[i, j]
                    for r in range(NU_SIZE):
                        J[i, SM_SIZE + r] = Bc[i, r]
                for r in range(NU_SIZE):
                    for j in range(SM_SIZE):
                        J[SM_SIZE + r, j] = Cr[r, j]
                    for c in range(NU_SIZE):
                        J[SM_SIZE + r, SM_SIZE + c] = 0.0
            for _ln in lane_sunk():
                solved = solve_small(J, rhs, n_sys)
            for _ln in lane_loop(live):
                for j in range(S_SIZE):
                    for a in range(M_SIZE):
                        new[j, a] = gamma[j, a] + rhs[j * M_SIZE + a]
""",
    """
                for r in range(NU_SIZE):
                    lam_k[r] = lam_k[r] + rhs[SM_SIZE + r] if ok else lam_k[r]
""",
    "",
    "newton",
)


def applies(runner, m: int, nu: int) -> bool:
    """Whether a runner's loop has a lockstep form that pays: HBVM's constant multiplier, either solver (any M, any
    params per run), k s m (nu + 1) at most ``LANE_WORK_MAX``, and for the blended solver s m + nu at most
    ``LANE_SYSTEM_MAX``; a loop whose description names its own lockstep form (``lane_form``: RATTLE's) where that
    form's ``refusal`` has no objection."""
    from .driver import CompiledRunner

    description = getattr(runner, "description", None)
    if description is None or not description.has("lanes"):
        return False
    form = lane_form(runner)
    if form is not None:
        return form.refusal(runner, m, nu) is None
    if type(runner) is not CompiledRunner:
        return False
    k, s = runner.tab[0].shape
    return k * s * m * (nu + 1) <= LANE_WORK_MAX and bordered_size(runner, m, nu) <= LANE_SYSTEM_MAX


def lane_form(runner) -> types.ModuleType | None:
    """The module of a runner's lockstep form where its loop description names one (``LoopDescription.lanes``:
    RATTLE's ``kernels/rattle_lanes.py``, which builds on this module; imported by name, as the drivers are), None
    for this module's own (HBVM's)."""
    import importlib

    name = getattr(getattr(runner, "description", None), "lanes", None)
    return importlib.import_module(name) if name else None


def bordered_size(runner, m: int, nu: int) -> int:
    """s m + nu, the unknowns of the blended solver's bordered system (B2) (0 for the fixed point)."""
    from .driver import SOLVER_CODES

    return runner.tab[0].shape[1] * m + nu if runner.solver == SOLVER_CODES["blended"] else 0


def constants_of(
    runner, problem, *, per_lane: bool | None = None, has_m: bool | None = None, diagonal: bool | None = None
) -> dict:
    """The lockstep module's compile-time constants: sizes, k and s (the loops over them unroll), LANES; whether
    M != I (HAS_M, L_SIZE = m, DIAG_M: every run's M diagonal; by default the problem's own M); LANE_PARAMS: a
    params row per lane, handed to the callbacks that read params in their per-point form (POINT_CALLBACKS) or
    lane by lane (PARAM_CALLBACKS); POINT_FORM: the version of that rewrite (the module is cached on disk with the
    per-point callbacks compiled in, so a changed rewrite is another module). ``per_lane`` None: the module of a
    block of one params row, which is the per-lane one where no callback needs calling lane by lane (it costs
    the same: 0.111 us a run-step either way on the conical pendulum), so that one module serves both."""
    k, s = runner.tab[0].shape
    m = problem.m
    M = None if problem.M is None else np.atleast_2d(np.asarray(problem.M, dtype=float))
    has_m = M is not None if has_m is None else has_m
    diagonal = (M is None or not np.any(M - np.diag(np.diag(M)))) if diagonal is None else diagonal
    points, lanes = [], []
    for name in ("grad_U", "G") if per_lane is not False else ():
        f = _callback_of(problem.kernels, name)
        if f is not None and lane_callbacks.reads_params(f):
            (points if lane_callbacks.per_point(f) is not None else lanes).append(name)
    if per_lane is None:
        per_lane = not lanes
        points = points if per_lane else []
    return {"M_SIZE": m, "NU_SIZE": problem.nu, "HAS_M": has_m, "DIAG_M": has_m and diagonal,
            "L_SIZE": m if has_m else 0, "K_SIZE": k, "S_SIZE": s, "LANES": LANES,
            **solver_sizes(runner.solver, k, s, m, problem.nu),
            "LANE_PARAMS": per_lane, "POINT_CALLBACKS": tuple(points), "PARAM_CALLBACKS": tuple(lanes),
            "POINT_FORM": lane_callbacks.version() if points else ""}  # fmt: skip


def solver_sizes(solver: int, k: int, s: int, m: int, nu: int) -> dict:
    """SOLVER and the sizes of its lane arrays (0 for the blended solver's in a fixed-point module): FM_SIZE (m: K0,
    Hg), FD_SIZE (2 m: the central differences' points), SM_SIZE (s m: A11), SB_SIZE (s m + nu: the bordered
    system); PT_SIZE: the stage and difference points that take a params row each (PP)."""
    blended = solver != 0
    return {"SOLVER": solver, "FM_SIZE": m if blended else 0, "FD_SIZE": 2 * m if blended else 0,
            "SM_SIZE": s * m if blended else 0, "SB_SIZE": s * m + nu if blended else 0,
            "PT_SIZE": max(k, 2 * m) if blended else k}  # fmt: skip


def _callback_of(kernels, name: str):
    """The compiled callback ``name`` of ``kernels`` (a dispatcher), None where the problem has none."""
    f = getattr(kernels, name)
    return None if f is None else resolve_callback(name, f)[0]


def bind_point_callbacks(module: types.ModuleType, kernels, constants: dict) -> None:
    """``<name>_points`` in ``module``: the callbacks of POINT_CALLBACKS with a params row per point
    (``lane_callbacks.per_point``), as copies numba inlines (as ``registry.inline_copy``)."""
    from numba import njit

    for name in constants.get("POINT_CALLBACKS", ()):
        if not hasattr(module, f"{name}_points"):
            f = _callback_of(kernels, name)
            options = {key: val for key, val in f.targetoptions.items() if key not in ("cache", "inline", "nopython")}
            setattr(module, f"{name}_points", njit(inline="always", **options)(lane_callbacks.per_point(f)))


def lane_source(constants: dict, tables: tuple[np.ndarray, ...]) -> str:
    """The lockstep module's source: the template with ``run_lanes`` pasted and rewritten (module docstring);
    ``tables`` are the method's Ihat, W, X, E (``TABLES``)."""
    template = template_source("hbvm")
    template = template[: template.index("@njit(cache=CACHE)\ndef run_chunk(")]  # the helpers, not the loop
    shared = [path.read_text() for path in SHARED]
    iteration = BLENDED_ITERATION if constants["SOLVER"] else FIXED_POINT_ITERATION
    driver = block_text(LANE_DRIVER, "lam_prev").replace("        SOLVER_ITERATION\n", iteration.lstrip("\n"))
    driver = re.sub(r"\\\n\s*", "", driver)  # the driver's calls are one line each for expand_inline
    if constants["HAS_M"]:  # M^{-1} psi_j and M^{-1} rho_j are lane arrays of their own (else psi and rho)
        driver = driver.replace("psi, rho, psi, rho,", "psi, rho, Mpsi, Mrho,")
    expanded = expand_inline(template + "\n" + driver, *shared)
    tree = _LaneShapes().visit(ast.parse(expanded))
    sunk = sunk_scalars(tree)
    slots = _slots(constants, sunk)
    values = dict(constants) | {"OK": 0}
    tree = LaneRewriter(slots, values, sunk).visit(tree)
    ast.fix_missing_locations(tree)
    return module_text(tree, slots, TABLES, with_x2(tables))


def module_text(tree: ast.AST, slots: dict[str, tuple[int, int]], names: tuple[str, ...], tables) -> str:
    """A lockstep module's text from its rewritten tree: the select its masked stores call (``lane_select``),
    LANE_SLOTS (WK's slots a lane) and its tables as constants ``TABLE_<name>``."""
    total = sum(size for _, size in slots.values())
    frozen = "".join(
        f"TABLE_{name} = np.array({np.asarray(table, dtype=float).tolist()!r})\n" for name, table in zip(names, tables)
    )
    select = "from hbvm_core.kernels.lane_select import select as _select\n"
    return ast.unparse(tree) + f"\n\n{select}LANE_SLOTS = {total}\n" + frozen


def with_x2(tables: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
    """(Ihat, W, X, E) and X2 = X X, its sums in ``run_chunk``'s order (from 0, over i ascending): the same bits."""
    X = np.asarray(tables[2], dtype=float)
    s = X.shape[0]
    X2 = np.zeros((s, s))
    for j in range(s):
        for l in range(s):
            for i in range(s):
                X2[j, l] += X[j, i] * X[i, l]
    return (*tables, X2)


def _slots(constants: dict, sunk: tuple[str, ...] = (), layout: LaneLayout | None = None) -> dict[str, tuple[int, int]]:
    """name -> (first slot, number of slots) in WK: the lane arrays, then the lane scalars, then the scalars of the
    ``lane_sunk`` loops (``sunk_scalars``); of ``layout`` (HBVM's by default)."""
    layout = layout or HBVM_LAYOUT
    slots, first = {}, 0
    for name, shape in layout.arrays.items():
        size = int(np.prod([constants[dim] for dim in shape], dtype=np.int64))
        slots[name] = (first, size)
        first += size
    for name, shape in layout.batch.items():
        size = int(np.prod([constants[dim] for dim in shape], dtype=np.int64))
        slots[name] = (first, size)
        first += size
    for name in (*layout.scalars, *sunk):
        slots[name] = (first, 1)
        first += 1
    return slots


def sunk_scalars(tree: ast.AST) -> tuple[str, ...]:
    """The names that the ``for _ln in lane_sunk():`` loops of ``tree`` assign and that a loop over lanes reads from
    another (``sunk_layout``: one that reads it before it assigns it, or a statement after the sunk loop): each
    lane's own, held in WK. The others stay locals of their loop over lanes."""
    names: dict[str, None] = {}
    regions = [node for node in ast.walk(tree) if isinstance(node, ast.For) and _is_sunk(node)]
    inside = {id(n) for region in regions for n in ast.walk(region)}
    outside = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and id(n) not in inside}
    for region in regions:
        targets = {n.target.id for n in ast.walk(region) if isinstance(n, ast.For)}  # the loops' own, LANE too
        stored = {n.id for n in ast.walk(region) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        shared = set(outside)
        for group in _groups(sunk_layout(copy_module.deepcopy(region.body))):
            shared |= _live_in(group)
        for name in sorted(stored - targets):
            if name in shared:
                names[name] = None
    return tuple(names)


def sunk_layout(body: list[ast.stmt]) -> list:
    """A ``lane_sunk`` loop's body as its loops and the runs of other statements between them: a list of
    ``ast.For`` (its body laid out again, in ``body``) and lists of statements (each a loop over lanes). A branch
    that holds a loop is taken into each of its statements (``_guarded``: ``if c: for x: B`` as ``for x: if c: B``;
    c must be what the branch does not assign)."""
    out: list = []
    part: list[ast.stmt] = []
    for stmt in body:
        if isinstance(stmt, ast.For):
            if part:
                out.append(part)
                part = []
            out.append(ast.For(stmt.target, stmt.iter, sunk_layout(stmt.body), []))
        elif isinstance(stmt, ast.If) and any(isinstance(n, ast.For) for n in ast.walk(stmt)):
            assigned = {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
            if stmt.orelse or {n.id for n in ast.walk(stmt.test) if isinstance(n, ast.Name)} & assigned:
                raise ConfigError(f"lane_sunk: a branch that cannot be taken into its loops: {ast.unparse(stmt)}")
            if part:
                out.append(part)
                part = []
            out += sunk_layout(_guarded(stmt.test, stmt.body))
        else:
            part.append(stmt)
    if part:
        out.append(part)
    return out


def _groups(layout: list) -> list[list[ast.stmt]]:
    """The runs of statements of a ``sunk_layout``, depth first."""
    found = []
    for item in layout:
        if isinstance(item, ast.For):
            found += _groups(item.body)
        else:
            found.append(item)
    return found


def _live_in(stmts: list[ast.stmt]) -> set[str]:
    """The names that ``stmts`` read before they assign them (in the order they run: an assignment's value
    before its targets)."""
    stored: set[str] = set()
    live: set[str] = set()

    def reads(node: ast.AST) -> None:
        for n in ast.walk(node):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id not in stored:
                live.add(n.id)

    def run(stmt: ast.stmt) -> None:
        if isinstance(stmt, ast.Assign):
            reads(stmt.value)
            for target in stmt.targets:
                for n in ast.walk(target):
                    if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                        stored.add(n.id)
                    elif isinstance(n, ast.Name):
                        reads(n)
        elif isinstance(stmt, ast.AugAssign):
            reads(stmt.value)
            reads(ast.Name(stmt.target.id, ast.Load()) if isinstance(stmt.target, ast.Name) else stmt.target)
            if isinstance(stmt.target, ast.Name):
                stored.add(stmt.target.id)
        elif isinstance(stmt, ast.If):
            reads(stmt.test)
            for inner in (*stmt.body, *stmt.orelse):
                run(inner)
        else:
            reads(stmt)

    for stmt in stmts:
        run(stmt)
    return live


def _is_sunk(loop: ast.For) -> bool:
    call = loop.iter
    return (
        isinstance(loop.target, ast.Name) and loop.target.id == LANE and isinstance(call, ast.Call)
        and getattr(call.func, "id", None) == "lane_sunk"
    )  # fmt: skip


class LaneRewriter(ast.NodeTransformer):
    """Rewrites the expanded driver's lane loops (module docstring): lane names to their slots of WK, batch
    arrays to their lane's rows, masked stores, callbacks split out of the loop, constant branches pruned."""

    def __init__(
        self, slots: dict[str, tuple[int, int]], constants: dict, sunk: tuple[str, ...] = (),
        layout: LaneLayout | None = None,
    ):  # fmt: skip
        layout = layout or HBVM_LAYOUT
        self.slots = slots
        self.constants = constants
        self.scalars = frozenset((*layout.scalars, *sunk))  # one slot a lane each
        self.scratch = layout.scratch | frozenset(sunk)  # the sunk loops' values: written in every lane
        self.shapes = {name: [constants[d] for d in shape] for name, shape in layout.arrays.items()}
        self.batch = {name: [constants[d] for d in shape] for name, shape in layout.batch.items()}
        self.tables = layout.tables
        self.in_lane = False
        self.mask: str | None = None  # the mask of stores to what a run keeps (None: every lane)
        self.cond: str | None = None  # the mask of stores to scratch values (the enclosing branches' conditions)
        self.conditions = 0

    def visit_Expr(self, node: ast.Expr):
        """The driver's markers ``batch_views()`` and ``copy_tables()``, outside the lane loops."""
        call = node.value
        marker = getattr(getattr(call, "func", None), "id", None) if isinstance(call, ast.Call) else None
        if marker == "batch_views":
            lanes = self.constants["LANES"]
            lines = []
            for name, shape in self.batch.items():
                first, size = self.slots[name]
                rev = ", ".join(str(d) for d in shape[::-1][:-1])
                lines.append(f"{name} = WK[{first * lanes}:{(first + size) * lanes}].reshape(({rev}, "
                             f"{shape[0] * lanes})).T")  # fmt: skip
            return ast.parse("\n".join(lines)).body
        self.generic_visit(node)
        return node

    # ----------------------------------------------------------------- loops over lanes
    def visit_For(self, node: ast.For):
        lane = isinstance(node.target, ast.Name) and node.target.id == LANE
        if not lane:
            self.generic_visit(node)
            return node
        if _is_sunk(node):
            return self._sunk(sunk_layout(self._fold(node.body)))
        masked = None
        if isinstance(node.iter, ast.Call) and getattr(node.iter.func, "id", None) == "lane_loop":
            arg = node.iter.args[0]
            masked = None if isinstance(arg, ast.Constant) else arg.id
        return self._lane_loops(self._unroll(self._fold(node.body)), masked)

    def _sunk(self, layout: list) -> list[ast.stmt]:
        """A ``lane_sunk`` loop's body (``sunk_layout``) with the loop over lanes sunk into it: its loops (of ranges
        the same for every lane) stay loops, and each run of the other statements becomes a loop over lanes,
        unmasked (what it computes is scratch: a masked lane's result is not kept). Nothing is unrolled."""
        out: list[ast.stmt] = []
        for item in layout:
            if isinstance(item, ast.For):
                if not self._uniform(item.iter, set()):
                    raise ConfigError(f"lane_sunk: a loop over a range per lane: {ast.unparse(item.iter)}")
                out.append(ast.For(item.target, item.iter, self._sunk(item.body) or [ast.Pass()], []))
            else:
                out.append(self._loop(item, None))
        return out

    def _unroll(self, body: list[ast.stmt]) -> list[ast.stmt]:
        """Loops over a constant range whose body holds a loop with a range that depends on them (the triangular
        loops of the elimination) unrolled here: LLVM unrolls the inner loops first, and could not count these.
        Where an array of ``DIAGONAL`` is diagonal, the loops that read it at their variable are unrolled too, and
        the products with its entries off the diagonal dropped (``_off_diagonal``)."""
        out: list[ast.stmt] = []
        for stmt in body:
            if isinstance(stmt, (ast.For, ast.If, ast.While)):
                stmt.body = self._unroll(stmt.body)
                stmt.orelse = self._unroll(stmt.orelse)
            if self._off_diagonal(stmt):
                continue
            bounds = self._range(stmt) if isinstance(stmt, ast.For) else None
            if bounds is None or not (self._dependent(stmt) or self._reads_diagonal(stmt)):
                out.append(stmt)
                continue
            for value in range(*bounds):
                for inner in stmt.body:
                    copy = _Substitute(stmt.target.id, value).visit(copy_module.deepcopy(inner))
                    out += self._unroll(self._fold([copy]))
        return out

    def _diagonal(self) -> set[str]:
        """The arrays of ``DIAGONAL`` that are diagonal in this module."""
        return {name for name, flag in DIAGONAL.items() if self.constants.get(flag)}

    def _reads_diagonal(self, loop: ast.For) -> bool:
        """Whether ``loop`` reads a diagonal array at an index that holds its variable."""
        diagonal, name = self._diagonal(), loop.target.id
        return any(
            isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Load) and getattr(n.value, "id", None) in diagonal
            and any(isinstance(i, ast.Name) and i.id == name for i in ast.walk(n.slice))
            for stmt in loop.body for n in ast.walk(stmt)
        )  # fmt: skip

    def _off_diagonal(self, stmt: ast.stmt) -> bool:
        """Whether ``stmt`` is ``acc -= D[a, c] * y`` (or ``+=``, either factor) with D diagonal and the constants
        a != c: a product with a zero, which leaves acc as it is for finite y."""
        if not (isinstance(stmt, ast.AugAssign) and isinstance(stmt.op, (ast.Add, ast.Sub))):
            return False
        product = stmt.value
        if not (isinstance(product, ast.BinOp) and isinstance(product.op, ast.Mult)):
            return False
        diagonal = self._diagonal()
        for factor in (product.left, product.right):
            if isinstance(factor, ast.Subscript) and getattr(factor.value, "id", None) in diagonal:
                index = factor.slice.elts if isinstance(factor.slice, ast.Tuple) else []
                if all(isinstance(i, ast.Constant) for i in index) and len({i.value for i in index}) > 1:
                    return True
        return False

    def _range(self, loop: ast.For) -> tuple[int, ...] | None:
        """The bounds of ``for x in range(...)`` when they are compile-time constants, else None."""
        call = loop.iter
        if not isinstance(call, ast.Call) or getattr(call.func, "id", None) != "range":
            return None
        if not isinstance(loop.target, ast.Name):
            return None
        names = {n.id for arg in call.args for n in ast.walk(arg) if isinstance(n, ast.Name)}
        if not names <= set(self.constants):
            return None
        return tuple(int(_evaluate(a, self.constants)) for a in call.args)

    @staticmethod
    def _dependent(loop: ast.For) -> bool:
        """Whether a loop nested in ``loop`` has a range that reads ``loop``'s variable."""
        name = loop.target.id
        for node in ast.walk(ast.Module(loop.body, [])):
            if isinstance(node, ast.For) and any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(node.iter)):
                return True
        return False

    def _lane_loops(self, body: list[ast.stmt], masked: str | None) -> list[ast.stmt]:
        """Loops over the lanes for ``body``, split at the callbacks (called once for all lanes between two loops)
        and at branches on values the same for every lane (taken outside the loops)."""
        assigned = {n.id for stmt in body for n in ast.walk(stmt) if isinstance(n, ast.Name)
                    and isinstance(n.ctx, ast.Store)}  # fmt: skip
        out: list[ast.stmt] = []
        part: list[ast.stmt] = []

        def flush() -> None:
            if part:
                out.append(self._loop(list(part), masked))
                part.clear()

        for stmt in body:
            if _is_callback(stmt):
                flush()
                out += self._callback(stmt)
            elif isinstance(stmt, ast.If) and self._uniform(stmt.test, assigned):
                flush()
                then = self._lane_loops(stmt.body, masked) or [ast.Pass()]
                out.append(ast.If(stmt.test, then, self._lane_loops(stmt.orelse, masked)))
            else:
                part.append(stmt)
        flush()
        return out

    def _callback(self, stmt: ast.Expr) -> list[ast.stmt]:
        """A callback's call on all lanes' points: as it stands where the lanes share their params row (or the
        callback reads none); else its per-point form on the points' params rows PP (POINT_CALLBACKS:
        ``lane_callbacks.per_point``), or once per lane on that lane's points (rows l, l + LANES, ...: strided
        views) with its params row PL[l] (PARAM_CALLBACKS)."""
        call = stmt.value
        *arrays, _ = (ast.unparse(arg) for arg in call.args)
        if call.func.id in self.constants.get("POINT_CALLBACKS", ()):
            return ast.parse(f"{call.func.id}_points({', '.join(arrays)}, PP)").body
        if call.func.id not in self.constants.get("PARAM_CALLBACKS", ()):
            return [stmt]
        views = ", ".join(f"{name}[_lp::LANES]" for name in arrays)
        return ast.parse(f"for _lp in range(LANES):\n    {call.func.id}({views}, PL[_lp])").body

    def _uniform(self, test: ast.expr, assigned: set[str]) -> bool:
        """Whether a test is the same for every lane: it reads no lane value and nothing the lane loop assigns."""
        lane_names = {*self.shapes, *self.scalars, *self.batch, LANE} | assigned
        return not any(isinstance(n, ast.Name) and n.id in lane_names for n in ast.walk(test))

    def _loop(self, body: list[ast.stmt], masked: str | None) -> ast.For:
        outer = (self.in_lane, self.mask)
        self.in_lane, self.mask = True, None if masked is None else "_mask"
        stmts = []
        for stmt in body:
            done = self.visit(stmt)
            stmts += done if isinstance(done, list) else [done]
        self.in_lane, self.mask = outer
        stmts = [_Selects().visit(stmt) for stmt in stmts]
        prologue = []
        if masked is not None:
            prologue = [ast.parse(f"_mask = {ast.unparse(self._slot(masked))} != 0.0").body[0]]
        lanes = ast.parse(f"range({'n_lanes' if self._runtime_lanes() else 'LANES'})", mode="eval").body
        return ast.For(ast.Name(LANE, ast.Store()), lanes, prologue + stmts, [])

    def visit_If(self, node: ast.If):
        """Inside a lane loop, a branch that stores lane values becomes its two bodies run for every lane, each
        store masked by the branch's condition (its locals are then assigned in every lane: they must be the
        branch's own); a branch that assigns locals only is left to LLVM (it turns it into selects)."""
        node.test = self._truth(node.test)
        if not self.in_lane or not any(self._stored(t) for n in ast.walk(node) for t in _targets(n)):
            self.generic_visit(node)
            return node
        self.conditions += 1
        n = self.conditions
        test = self.visit(node.test)
        stmts: list[ast.stmt] = [ast.Assign([ast.Name(f"_c{n}", ast.Store())], test)]
        missed = ast.Compare(ast.Name(f"_c{n}", ast.Load()), [ast.Eq()], [ast.Constant(False)])
        outer = (self.mask, self.cond)
        for which, branch, taken in (("t", node.body, ast.Name(f"_c{n}", ast.Load())), ("f", node.orelse, missed)):
            if not branch:
                continue
            masks = []
            for outer_name, kind in zip(outer, ("m", "s")):
                name = f"_{kind}{which}{n}"
                value = taken
                if outer_name is not None:
                    value = ast.BinOp(ast.Name(outer_name, ast.Load()), ast.BitAnd(), taken)
                stmts.append(ast.Assign([ast.Name(name, ast.Store())], copy_module.deepcopy(value)))
                masks.append(name)
            self.mask, self.cond = masks
            for stmt in branch:
                done = self.visit(stmt)
                stmts += done if isinstance(done, list) else [done]
        self.mask, self.cond = outer
        return stmts

    def _fold(self, body: list[ast.stmt]) -> list[ast.stmt]:
        """Branches on compile-time constants replaced by the branch taken (recursively)."""
        out = []
        for stmt in body:
            if isinstance(stmt, ast.If):
                value = self._constant(stmt.test)
                if value is not None:
                    out += self._fold(stmt.body if value else stmt.orelse)
                    continue
                stmt.body, stmt.orelse = self._fold(stmt.body), self._fold(stmt.orelse)
            elif isinstance(stmt, (ast.For, ast.While)):
                stmt.body = self._fold(stmt.body)
            out.append(stmt)
        return out

    def _constant(self, test: ast.expr):
        names = {n.id for n in ast.walk(test) if isinstance(n, ast.Name)}
        if not names or not names <= set(self.constants):
            return None
        return bool(_evaluate(test, self.constants))

    # ----------------------------------------------------------------- names and subscripts inside lane loops
    def _runtime_lanes(self) -> bool:
        """Whether the loops over lanes run over ``range(n_lanes)`` (n_lanes = LANES read at run time) and index WK
        unsigned: in the blended module. Over the constant range(LANES) LLVM unrolls a loop over lanes with a short
        body (the solve's, the update's) into 16 scalar copies instead of vectorising it; and numba's wraparound of
        a negative signed index keeps it from bounding the rows of J that a loop reads and writes, so that it
        leaves the loop scalar. Measured on the conical pendulum (HBVM(2,2), one core): 1.70 -> 0.84 us a run-step.
        The fixed-point module keeps range(LANES): its loops over lanes are long, and were measured so. A module
        whose constants say RUNTIME_LANES (RATTLE's, ``rattle_lanes``) runs to n_lanes too."""
        return bool(self.constants.get("SOLVER") or self.constants.get("RUNTIME_LANES"))

    def _slot(self, name: str, index: ast.expr | None = None) -> ast.Subscript:
        first, _ = self.slots[name]
        offset = str(first) if index is None else f"{first} + {ast.unparse(index)}"
        if self._runtime_lanes():  # unsigned: no wraparound for a negative index
            return ast.parse(f"WK[np.uint64(({offset}) * LANES + {LANE})]", mode="eval").body
        return ast.parse(f"WK[({offset}) * LANES + {LANE}]", mode="eval").body

    def _flat(self, name: str, index: ast.expr) -> ast.expr:
        """The flat index of a lane array's element (row-major over its shape)."""
        parts = index.elts if isinstance(index, ast.Tuple) else [index]
        shape = self.shapes[name]
        if len(parts) != len(shape):
            raise ConfigError(f"lane array {name}: {len(parts)} indices for shape {shape}")
        terms = []
        for i, part in enumerate(parts):
            stride = int(np.prod(shape[i + 1 :], dtype=np.int64))
            text = ast.unparse(part)
            terms.append(f"({text}) * {stride}" if stride != 1 else f"({text})")
        return ast.parse(" + ".join(terms), mode="eval").body

    def visit_Name(self, node: ast.Name):
        if self.in_lane and node.id in self.scalars:
            sub = self._slot(node.id)
            sub.ctx = node.ctx
            return sub
        return node

    def visit_Subscript(self, node: ast.Subscript):
        if self.in_lane and isinstance(node.value, ast.Name):
            name = node.value.id
            if name in self.shapes:
                sub = self._slot(name, self._flat(name, self.visit(node.slice)))
                sub.ctx = node.ctx
                return sub
            if name in self.batch:  # the axes reversed: the first index varies fastest
                index = self.visit(node.slice)
                parts = index.elts if isinstance(index, ast.Tuple) else [index]
                shape, terms, stride = self.batch[name], [], 1
                for part, dim in zip(parts, shape):
                    terms.append(f"({ast.unparse(part)}) * {stride}")
                    stride *= dim
                sub = self._slot(name, ast.parse(" + ".join(terms), mode="eval").body)
                sub.ctx = node.ctx
                return sub
            if name in self.tables:
                node.value = ast.Name(f"TABLE_{name}", ast.Load())
        self.generic_visit(node)
        return node

    def _truth(self, test: ast.expr) -> ast.expr:
        """A lane scalar as a test (``if nonsingular``): ``x != 0.0`` (its slot is a float)."""
        if self.in_lane and isinstance(test, ast.Name) and test.id in self.scalars:
            return ast.Compare(test, [ast.NotEq()], [ast.Constant(0.0)])
        return test

    def visit_BoolOp(self, node: ast.BoolOp):
        """``a and b`` / ``a or b`` inside a lane loop as ``a & b`` / ``a | b`` (the operands are comparisons,
        free of effects): short-circuit branches would leave the loop over lanes unvectorised."""
        node.values = [self._truth(value) for value in node.values]
        self.generic_visit(node)
        if not self.in_lane:
            return node
        op = ast.BitAnd() if isinstance(node.op, ast.And) else ast.BitOr()
        value = node.values[0]
        for nxt in node.values[1:]:
            value = ast.BinOp(value, op, nxt)
        return value

    def visit_UnaryOp(self, node: ast.UnaryOp):
        """``not a`` inside a lane loop as ``a == False`` (no branch; the operand is a boolean)."""
        if isinstance(node.op, ast.Not):
            node.operand = self._truth(node.operand)
        self.generic_visit(node)
        if not self.in_lane or not isinstance(node.op, ast.Not):
            return node
        return ast.Compare(node.operand, [ast.Eq()], [ast.Constant(False)])

    def _stored(self, target: ast.expr) -> bool:
        if isinstance(target, ast.Name):
            return target.id in self.scalars
        return isinstance(target, ast.Subscript) and getattr(target.value, "id", None) in (*self.shapes, *self.batch)

    def visit_Assign(self, node: ast.Assign):
        if not self.in_lane:
            self.generic_visit(node)
            return node
        if len(node.targets) != 1:
            raise ConfigError("lane loops: chained assignment")
        target = node.targets[0]
        if isinstance(target, ast.Tuple):
            if not any(self._stored(t) for t in target.elts):
                node.value = self.visit(node.value)
                return node
            # a, b = x, y: both values first (into locals), then each store on its own (masked)
            temps = [f"_tup{i}" for i in range(len(target.elts))]
            unpack = ast.Assign([ast.Tuple([ast.Name(t, ast.Store()) for t in temps], ast.Store())], node.value)
            stores = [ast.Assign([elt], ast.Name(t, ast.Load())) for elt, t in zip(target.elts, temps)]
            return [self.visit_Assign(unpack), *(self.visit_Assign(store) for store in stores)]
        stored = self._stored(target)
        node.value = self.visit(node.value)
        node.targets = [self.visit(target)]
        mask = self._mask_of(target) if stored else None
        if mask is not None:
            old = _as_load(node.targets[0])
            node.value = ast.IfExp(ast.Name(mask, ast.Load()), node.value, old)
        return node

    def _mask_of(self, target: ast.expr) -> str | None:
        """The mask of a store: the branches' conditions for scratch values, the loop's and theirs otherwise."""
        name = target.id if isinstance(target, ast.Name) else target.value.id
        return self.cond if name in self.scratch else self.mask

    def visit_AugAssign(self, node: ast.AugAssign):
        if not self.in_lane or not self._stored(node.target):
            self.generic_visit(node)
            return node
        mask = self._mask_of(node.target)
        target = self.visit(node.target)
        value = ast.BinOp(_as_load(target), node.op, self.visit(node.value))
        if mask is not None:
            value = ast.IfExp(ast.Name(mask, ast.Load()), value, _as_load(target))
        return ast.Assign(targets=[target], value=value)


#: calls a conditional expression of a lane loop may hold in its two values and still be a ``select`` (both values
#: evaluated): functions without effects
PURE_CALLS = frozenset({"abs", "max", "min", "int", "float", "np.isfinite", "np.uint64", "_select"})


def _pure(expr: ast.expr) -> bool:
    """Whether evaluating ``expr`` in every lane is harmless: arithmetic, comparisons and ``PURE_CALLS`` on names,
    constants and the lane slots and tables (``WK[...]``, ``TABLE_*[...]``: in bounds in every lane)."""
    for node in ast.walk(expr):
        if isinstance(node, ast.Subscript):
            name = getattr(node.value, "id", "")
            if name != "WK" and not name.startswith("TABLE_"):
                return False
        elif isinstance(node, ast.Call):
            if ast.unparse(node.func) not in PURE_CALLS:
                return False
        elif not isinstance(
            node,
            (ast.Name, ast.Constant, ast.BinOp, ast.UnaryOp, ast.Compare, ast.BoolOp, ast.IfExp, ast.Attribute,
             ast.Tuple, ast.operator, ast.unaryop, ast.cmpop, ast.boolop, ast.expr_context),
        ):  # fmt: skip
            return False
    return True


class _Selects(ast.NodeTransformer):
    """``a if c else b`` of a lane loop as ``_select(c, a, b)`` (``lane_select.select``: one LLVM select instead of a
    branch, which costs numba's front end three blocks) where a and b are ``_pure``; the masked stores are such."""

    def visit_IfExp(self, node: ast.IfExp):
        self.generic_visit(node)
        if not (_pure(node.body) and _pure(node.orelse)):
            return node
        return ast.Call(ast.Name("_select", ast.Load()), [node.test, node.body, node.orelse], [])


def _evaluate(expr: ast.expr, constants: dict):
    """The value of an expression over the module's constants (the generator's own source, never read data)."""
    tree = ast.fix_missing_locations(ast.Expression(copy_module.deepcopy(expr)))
    return eval(compile(tree, "<lane constant>", "eval"), {"__builtins__": {}}, dict(constants))  # noqa: S307


class _LaneShapes(ast.NodeTransformer):
    """``X.shape[i]`` of a lane array X replaced by its size's constant (``LANE_ARRAYS``): the shared helpers'
    sizes (``linalg.minv``'s ``L.shape[0]``) become compile-time constants, so their loops unroll."""

    def __init__(self, arrays: dict | None = None):
        self.arrays = LANE_ARRAYS if arrays is None else arrays

    def visit_Subscript(self, node: ast.Subscript):
        self.generic_visit(node)
        shape = node.value
        if (
            isinstance(shape, ast.Attribute) and shape.attr == "shape" and isinstance(shape.value, ast.Name)
            and shape.value.id in self.arrays and isinstance(node.slice, ast.Constant)
        ):  # fmt: skip
            return ast.copy_location(ast.Name(self.arrays[shape.value.id][node.slice.value], ast.Load()), node)
        return node


class _Substitute(ast.NodeTransformer):
    """A loop variable replaced by its value (for unrolling)."""

    def __init__(self, name: str, value: int):
        self.name, self.value = name, value

    def visit_Name(self, node: ast.Name):
        if node.id == self.name and isinstance(node.ctx, ast.Load):
            return ast.Constant(self.value)
        return node


def _targets(node: ast.AST) -> list[ast.expr]:
    """What an assignment node stores to (tuple targets unpacked); [] for other nodes."""
    if isinstance(node, ast.Assign):
        found = node.targets
    elif isinstance(node, ast.AugAssign):
        found = [node.target]
    else:
        return []
    return [t for target in found for t in (target.elts if isinstance(target, ast.Tuple) else [target])]


def _guarded(test: ast.expr, body: list[ast.stmt]) -> list[ast.stmt]:
    """``if test: body`` taken into the loops of body: each loop as ``for x in r: if test: B``, each run of other
    statements as ``if test: run`` (and ``if test: if c: B`` as ``if test and c: B``)."""
    out: list[ast.stmt] = []
    for stmt in body:
        guard = copy_module.deepcopy(test)
        if isinstance(stmt, ast.For):
            out.append(ast.For(stmt.target, stmt.iter, [ast.If(guard, stmt.body, [])], []))
        elif isinstance(stmt, ast.If) and not stmt.orelse and any(isinstance(n, ast.For) for n in ast.walk(stmt)):
            out.append(ast.If(ast.BoolOp(ast.And(), [guard, stmt.test]), stmt.body, []))
        elif out and isinstance(out[-1], ast.If) and not isinstance(out[-1].test, ast.BoolOp):
            out[-1].body.append(stmt)
        else:
            out.append(ast.If(guard, [stmt], []))
    return out


def _as_load(node: ast.expr) -> ast.expr:
    copy = ast.parse(ast.unparse(node), mode="eval").body
    return copy


def _is_callback(stmt: ast.stmt) -> bool:
    return (
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Call)
        and isinstance(stmt.value.func, ast.Name)
        and stmt.value.func.id in CALLBACK_NAMES
    )


# --------------------------------------------------------------------------- the module
def lane_module(problem, runner, **options) -> types.ModuleType:
    """The lockstep module of (problem, the runner's HBVM(k, s), ``options`` of ``constants_of``): generated once,
    cached on disk like the loops (``modules.generated_module``), its per-point callbacks bound; that of the
    runner's own lockstep form where its description names one (``lane_form``)."""
    form = lane_form(runner)
    if form is not None:
        return form.lane_module(problem, runner, **options)
    constants = constants_of(runner, problem, **options)
    kernels = problem.kernels

    def build() -> types.ModuleType:
        module = _lane_module(constants, kernels, runner.tab)
        bind_point_callbacks(module, kernels, constants)
        return module

    return by_key(("lanes", tuple(sorted(constants.items())), kernels.grad_U, kernels.G), build)


def _lane_module(constants: dict, kernels, tables: tuple[np.ndarray, ...]) -> types.ModuleType:
    callbacks = bound_callbacks(("grad_U", "G"), kernels, constants["NU_SIZE"])
    import numba

    # the module is a function of what makes it (this generator, the builder of modules, registry's expansion, the
    # template, its preamble and shared helpers, the constants, the tables, the callbacks, numba): hashed without
    # writing the source, so that a process finds a module written before without generating it again (some 0.1 s)
    here = Path(__file__)
    files = (here, here.with_name("modules.py"), here.with_name("registry.py"), here.with_name("lane_select.py"))
    files += (template_path("hbvm"),)
    files += (here.with_name("description.py"), template_path("preamble"), *SHARED)
    parts = [path.read_bytes() for path in files]
    parts += [np.ascontiguousarray(table, dtype=float).tobytes() for table in tables]
    tag = module_tag("lanes", parts, numba.__version__, callbacks, constants)
    origin = "hbvm_core.kernels.lanes from hbvm.py"
    return generated_module(
        tag, lambda: lane_source(constants, tables), callbacks, constants, LOOP_BINDING, origin, finish=timed_loops
    )


def lane_rows(runs: np.ndarray) -> np.ndarray:
    """The rows argument of ``run_lanes``: the runs in blocks of LANES, the last padded with -1 (empty lanes)."""
    return np.concatenate([runs, np.full((-runs.size) % LANES, -1, dtype=np.int64)])


#: LLVM's unroll threshold while a lockstep module compiles (its default at -O3: 300): the loops over k, s, m and
#: nu inside a loop over lanes must unroll whole for that loop to be the innermost, the one LLVM vectorises
#: (the tethered satellites' HBVM(6,2) needs about 3000). Unrolling changes no arithmetic.
UNROLL_THRESHOLD = 4000
#: the fixed-point module's threshold per multiply-add of k s m (nu + 1), at least ``UNROLL_MIN``, at most
#: ``UNROLL_THRESHOLD``: past what its inner loops need, LLVM also unrolls the short loops over lanes whole (16 scalar
#: copies instead of vector instructions), a bigger and slower block. Measured (one core, CPU, load 3.5), us a
#: run-step and the optimised IR's lines: rods in space HBVM(4,2), 192 multiply-adds: 1000 3.6 (its inner loops
#: left rolled), 1500 0.93, 2000 0.78 (16.5k lines), 3000 0.90, 4000 1.04-1.10 (31k lines, 2.6 s more of LLVM);
#: conical pendulum HBVM(2,2), 24: 300 0.123, 600 0.116, 1000 0.116, 2000 0.130, 4000 0.140 (18.9k lines)
UNROLL_PER_WORK = 10
UNROLL_MIN = 600


def unroll_threshold(constants) -> int:
    """LLVM's unroll threshold for a lockstep module of ``constants`` (a dict, or the module): the fixed point's
    from its work k s m (nu + 1) (``UNROLL_PER_WORK``), the blended solver's ``UNROLL_THRESHOLD`` (its loops over
    lanes run to a run-time count, which LLVM does not unroll whole), and so a form of a loop's own (RATTLE's, the
    polynomial multiplier's: no SOLVER; measured so)."""
    get = constants.get if isinstance(constants, dict) else lambda name: getattr(constants, name, None)
    if get("SOLVER") is None or get("SOLVER"):
        return UNROLL_THRESHOLD
    work = get("K_SIZE") * get("S_SIZE") * get("M_SIZE") * (get("NU_SIZE") + 1)
    return min(UNROLL_THRESHOLD, max(UNROLL_MIN, UNROLL_PER_WORK * work))


@contextlib.contextmanager
def unrolled(threshold: int = UNROLL_THRESHOLD):
    """LLVM's unroll threshold raised (to ``threshold``: ``unroll_threshold`` of the module) for what compiles
    inside, then set back.

    llvmlite's options are the process's: a loop that another thread compiles meanwhile is unrolled further too
    (the same arithmetic, more code)."""
    import llvmlite.binding as llvm

    llvm.set_option("", f"-unroll-threshold={threshold}")
    try:
        yield
    finally:
        llvm.set_option("", "-unroll-threshold=300")


class LockstepUnavailable(Exception):
    """A lockstep module that numba cannot compile (a problem's callbacks that do not compile on the
    Fortran-ordered views of the lanes, say): the caller runs the runs one by one instead."""


def run_lanes_numba(runner, module, inputs: dict, runs: np.ndarray, out: dict) -> None:
    """The lockstep blocks of ``runs`` (each lane with its own params row and M, ``inputs`` "params" and "L"; of one
    params row unless the module's LANE_PARAMS) written into ``out`` at their rows.

    Raises LockstepUnavailable where the module does not compile, or its first call fails (the caller then
    discards ``out``, which that call may have begun to write); remembered for the module, so that it is tried
    once per process."""
    if getattr(module, "_hbvm_unavailable", None):
        raise LockstepUnavailable(module._hbvm_unavailable)
    rows = lane_rows(runs)
    if module.lane_block.signatures:
        _call(module, runner, inputs, rows, out)
        return
    try:
        with unrolled(unroll_threshold(module)):
            _call(module, runner, inputs, rows, out)
    except Exception as exc:  # noqa: BLE001 - numba's errors, and a callback's from a thread (a SystemError)
        # a callback that numba cannot compile, or that fails, on the lanes' views: where the runs fail for
        # themselves, the per-run block raises (or records) the same again
        module._hbvm_unavailable = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:200]}"
        raise LockstepUnavailable(module._hbvm_unavailable) from None


def _call(module, runner, inputs: dict, rows: np.ndarray, out: dict) -> None:
    """``lane_block`` on each block of ``rows``: the first here (it compiles, or loads, the block), the others
    handed one at a time to ``numba.get_num_threads()`` threads (the block releases the GIL). A ``prange`` over
    the blocks in a compiled wrapper would have LLVM optimise the block's code a second time inside the wrapper:
    some 40% of the module's compile time."""
    import numba

    head = (inputs["q0"], inputs["p0"], inputs["h"], inputs["N"], inputs["sample_every"])
    warm = getattr(runner, "warm", 0)  # RATTLE's lockstep block takes none (kernels/rattle_lanes.py)
    tail = (
        warm, runner.rule, np.ascontiguousarray(inputs["L"]), np.ascontiguousarray(inputs["params"]),
        np.ascontiguousarray(inputs["lam0"]), bool(inputs["compensated"]),
        out["status"], out["fail_step"], out["steps"], out["iterations"], out["max_iterations"], out["n_saved"],
        out["t"], out["q"], out["p"], out["lam"],
    )  # fmt: skip

    def block(b: int) -> None:
        module.lane_block(*head, rows[b * LANES : (b + 1) * LANES], *tail)

    blocks = rows.size // LANES
    block(0)
    threads = min(numba.get_num_threads(), blocks - 1)
    if threads > 1:
        with ThreadPoolExecutor(max_workers=threads) as pool:
            list(pool.map(block, range(1, blocks)))  # raises the first block's error, if any
    else:
        for b in range(1, blocks):
            block(b)
