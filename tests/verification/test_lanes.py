"""The lockstep ensemble (``hbvm_core.kernels.lanes``: runs of one structure stepped together, one per lane)
against its oracles: the per-run compiled loop (``hbvm_core.integrate``) and the per-run block (HBVM_LANES=0):
the same saved points, multipliers and iteration counts to round-off, the same statuses and failed steps;
failures, runs of other lengths and empty lanes stay in their own lane."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import hbvm_core as hc
from hbvm_core.ensemble import lane_blocks, lane_groups
from hbvm_core.kernels import kernel, lanes
from hbvm_core.kernels.rules import OK
from hbvm_core.problems.parametric import conical_pendulum

#: the unit round-off of float64
EPS = np.finfo(float).eps
METHOD = hc.HBVM(2, 2)


def assert_close(x, y, steps, what):
    """x equals y to eps times their scale times the steps: the same operations of the template's step, whose
    rounding may differ only through the compiled code (never asserted bit for bit)."""
    assert x.shape == y.shape, what
    scale = max(1.0, float(np.max(np.abs(np.nan_to_num(y)), initial=0.0)))
    assert np.array_equal(np.isnan(x), np.isnan(y)), what
    assert np.max(np.abs(np.nan_to_num(x) - np.nan_to_num(y)), initial=0.0) <= 8 * EPS * scale * max(steps, 1), what


def block(R: int, seed: int):
    """R runs of two params (parametric conical pendula) and two lone ones; h, N and sample_every per run."""
    rng = np.random.default_rng(seed)
    problems = [conical_pendulum(length=1.5), conical_pendulum(length=2.0, gravity=1.3)]
    lone = [conical_pendulum(length=1.7), conical_pendulum(length=1.9)]
    runs = [problems[i % 2] for i in range(R)] + lone
    h = rng.uniform(0.02, 0.08, R + 2)
    N = rng.integers(0, 60, R + 2)
    every = rng.integers(1, 8, R + 2)
    return runs, h, N, every


@pytest.mark.slow
def test_lockstep_against_per_run_loop(monkeypatch):
    """Two params rows of 2 MIN_GROUP + 5 runs each and two lone rows, all in lockstep (blocks of one params row,
    and a block whose lanes differ, with empty lanes): every run is its per-run compiled loop, run by run (its
    iteration counts: the per-run block's)."""
    R = 2 * (2 * lanes.MIN_GROUP + 5)
    runs, h, N, every = block(R, 1)
    result = hc.integrate_ensemble(runs, METHOD, h, N, sample_every=every)
    assert np.all(result.status == OK)
    assert result.backend_note == (  # rows of 21 runs: a block of one row each, then the 5 + 5 + 1 + 1 left
        f"lockstep: {R + 2} of {R + 2} runs, blocks of {lanes.LANES} lanes (2 of one params row; 1 of a params row "
        "per lane)"
    )
    monkeypatch.setenv("HBVM_LANES", "0")
    ref = hc.integrate_ensemble(runs, METHOD, h, N, sample_every=every)
    for key in ("steps", "iterations", "max_iterations", "n_saved"):
        np.testing.assert_array_equal(getattr(result, key), getattr(ref, key), err_msg=key)
    for r, pb in enumerate(runs):
        if N[r] == 0:  # no step: the initial point alone (hbvm_core.integrate takes no empty interval)
            assert result.n_saved[r] == 1 and np.array_equal(result.q[r, 0], pb.q0) and np.isnan(result.lam[r]).all()
            continue
        one = hc.integrate(pb, METHOD, float(h[r]), float(h[r]) * int(N[r]), save_every=int(every[r]), backend="numba")
        n = int(result.n_saved[r])
        assert n == one.t.size and result.steps[r] == N[r]
        assert_close(result.t[r, :n], one.t, 1, f"t of run {r}")
        assert_close(result.q[r, :n], one.q, int(N[r]), f"q of run {r}")
        assert_close(result.p[r, :n], one.p, int(N[r]), f"p of run {r}")
        if N[r] > 0:
            assert_close(result.lam[r], one.lam[-1], int(N[r]), f"lam of run {r}")


@pytest.mark.slow
def test_lockstep_failures_stay_in_their_lane(monkeypatch):
    """In one lockstep group: a diverging run (a step far too large), a non-finite one (NaN q0), runs of other
    lengths; statuses, failed steps and counts equal the per-run block's, the values to round-off."""
    R = 2 * lanes.MIN_GROUP + 3
    pb = conical_pendulum(length=1.5)
    rng = np.random.default_rng(2)
    h, N = rng.uniform(0.02, 0.08, R), rng.integers(10, 50, R)
    h[3] = 40.0
    q0 = np.tile(pb.q0, (R, 1))
    q0[7] = np.nan
    inputs = {"params": np.zeros((R, 1)), "h": h, "N": N, "q0": q0, "lam0": np.zeros((R, 1))}
    assert [g.size for g in lane_groups(METHOD.compiled_runner(pb), inputs)] == [R]
    lock = hc.integrate_ensemble(pb, METHOD, h, N, q0=q0, sample_every=3)
    assert lock.backend_note == f"lockstep: {R} of {R} runs, blocks of {lanes.LANES} lanes (2 of one params row)"
    monkeypatch.setenv("HBVM_LANES", "0")
    ref = hc.integrate_ensemble(pb, METHOD, h, N, q0=q0, sample_every=3)
    assert lock.status[3] != OK and lock.status[7] != OK and np.sum(lock.status != OK) == 2
    for key in ("status", "fail_step", "steps", "iterations", "max_iterations", "n_saved"):
        np.testing.assert_array_equal(getattr(lock, key), getattr(ref, key), err_msg=key)
    for key in ("t", "q", "p", "lam"):
        assert_close(getattr(lock, key), getattr(ref, key), int(N.max()), key)


def test_lane_groups_by_structure():
    """All runs of one structure go in lockstep: whole blocks of one params row first (each row's runs by steps),
    then the rest by steps; blocks whose runs share a row and the others are told apart, for either solver; fewer
    than MIN_GROUP runs, or a blended solver's bordered system above LANE_SYSTEM_MAX unknowns, get none."""
    pb = conical_pendulum(length=1.5)
    runner = METHOD.compiled_runner(pb)
    big, small = lanes.LANES + 1, 3
    params = np.array([[1.0, 2.0]] * big + [[3.0, 4.0]] * small + [[1.0, 2.0]] * 2)
    R = params.shape[0]
    N = np.arange(R)[::-1].copy()  # each row's runs ordered by their steps
    inputs = {"params": params, "h": np.ones(R), "N": N, "q0": np.zeros((R, 3)), "lam0": np.zeros((R, 1))}
    (runs,) = lane_groups(runner, inputs)
    first = np.r_[R - 1, R - 2, np.arange(big)[::-1]]  # the row [1, 2]: 19 runs, the last two first (fewest steps)
    rest = np.r_[np.arange(big, big + small)[::-1], first[lanes.LANES :]]  # 3 + 3 runs of two rows, by steps
    np.testing.assert_array_equal(runs, np.r_[first[: lanes.LANES], rest])
    shared, mixed = lane_blocks(runs, params)
    np.testing.assert_array_equal(shared, first[: lanes.LANES])  # one whole block of the row [1, 2]
    np.testing.assert_array_equal(mixed, np.r_[rest, np.full(lanes.LANES - rest.size, -1)])
    blended = hc.HBVM(2, 2, solver="blended").compiled_runner(pb)
    np.testing.assert_array_equal(lane_groups(blended, inputs)[0], runs)  # its own lockstep form
    assert lane_groups(hc.HBVM(6, 6, solver="blended").compiled_runner(pb), inputs) == []  # s m + nu = 19
    few = {key: value[: lanes.MIN_GROUP - 1] for key, value in inputs.items()}
    assert lane_groups(runner, few) == []


@pytest.mark.parametrize("solver", [0, 1])
def test_lane_source_rewrites_every_lane_value(solver):
    """In the generated block (fixed point, blended) no per-run array of the template is indexed as itself any
    more: each lives in WK at its lane, and the callbacks are called outside the loops over lanes, once per sweep
    (and, blended, once per step at the central differences' points)."""
    import ast

    constants = {"M_SIZE": 3, "NU_SIZE": 1, "HAS_M": True, "DIAG_M": False, "L_SIZE": 3, "K_SIZE": 2,
                 "S_SIZE": 2, "LANES": lanes.LANES, "LANE_PARAMS": True, "POINT_CALLBACKS": ("grad_U",),
                 "PARAM_CALLBACKS": ("G",), **lanes.solver_sizes(solver, 2, 2, 3, 1)}  # fmt: skip
    from hbvm_core.kernels.driver import constant_tables

    source = lanes.lane_source(constants, constant_tables(2, 2))
    tree = ast.parse(source)
    block_fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "lane_block")
    names = {n.value.id for n in ast.walk(block_fn) if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name)}
    batch = set(lanes.BATCH_ARRAYS)  # indexed as themselves only in the per-lane calls' views, Q[_lp::LANES]
    assert not names & (set(lanes.LANE_ARRAYS) | set(lanes.TABLES))
    for loop in (n for n in ast.walk(block_fn) if isinstance(n, ast.For) and getattr(n.target, "id", "") == lanes.LANE):
        calls = {c.func.id for c in ast.walk(loop) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)}
        assert not calls & {"grad_U", "G", "grad_U_points"}
        assert not {getattr(n.value, "id", None) for n in ast.walk(loop) if isinstance(n, ast.Subscript)} & batch
    calls = [ast.unparse(c) for c in ast.walk(block_fn) if isinstance(c, ast.Call)]
    assert "grad_U_points(Q, gU, PP)" in calls and "G(Q[_lp::LANES], GQ[_lp::LANES], PL[_lp])" in calls
    assert "grad_U(Q, gU, P)" not in calls and "G(Q, GQ, P)" not in calls
    if solver:
        assert "grad_U_points(Qfd, gfd, PP)" in calls and "G(Qfd[_lp::LANES], Gfd[_lp::LANES], PL[_lp])" in calls
        # the bordered solve is solve_small's own loops, not unrolled, each with its loops over the lanes inside
        solve = next(n for n in ast.walk(block_fn) if isinstance(n, ast.For) and ast.unparse(n.iter) == "range(n_sys)")
        assert ast.unparse(solve.body[0].iter) == "range(n_lanes)" and solve.body[0].target.id == lanes.LANE


def lane_slots_read(source: str, name: str, constants: dict) -> set[int]:
    """The slots of the lane array ``name`` (offsets within it) that the lockstep block reads from WK, the loops
    over constant ranges (those that are left, the inner ones of a substitution) run through by hand."""
    import ast

    first, size = lanes._slots(constants)[name]
    read: set[int] = set()

    def walk(node: ast.AST, env: dict) -> None:
        if isinstance(node, ast.For) and isinstance(node.target, ast.Name) and node.target.id != lanes.LANE:
            try:
                values = list(eval(ast.unparse(node.iter), {"range": range}, env))  # noqa: S307 - generated text
            except NameError:  # a range of run-time values (the steps, the sweeps): binds nothing read here
                values = None
            if values is not None:
                for value in values:
                    for stmt in node.body:
                        walk(stmt, env | {node.target.id: value})
                return
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and getattr(node.value, "id", "") == "WK":
            flat = node.slice  # WK[(slot) * LANES + _ln], or WK[np.uint64((slot) * LANES + _ln)] (blended)
            if isinstance(flat, ast.Call) and getattr(flat.func, "attr", "") == "uint64":
                flat = flat.args[0]
            if isinstance(flat, ast.BinOp) and isinstance(flat.left, ast.BinOp):
                try:
                    slot = eval(ast.unparse(flat.left.left), {}, env)  # noqa: S307 - the generator's offsets
                except NameError:
                    slot = None
                if isinstance(slot, int) and first <= slot < first + size:
                    read.add(slot - first)
        for child in ast.iter_child_nodes(node):
            walk(child, env)

    walk(ast.parse(source), dict(constants))
    return read


@pytest.mark.parametrize("solver", [0, 1])
@pytest.mark.parametrize("diagonal", [False, True])
def test_lane_inverse_is_linalg_minv_rewritten(diagonal, solver):
    """M^-1 in the lanes is ``linalg.minv`` rewritten (its sizes L.shape[0] the constant L_SIZE): for a full M the
    block reads the m (m + 1) / 2 entries of the lower factor L (forward with L, back with L^T), for a diagonal M
    only the m on its diagonal (the products with its zeros dropped); no shape of a lane array is left. The same
    in the blended block (M^-1 K0, M^-1 rho_l and the residual's M^-1 too)."""
    from hbvm_core.kernels.driver import constant_tables

    m = 3
    constants = {"M_SIZE": m, "NU_SIZE": 1, "HAS_M": True, "DIAG_M": diagonal, "L_SIZE": m,
                 "K_SIZE": 2, "S_SIZE": 2, "LANES": lanes.LANES, "LANE_PARAMS": False, "POINT_CALLBACKS": (),
                 "PARAM_CALLBACKS": (), **lanes.solver_sizes(solver, 2, 2, m, 1)}  # fmt: skip
    source = lanes.lane_source(constants, constant_tables(2, 2))
    assert ".shape" not in source.split("def lane_block", 1)[1].split("for n in range(nmax)", 1)[1]
    lower, on_diagonal = {a * m + c for a in range(m) for c in range(a + 1)}, {a * m + a for a in range(m)}
    assert lane_slots_read(source, "L", constants) == (on_diagonal if diagonal else lower)


@pytest.mark.slow
def test_lockstep_three_constraints(monkeypatch):
    """The tethered satellites (m = 9, nu = 3: the multiplier system solved with its row swaps as selects) in
    lockstep against the per-run block: the same statuses and counts, the values to round-off."""
    pb = hc.get_problem("tethered_satellites")
    method = hc.HBVM(3, 2)
    R = 2 * lanes.MIN_GROUP + 1
    h = 0.1 * (1.0 + 0.3 * np.arange(R) / R)
    N = 20 + np.arange(R) % 5
    lock = hc.integrate_ensemble(pb, method, h, N, sample_every=4)
    monkeypatch.setenv("HBVM_LANES", "0")
    ref = hc.integrate_ensemble(pb, method, h, N, sample_every=4)
    assert np.all(lock.status == OK) and lock.backend_note.startswith("lockstep: ")  # no fallback said
    for key in ("status", "fail_step", "steps", "iterations", "max_iterations", "n_saved"):
        np.testing.assert_array_equal(getattr(lock, key), getattr(ref, key), err_msg=key)
    for key in ("t", "q", "p", "lam"):
        assert_close(getattr(lock, key), getattr(ref, key), int(N.max()), key)


@kernel
def reshaping_grad_U(Q, out, params):
    """U = z, through a reshape that needs a C-ordered Q: the lockstep block hands Fortran-ordered views."""
    flat = Q.reshape(Q.size)
    for i in range(Q.shape[0]):
        out[i, 0] = 0.0 * flat[3 * i]
        out[i, 1] = 0.0
        out[i, 2] = 1.0


@pytest.mark.slow
def test_callbacks_that_fail_on_the_lanes_run_run_by_run(monkeypatch):
    """A problem whose callback works on the per-run loop's arrays but not on the lanes' views: the ensemble
    runs every run by the per-run block, says so in backend_note, and gives its results."""
    published = hc.get_problem("conical_pendulum")
    kernels = dataclasses.replace(published.kernels, grad_U=reshaping_grad_U)
    pb = dataclasses.replace(published, name="reshaping_conical", kernels=kernels)
    R = 2 * lanes.MIN_GROUP
    h = published.period / 100 * (1.0 + 0.01 * np.arange(R) / R)
    result = hc.integrate_ensemble(pb, METHOD, h, 30)
    assert "no lockstep block" in result.backend_note and np.all(result.status == OK)
    monkeypatch.setenv("HBVM_LANES", "0")
    ref = hc.integrate_ensemble(pb, METHOD, h, 30)
    assert "HBVM_LANES=0" in ref.backend_note
    np.testing.assert_array_equal(result.iterations, ref.iterations)
    assert_close(result.q, ref.q, 30, "q")


@pytest.mark.slow
def test_lockstep_with_callbacks_that_cannot_be_imported(monkeypatch):
    """Callbacks defined inside a function (no importable name: the lockstep module is bound in memory, not
    written to the kernel cache) run in lockstep too, and give the per-run block's results to round-off."""

    @kernel
    def local_grad_U(Q, out, params):
        """U = z, as the published conical pendulum."""
        for i in range(Q.shape[0]):
            out[i, 0] = 0.0
            out[i, 1] = 0.0
            out[i, 2] = 1.0

    published = hc.get_problem("conical_pendulum")
    kernels = dataclasses.replace(published.kernels, grad_U=local_grad_U)
    pb = dataclasses.replace(published, name="local_conical", kernels=kernels)
    method = hc.HBVM(1, 1)  # the smallest module: the path, not the method, is under test
    R = lanes.MIN_GROUP + 3
    h = published.period / 50 * (1.0 + 0.01 * np.arange(R) / R)
    lock = hc.integrate_ensemble(pb, method, h, 25, sample_every=5)
    assert np.all(lock.status == OK) and lock.backend_note.startswith("lockstep: ")  # no fallback said
    module = lanes.lane_module(pb, method.compiled_runner(pb))  # the one the call used (looked up, not made)
    assert getattr(module, "__file__", None) is None  # bound in memory: no file in the kernel cache
    monkeypatch.setenv("HBVM_LANES", "0")
    ref = hc.integrate_ensemble(pb, method, h, 25, sample_every=5)
    np.testing.assert_array_equal(lock.iterations, ref.iterations)
    for key in ("q", "p", "lam"):
        assert_close(getattr(lock, key), getattr(ref, key), 25, key)


@pytest.mark.parametrize("solver", [0, 1])
def test_masked_stores_are_selects(solver):
    """Inside the loops over lanes every conditional expression whose two values are loads and arithmetic (each
    masked store's) is a ``_select`` call (``lane_select``: no branch for numba's front end); one that reads
    another array (the loads' ``run[_ln] if ... else run[0]``, outside the masked loops) stays a branch."""
    import ast

    from hbvm_core.kernels.driver import constant_tables

    constants = {"M_SIZE": 3, "NU_SIZE": 1, "HAS_M": True, "DIAG_M": False, "L_SIZE": 3, "K_SIZE": 2,
                 "S_SIZE": 2, "LANES": lanes.LANES, "LANE_PARAMS": False, "POINT_CALLBACKS": (),
                 "PARAM_CALLBACKS": (), **lanes.solver_sizes(solver, 2, 2, 3, 1)}  # fmt: skip
    tree = ast.parse(lanes.lane_source(constants, constant_tables(2, 2)))
    block_fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "lane_block")
    loops = [n for n in ast.walk(block_fn) if isinstance(n, ast.For) and getattr(n.target, "id", "") == lanes.LANE]
    left = {ast.unparse(e) for loop in loops for e in ast.walk(loop) if isinstance(e, ast.IfExp)}
    selects = [
        c for loop in loops for c in ast.walk(loop) if isinstance(c, ast.Call) and ast.unparse(c.func) == "_select"
    ]
    assert len(selects) > 20  # the masked stores of the state, the counts, the iterates
    assert left and all("run[" in e or "Nl[" in e for e in left), left


def test_select_is_the_conditional_expression():
    """``lane_select.select(c, a, b)`` is ``a if c else b`` (hand cases), of the type numba gives the expression:
    an int and a float give a float, two ints an int, two booleans a boolean; a number as the condition is its
    truth."""
    from numba import njit

    from hbvm_core.kernels.lane_select import select

    @njit
    def picks(c, x):
        return select(c, 1, 0), select(c, 2.5, x), select(c, True, x > 3.0), select(x, 7, 8)

    assert picks(True, 4.0) == (1, 2.5, True, 7)
    assert picks(False, 4.0) == (0, 4.0, True, 7)
    assert picks(False, 0.0) == (0, 0.0, False, 8)
    kinds = [type(v) for v in picks(True, 1.0)]
    assert kinds == [int, float, bool, int]


def test_unroll_threshold_follows_the_fixed_point_modules_work():
    """LLVM's threshold while a lockstep module compiles: 10 per multiply-add of k s m (nu + 1) for the fixed point
    (rods in space HBVM(4,2), m = 6, nu = 3: 4 2 6 4 = 192 -> 1920), at least 600 (conical HBVM(2,2): 24 -> 600), at
    most 4000 (tethered satellites HBVM(6,2), m = 9, nu = 3: 432 -> 4000); 4000 for every blended module and every
    module of a loop's own lockstep form (RATTLE's, the polynomial multiplier's)."""
    sizes = lambda k, s, m, nu, solver=0: {"K_SIZE": k, "S_SIZE": s, "M_SIZE": m, "NU_SIZE": nu, "SOLVER": solver}  # noqa: E731
    assert lanes.unroll_threshold(sizes(4, 2, 6, 3)) == 1920
    assert lanes.unroll_threshold(sizes(2, 2, 3, 1)) == 600
    assert lanes.unroll_threshold(sizes(6, 2, 9, 3)) == 4000
    assert lanes.unroll_threshold(sizes(2, 2, 3, 1, solver=1)) == 4000
    # a form of a loop's own has no SOLVER (RATTLE's: m, nu, one point per lane): 4000, as its figures were measured
    assert lanes.unroll_threshold({"K_SIZE": 1, "M_SIZE": 6, "NU_SIZE": 3}) == 4000
