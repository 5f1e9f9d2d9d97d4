"""The compiled (numba) path against the numpy path: same trajectories to round-off, same iterations,
the same chunks and errors, the disk cache, and user problems with and without compiled callbacks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from numba import njit
from user_problems import double_pendulum

import hbvm_core as hc
from hbvm_core.errors import ConfigError, ConvergenceError, NonFiniteError, ProblemError
from hbvm_core.fixed_point import StoppingRule
from hbvm_core.integrate import MemorySink
from hbvm_core.kernels import Kernels

#: (problem, k, s, h, steps) -- short runs, one compiled module per problem
CASES = [
    ("planar_pendulum", 2, 2, 0.05, 200),
    ("conical_pendulum", 2, 2, None, 300),
    ("modified_pendulum", 6, 2, 0.05, 200),
    ("tethered_satellites", 6, 2, 0.1, 200),
    ("theta_pendulum", 3, 2, 0.1, 100),
]

#: the unit round-off of float64
EPS = np.finfo(float).eps


def run_both(pb, method, h, steps, **kw):
    t_end = h * steps
    a = hc.integrate(pb, method, h, t_end, backend="numpy", **kw)
    b = hc.integrate(pb, method, h, t_end, backend="numba", **kw)
    return a, b


def assert_same(a, b, tol=1e-12):
    """q, p, lam agree to tol relative to their size; the same saved grid to round-off."""
    for x, y in ((a.t, b.t), (a.tstep, b.tstep)):
        assert x.shape == y.shape
        # both paths compute t_n = n h (compensated): a few roundings of t_end apart at most
        assert np.max(np.abs(x - y), initial=0.0) <= 4 * EPS * max(1.0, np.max(np.abs(x), initial=0.0))
    for x, y in ((a.q, b.q), (a.p, b.p), (a.lam, b.lam)):
        assert x.shape == y.shape
        if x.size:
            assert np.max(np.abs(x - y)) <= tol * max(1.0, np.max(np.abs(x)))


def assert_iterations_match(a, b):
    """The same iteration on every step: per-step counts one sweep apart at most, and the same mean.

    The stall test compares two round-off-level increments, so which steps it flips by one sweep depends on the
    host and is not bounded by anything; the count of flips is not compared, their effect on the mean is."""
    diff = np.abs(a.iterations.astype(int) - b.iterations.astype(int))
    assert diff.shape == a.iterations.shape and diff.size and diff.max() <= 1
    # a tenth of a sweep per step on average: another iteration (or stopping rule) moves the mean by a sweep or more
    assert abs(a.iterations.mean() - b.iterations.mean()) <= 0.1
    assert abs(a.attrs["mean_iterations"] - b.attrs["mean_iterations"]) <= 0.1


@pytest.mark.slow  # compiles the loops
@pytest.mark.parametrize("name,k,s,h,steps", CASES, ids=[c[0] for c in CASES])
def test_compiled_matches_numpy(name, k, s, h, steps):
    pb = hc.get_problem(name)
    h = pb.period / 100 if h is None else h
    a, b = run_both(pb, hc.HBVM(k, s), h, steps)
    assert a.attrs["backend"] == "numpy" and b.attrs["backend"] == "numba"
    assert_same(a, b)
    assert_iterations_match(a, b)


@pytest.mark.slow  # compiles loops of its own (tens of seconds on 2 cores)
def test_loop_specialised_on_k_and_s_matches(conical, monkeypatch):
    """HBVM_SPECIALISE_KS=1: a loop compiled for HBVM(2,2) only (its own module), same trajectory."""
    from hbvm_core.kernels.driver import CompiledRunner

    monkeypatch.setenv("HBVM_SPECIALISE_KS", "1")
    runner = CompiledRunner(hc.HBVM(2, 2), conical)
    assert (runner.module.K_SIZE, runner.module.S_SIZE) == (2, 2)
    a, b = run_both(conical, hc.HBVM(2, 2), conical.period / 100, 200)
    assert_same(a, b)
    assert_iterations_match(a, b)


@pytest.mark.slow  # compiles the loop
def test_auto_backend_takes_the_compiled_path_for_builtins(conical):
    traj = hc.integrate(conical, hc.HBVM(2, 2), conical.period / 100, conical.period / 10)
    assert traj.attrs["backend"] == "numba"


@pytest.mark.slow  # compiles the loop (the numba path against the numpy one)
@pytest.mark.parametrize("warm_start", ["previous", "p0"])
def test_warm_starts_match(warm_start, planar):
    a, b = run_both(planar, hc.HBVM(2, 2, warm_start=warm_start), 0.05, 60)
    assert_same(a, b)
    assert_iterations_match(a, b)
    assert a.attrs["mean_iterations"] > 5.3  # extrapolation needs 5.08 here: really a different path


@pytest.mark.slow  # compiles the loop (the numba path against the numpy one)
def test_uncompensated_and_saved_every_nth_step_match(planar):
    a, b = run_both(planar, hc.HBVM(2, 2), 0.05, 203, compensated=False, save_every=10)
    assert len(b.t) == 22 and b.t[-1] == pytest.approx(203 * 0.05)  # every 10th point and the last
    assert len(b.tstep) == 21
    assert_same(a, b)
    assert_iterations_match(a, b)


class RecordingSink(MemorySink):
    """The in-memory sink, recording the (array group, start, rows) of every chunk it receives."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def points(self, start, t, q, p):
        self.calls.append(("points", start, len(t)))
        super().points(start, t, q, p)

    def steps(self, start, t, lam, iterations):
        self.calls.append(("steps", start, len(t)))
        super().steps(start, t, lam, iterations)


@pytest.mark.slow  # compiles the loop (the numba path against the numpy one)
def test_chunked_emission_is_the_same_as_numpy(conical):
    h = conical.period / 100
    sinks = {}
    for backend in ("numpy", "numba"):
        sinks[backend] = RecordingSink()
        hc.integrate(conical, hc.HBVM(2, 2), h, 50 * h, chunk=7, save_every=3, sink=sinks[backend], backend=backend)
    a, b = sinks["numpy"], sinks["numba"]
    assert sorted(a.calls) == sorted(b.calls)
    assert max(rows for _, _, rows in b.calls) == 7
    for group in ("points", "steps"):  # contiguous chunks
        starts = [(s0, r) for g, s0, r in b.calls if g == group]
        assert all(s1 == s0 + r for (s0, r), (s1, _) in zip(starts, starts[1:]))
    xa, xb = a.arrays(3, 1), b.arrays(3, 1)
    for key in xa:
        assert np.max(np.abs(xa[key] - xb[key]), initial=0.0) <= 1e-12


@pytest.mark.slow  # compiles the loop (the numba path against the numpy one)
def test_convergence_error_is_the_same(planar):
    method = hc.HBVM(2, 2, rule=StoppingRule(max_iter=4))
    errs = []
    for backend in ("numpy", "numba"):
        with pytest.raises(ConvergenceError) as info:
            hc.integrate(planar, method, 0.05, 5.0, backend=backend)
        errs.append(info.value)
    assert errs[0].step == errs[1].step and errs[0].t == errs[1].t
    assert errs[0].reason == errs[1].reason == "no convergence"
    assert errs[1].iterations == 4 and np.isfinite(errs[1].increment)


@pytest.mark.slow  # compiles the loop (the numba path against the numpy one)
def test_divergence_is_reported_not_hidden(planar):
    """Far too large a step: the fixed point fails at the same step, for the same reason, on both paths."""
    errs = []
    for backend in ("numpy", "numba"):
        with pytest.raises(ConvergenceError) as info:
            hc.integrate(planar, hc.HBVM(2, 2), 2.5, 25.0, backend=backend)
        errs.append(info.value)
    assert (errs[0].step, errs[0].reason) == (errs[1].step, errs[1].reason)
    assert errs[1].t == pytest.approx(2.5 * errs[1].step)


# --- user problems -------------------------------------------------------------------------------------------


@njit(cache=True)
def dp_grad_U(Q, out, params):
    for i in range(Q.shape[0]):
        out[i, 0] = 0.0
        out[i, 1] = params[0]
        out[i, 2] = 0.0
        out[i, 3] = params[1]


@njit(cache=True)
def dp_G(Q, out, params):
    for i in range(Q.shape[0]):
        for a in range(2):
            d = Q[i, 2 + a] - Q[i, a]
            out[i, a, 0] = 2.0 * Q[i, a]
            out[i, 2 + a, 0] = 0.0
            out[i, a, 1] = -2.0 * d
            out[i, 2 + a, 1] = 2.0 * d


def compiled_double_pendulum(m1=1.0, m2=2.0):
    pb = double_pendulum(m1=m1, m2=m2)
    pb.kernels = Kernels(grad_U=dp_grad_U, G=dp_G, params=(m1, m2))
    return pb


@pytest.mark.slow  # compiles loops of its own (tens of seconds on 2 cores)
def test_user_problem_with_mass_matrix_and_params_takes_the_compiled_path():
    """M = diag(m1, m1, m2, m2) != I (Cholesky in the kernel) and the masses passed as params."""
    for m1, m2 in ((1.0, 2.0), (3.0, 0.5)):  # one compiled loop for both parameter sets
        pb = compiled_double_pendulum(m1, m2)
        a, b = run_both(pb, hc.HBVM(3, 2), 0.05, 100)
        assert b.attrs["backend"] == "numba"
        assert_same(a, b)
        assert_iterations_match(a, b)


def test_plain_numpy_user_problem_takes_the_numpy_path():
    pb = double_pendulum()
    traj = hc.integrate(pb, hc.HBVM(2, 2), 0.05, 1.0)
    assert traj.attrs["backend"] == "numpy"
    with pytest.raises(ConfigError, match="no compiled kernel"):
        hc.integrate(pb, hc.HBVM(2, 2), 0.05, 1.0, backend="numba")


def nan_beyond(limit: float):
    """A gradient of U = -cos(theta) that is NaN for |theta| > limit, defined in a closure (not importable)."""

    @njit
    def grad(Q, out, params):
        for i in range(Q.shape[0]):
            out[i, 0] = np.nan if abs(Q[i, 0]) > limit else np.sin(Q[i, 0])

    return grad


NAN_GRAD = nan_beyond(0.5)  # one closure for both tests below: one in-memory compile


def nan_theta_pendulum():
    pb = hc.get_problem("theta_pendulum")
    grad = pb.grad_U
    pb.grad_U = lambda Q: np.where(np.abs(Q) > 0.5, np.nan, grad(Q))
    pb.kernels = Kernels(grad_U=NAN_GRAD)
    return pb


@pytest.mark.slow  # compiles loops of its own (tens of seconds on 2 cores)
def test_callbacks_in_a_closure_fall_back_to_an_uncached_module():
    """Callbacks that cannot be imported by name still run compiled (in-memory module, compiled per process)."""
    from hbvm_core.kernels.driver import CompiledRunner

    pb = nan_theta_pendulum()
    assert not hasattr(CompiledRunner(hc.HBVM(2, 2), pb).module, "__file__")
    a, b = run_both(pb, hc.HBVM(2, 2), 0.1, 4)  # theta stays below 0.5
    assert b.attrs["backend"] == "numba"
    assert_same(a, b)


@pytest.mark.slow  # compiles a loop of its own
def test_non_finite_callback_is_named():
    """A gradient that is NaN away from q0: both paths raise NonFiniteError naming the numpy callback."""
    pb = nan_theta_pendulum()
    messages = []
    for backend in ("numpy", "numba"):
        with pytest.raises(NonFiniteError, match="callback grad_U") as info:
            hc.integrate(pb, hc.HBVM(2, 2), 0.1, 10.0, backend=backend)
        messages.append(str(info.value))
    assert messages[0] == messages[1]


PENDULUM = "hbvm_core.problems.pendulum"
SPHERE_G = "hbvm_core.problems.spherical:sphere_G_kernel"


def test_wrong_compiled_callbacks_are_refused():
    pb = hc.get_problem("planar_pendulum")
    pb.kernels = Kernels(grad_U=f"{PENDULUM}:theta_grad_U_kernel", G=SPHERE_G)
    with pytest.raises(ProblemError, match="kernels.grad_U disagrees"):
        hc.integrate(pb, hc.HBVM(1, 1), 0.1, 1.0, backend="numba")
    pb.kernels = Kernels(grad_U=f"{PENDULUM}:planar_grad_U_kernel")
    with pytest.raises(ProblemError, match="kernels.G is missing"):
        hc.integrate(pb, hc.HBVM(1, 1), 0.1, 1.0, backend="numba")
    pb.kernels = Kernels(grad_U=f"{PENDULUM}:no_such_function", G=SPHERE_G)
    with pytest.raises(ConfigError, match="kernels.grad_U"):
        hc.integrate(pb, hc.HBVM(1, 1), 0.1, 1.0, backend="numba")
    pb.kernels = Kernels(grad_U=np.sin, G=SPHERE_G)
    with pytest.raises(ConfigError, match="expected a numba @njit function"):
        hc.integrate(pb, hc.HBVM(1, 1), 0.1, 1.0, backend="numba")


CACHE_SCRIPT = textwrap.dedent(
    """
    import json, time
    import hbvm_core as hc
    from hbvm_core.kernels.driver import CompiledRunner
    pb = hc.get_problem("conical_pendulum")
    method = hc.HBVM(2, 2)
    runner = CompiledRunner(method, pb)
    t0 = time.perf_counter()
    traj = hc.integrate(pb, method, pb.period / 100, pb.period, backend="numba")
    stats = runner.module.run_chunk.stats
    print(json.dumps({"hits": sum(stats.cache_hits.values()), "misses": sum(stats.cache_misses.values()),
                      "seconds": time.perf_counter() - t0, "file": runner.module.__file__}))
    """
)


@pytest.mark.slow  # compiles loops of its own (tens of seconds on 2 cores)
def test_second_process_loads_the_compiled_loop_from_the_disk_cache():
    """A fresh process finds the generated module's compiled loop in numba's cache: no compilation."""
    runs = []
    for _ in range(2):
        out = subprocess.run(
            [sys.executable, "-c", CACHE_SCRIPT], capture_output=True, text=True, check=True, env=dict(os.environ)
        )
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    assert runs[0]["file"] == runs[1]["file"]
    assert runs[1]["misses"] == 0 and runs[1]["hits"] >= 1
    assert runs[1]["seconds"] < 5.0  # loading, not compiling (a compile takes ~10 s here)


@pytest.mark.slow  # compiles the loop
def test_is_cached_reads_the_marker_written_after_the_first_compile(conical):
    """uncached_loop / is_cached: our marker next to the generated module, no numba internals."""
    from hbvm_core.kernels import is_cached, uncached_loop
    from hbvm_core.kernels.registry import _marker
    from hbvm_core.methods import DOP853

    method = hc.HBVM(2, 2)
    hc.integrate(conical, method, conical.period / 100, conical.period / 100, backend="numba")
    assert is_cached(method, conical) and uncached_loop(method, conical) is None
    module = method.compiled_runner(conical).module
    marker = _marker(module)
    moved = marker.with_name(marker.name + ".away")
    marker.rename(moved)
    try:
        assert uncached_loop(method, conical) == module.__name__ and not is_cached(method, conical)
    finally:
        moved.rename(marker)
    assert is_cached(DOP853(1e-8), conical)  # no compiled loop: nothing to cache
    assert is_cached(hc.HBVM(2, 2), nan_theta_pendulum())  # an in-memory module: nothing to cache on disk


def test_kernel_templates_expand_to_one_loop_with_short_functions():
    """The kernels package's functions stay under 200 lines; each template's generated run_chunk is its one
    compiled function and calls none of the pasted helpers (its own, the rules', the small linear algebra's)."""
    import ast
    import re
    from pathlib import Path

    from hbvm_core.kernels.registry import SHARED, expand_inline
    from hbvm_core.methods import HBVM, RATTLE, PolynomialHBVM

    for path in Path(hc.__file__).with_name("kernels").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef):
                assert node.end_lineno - node.lineno < 200, f"{path.name}:{node.name}"
    shared = [path.read_text() for path in SHARED]
    pasted = [line[4:].split("(")[0] for text in shared for line in text.splitlines() if line.startswith("def ")]
    assert {"converged", "compensated_add", "save_rows", "minv", "solve_small"} <= set(pasted)
    for loop in (HBVM.LOOP, PolynomialHBVM.LOOP, RATTLE.LOOP):  # the time loops (the reference's has none)
        name, source = loop.template, loop.source()
        helpers = [line[4:].split("(")[0] for line in source.splitlines() if line.startswith("def _")]
        expanded = expand_inline(source, *shared)
        code = "\n".join(line for line in expanded.splitlines() if not line.strip().startswith("#"))
        assert "@inline_source" not in code.splitlines() and code.count("@njit") == 1, name
        assert "def run_chunk(" in code and len(helpers) >= 2, name
        assert [f for f in helpers + pasted if f != "inline_source" and re.search(rf"\b{f}\(", code)] == [], name


def test_compiled_runner_is_built_once_per_problem_and_method_and_rebuilt_when_the_problem_changes():
    """integrate reuses the runner of a (problem object, method) -- its tables, loop module and checked
    callbacks -- and builds (and checks) a new one when the problem's callbacks are replaced."""
    from hbvm_core.integrate import compiled_runner

    problem = hc.get_problem("planar_pendulum")
    method = hc.HBVM(4, 2)
    first = compiled_runner(problem, method)
    assert compiled_runner(problem, hc.HBVM(4, 2)) is first  # an equal method object: the same runner
    assert compiled_runner(problem, hc.HBVM(4, 3)) is not first
    assert compiled_runner(hc.get_problem("planar_pendulum"), method) is not first  # another problem object
    problem.grad_U = lambda Q: np.broadcast_to([0.0, 2.0], Q.shape).copy()  # now disagrees with kernels.grad_U
    with pytest.raises(hc.ProblemError, match="kernels.grad_U disagrees"):
        hc.integrate(problem, method, 0.1, 1.0)


@pytest.mark.slow  # compiles the loop (the numba path against the numpy one)
def test_a_short_run_allocates_only_the_rows_it_saves():
    """The save buffers of a short run hold its points, not a whole chunk; chunked emission is unchanged."""
    from hbvm_core.integrate import MemorySink, buffer_rows

    assert buffer_rows(65536, 80, 1) == 82 and buffer_rows(65536, 10**6, 1) == 65536 and buffer_rows(5, 80, 1) == 5

    class Blocks(MemorySink):
        def __init__(self):
            super().__init__()
            self.sizes = []

        def points(self, start, t, q, p):
            self.sizes.append(len(t))
            super().points(start, t, q, p)

    problem = hc.get_problem("planar_pendulum")
    for backend in ("numpy", "numba"):
        sink = Blocks()
        hc.integrate(problem, hc.HBVM(4, 2), 0.1, 2.0, sink=sink, chunk=8, backend=backend)
        assert sink.sizes == [8, 8, 5]  # 21 points in blocks of chunk = 8
        sink = Blocks()
        hc.integrate(problem, hc.HBVM(4, 2), 0.1, 2.0, sink=sink, save_every=3, backend=backend)
        assert sink.sizes == [8]  # t = 0, 0.3, ..., 1.8 and t = 2: one block


@pytest.mark.slow  # compiles the RATTLE and polynomial loops of a closure's callbacks (tens of seconds)
@pytest.mark.parametrize(
    "entry", [{"k": 2, "s": 2}, {"method": "rattle"}, {"k": 3, "s": 2, "multiplier": "polynomial"}]
)
def test_a_non_finite_callback_names_the_same_step_on_both_paths(entry):
    """Every loop names the step that took the trajectory where grad_U is NaN as its numpy path does
    (docs/method.md, "Solving the step"), and that step's start is past the last point where grad_U is finite."""
    from hbvm_core.methods import method_from_entry

    pb = nan_theta_pendulum()
    method = method_from_entry({"method": "hbvm", **entry} if "k" in entry else entry)
    if method.compiled_runner(pb) is None:
        pytest.skip(f"{method.name}: no compiled loop for this problem")
    messages = []
    for backend in ("numpy", "numba"):
        with pytest.raises(NonFiniteError, match=r"callback grad_U returned non-finite values at step \d+ ") as info:
            hc.integrate(pb, method, 0.1, 10.0, backend=backend)
        messages.append(str(info.value))
    assert messages[0] == messages[1]
