"""Ensembles: a block of runs of one problem structure and one method integrated by one compiled call.

``integrate_ensemble`` groups R runs that share a compiled loop (the same compiled callbacks, m, nu, the
same method and solver) and differ in their params (``Kernels.params``), M, initial data, h and number of
steps N. The runs are a list of problem instances, or one parametric problem with its keywords as arrays
over the runs (``ensemble_runs.py``: the per-run rows and numpy callbacks of both). The block call is
``kernels/ensemble.py``'s ``run_block`` on the CPU (backend "numba": numba's ``prange`` over the runs,
each run by the template's own ``run_chunk``; a structure's runs in lockstep blocks, ``kernels/lanes.py``)
or ``hbvm_core.kernels.cuda.run_block_cuda`` on a GPU (backend "cuda"); both take and give the dicts named by
``ensemble.BLOCK_INPUTS`` / ``BLOCK_OUTPUTS``. ``backend_note`` says which road the runs took and why (``road``).
H_error and g_error are computed here, on the host, from the saved points with the numpy callbacks at each
run's params (docs/method.md 1: H, g), so they do not depend on the backend.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .ensemble_runs import Instances as _Instances
from .ensemble_runs import Rows as _Rows
from .ensemble_runs import check_start
from .ensemble_runs import errors as _errors
from .ensemble_runs import start_multipliers as _start_multipliers
from .ensemble_runs import structure_key as structure_key  # re-exported: the workflow groups runs by it
from .errors import BackendError, ConfigError, ProblemError
from .kernels.rules import DIVERGED, NO_CONVERGENCE, NON_FINITE_STATE, OK, SINGULAR
from .problem import Problem

BACKENDS = ("numba", "cuda", "auto")
#: the fewest runs of a block that backend "auto" sends to the GPU: a kernel's first compile costs 10-40 s,
#: which a smaller block does not win back
GPU_MIN_RUNS = 4096
#: the status codes (kernels/rules.py) by name, for messages
STATUS_NAMES = {OK: "ok", NO_CONVERGENCE: "no convergence", DIVERGED: "diverged", SINGULAR: "singular",
                NON_FINITE_STATE: "non-finite state"}  # fmt: skip


@dataclass(frozen=True)
class EnsembleResult:
    """The runs of an ensemble, run axis first (S: the most saved points of a run; rows beyond n_saved are NaN).

    status: ``kernels/rules.py``'s codes (OK = 0); fail_step: the failed step as the per-run loop counts
    it (-1 if OK); lam: the multiplier of each run's last step (NaN for a failed run); H_error: max over the
    saved points of |H(q, p) - H(q0, p0)|; g_error: max over the saved points of |g_i(q)| per constraint.
    """

    status: np.ndarray
    fail_step: np.ndarray
    steps: np.ndarray
    iterations: np.ndarray
    max_iterations: np.ndarray
    n_saved: np.ndarray
    t: np.ndarray
    q: np.ndarray
    p: np.ndarray
    lam: np.ndarray
    H_error: np.ndarray
    g_error: np.ndarray
    backend: str
    backend_note: str = ""

    @property
    def runs(self) -> int:
        """R, the number of runs."""
        return int(self.status.shape[0])

    def last_points(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(t [R], q [R, m], p [R, m]) at each run's last saved point (the final state of a run that finished)."""
        rows = np.arange(self.runs)
        last = np.maximum(self.n_saved - 1, 0)
        return self.t[rows, last], self.q[rows, last], self.p[rows, last]

    def __repr__(self) -> str:
        """A few lines, no arrays: runs, saved points, status counts, the largest summary errors, the backend."""
        codes, counts = np.unique(self.status, return_counts=True)
        status = ", ".join(f"{int(n)} x {STATUS_NAMES.get(int(c), c)}" for c, n in zip(codes, counts))
        with np.errstate(all="ignore"):
            H = float(np.nanmax(self.H_error)) if np.any(np.isfinite(self.H_error)) else float("nan")
            g = float(np.nanmax(self.g_error)) if np.any(np.isfinite(self.g_error)) else float("nan")
        note = f" ({self.backend_note})" if self.backend_note else ""
        return (
            f"EnsembleResult: {self.runs} runs, up to {self.t.shape[1]} saved points of m = {self.q.shape[2]}\n"
            f"  status: {status}\n  steps: {int(self.steps.sum())}, iterations: {int(self.iterations.sum())}\n"
            f"  max |H - H0| = {H:.3e}, "
            + (f"max |g| = {g:.3e}" if self.g_error.size else "no constraints")
            + f"\n  backend: {self.backend}{note}"
        )


def integrate_ensemble(
    problems: Problem | Sequence[Problem],
    method,
    h,
    N,
    *,
    params: dict | None = None,
    q0=None,
    p0=None,
    sample_every=None,
    compensated: bool = True,
    backend: str = "numba",
    threads: int | None = None,
) -> EnsembleResult:
    """Integrate R runs by one compiled call; R is the broadcast length of the per-run arguments.

    Parameters
    ----------
    problems : Problem or sequence of R Problems
        All of one structure (same compiled callbacks, m, nu, mass-matrix form); each run takes the
        params (``Kernels.params``) and mass matrix of its own. Instances of one parametric factory
        (``hbvm_core.problems.parametric``) are one structure, the published problem at its defaults included.
    method : Method
        One with a compiled loop: HBVM (constant multiplier, fixed point or blended), PolynomialHBVM, RATTLE.
    h : float or array [R]
    N : int or int array [R]
        Steps of each run.
    params : dict, optional
        With one problem of a parametric factory: the factory's keywords per run, each a number or an array [R]
        (tethered_satellites' masses: [R, 3]); the others keep the problem's values. Nothing is built per run:
        the params rows, q0, p0 and M come from the factory's ``Family`` as arrays.
    q0, p0 : array [R, m] (or [m]), optional
        Initial data; default each run's own. Checked against the constraints (|g(q0)| and the hidden
        constraint, ``problem.CONSISTENCY_TOL``), naming the first run that fails.
    sample_every : int or int array [R], optional
        Points kept at steps n with n % sample_every == 0, and the last (n = N); default N.
    compensated : bool
        Kahan summation of the q, p increments (docs/method.md 3).
    backend : {"numba", "cuda", "auto"}
        "auto": the GPU where one is usable and the block has at least ``GPU_MIN_RUNS`` runs, else numba (the
        reason in ``backend_note``).
    threads : int, optional
        numba threads for the call (default: numba's).

    Raises
    ------
    ConfigError
        For a method without a compiled loop, a bad backend, h, N, sample_every or params, or per-run
        arguments of different lengths.
    ProblemError
        For problems of different structure (names the first run that differs), without compiled callbacks,
        or initial data off the constraints (names the first such run).
    BackendError
        backend="cuda" where no GPU (or no numba-cuda) is usable.
    """
    if backend not in BACKENDS:
        raise ConfigError(f"backend = {backend!r}: expected one of {', '.join(BACKENDS)}")
    if backend == "cuda":
        require_gpu()  # before any CPU loop is built: a demanded GPU that is missing fails at once
    sizes: dict[str, int] = {}
    if params is None:
        problem_list = _problems(problems)
        sizes["problems"] = len(problem_list)
    else:
        family = _family(problems, params)
        values = family.arrays(params, sizes)
    h_arr = _per_run("h", h, float, sizes)
    n_arr = _per_run("N", N, np.int64, sizes)
    q_arr = _per_run_rows("q0", q0, sizes)
    p_arr = _per_run_rows("p0", p0, sizes)
    every = None if sample_every is None else _per_run("sample_every", sample_every, np.int64, sizes)
    R = _broadcast_length(sizes)
    runs = _Instances(problem_list, R) if params is None else _Rows(family, family.broadcast(values, R))
    first = runs.first
    runner = _runner(method, first)
    runs.check(runner)
    m, nu = first.m, first.nu
    h_arr = np.broadcast_to(h_arr, (R,)).astype(float)
    n_arr = np.broadcast_to(n_arr, (R,)).astype(np.int64)
    if np.any(~np.isfinite(h_arr)) or np.any(h_arr <= 0):
        bad = int(np.flatnonzero(~(np.isfinite(h_arr) & (h_arr > 0)))[0])
        raise ConfigError(f"h = {float(h_arr[bad])!r} (run {bad}): expected a positive step size")
    if np.any(n_arr < 0):
        raise ConfigError(f"N = {int(n_arr.min())}: expected a non-negative number of steps")
    every = np.maximum(n_arr, 1) if every is None else np.broadcast_to(every, (R,)).astype(np.int64)
    if np.any(every < 1):
        raise ConfigError(f"sample_every = {int(every.min())}: expected a positive integer")
    q_start = _start(q_arr, "q0", runs.q0, R, m)
    p_start = _start(p_arr, "p0", runs.p0, R, m)
    if nu and (q_arr is not None or p_arr is not None or params is not None):
        check_start(runs, q_start, p_start)
    inputs = {
        "q0": q_start,
        "p0": p_start,
        "h": np.ascontiguousarray(h_arr),
        "N": np.ascontiguousarray(n_arr),
        "sample_every": np.ascontiguousarray(every),
        "params": runs.params,
        "lam0": _start_multipliers(runner, runs, q_start, p_start, nu),
        "L": runs.L,
        "compensated": bool(compensated),
        "gamma_rows": runner.guess_rows(method),
    }
    from .kernels.ensemble import shared_arguments

    inputs["shared"] = shared_arguments(runner, first)
    out, used, note = _run(runner, inputs, backend, threads, first, method)
    H_error, g_error = _errors(runs, out, nu)
    return EnsembleResult(
        **{key: out[key] for key in ("status", "fail_step", "steps", "iterations", "max_iterations", "n_saved")},
        t=out["t"], q=out["q"], p=out["p"], lam=out["lam"], H_error=H_error, g_error=g_error,
        backend=used, backend_note=note,
    )  # fmt: skip


# --------------------------------------------------------------------------- the inputs
def _problems(problems) -> list[Problem]:
    if isinstance(problems, Problem):
        return [problems]
    problem_list = list(problems)
    if not problem_list:
        raise ConfigError("problems: expected a Problem or a non-empty sequence of Problems")
    for i, pb in enumerate(problem_list):
        if not isinstance(pb, Problem):
            raise ConfigError(f"problems[{i}] = {pb!r}: expected a hbvm_core.Problem")
    return problem_list


def _family(problem, params):
    """The Family of the one problem that ``params`` varies (ConfigError naming what is wrong)."""
    from .problems.family import family_of

    if not isinstance(problem, Problem):
        raise ConfigError("params: give one Problem (an instance of a parametric factory), not a sequence of them")
    if not isinstance(params, dict) or not params:
        raise ConfigError(f"params = {params!r}: expected a non-empty dict of parameter name -> values per run")
    family = family_of(problem)
    if family is None:
        raise ConfigError(
            f"params: {problem.name} was not built by a parametric factory (hbvm_core.problems.parametric), "
            "so it has no params by name: give a list of problems"
        )
    return family


def _per_run(key: str, value, dtype, sizes: dict) -> np.ndarray:
    arr = np.asarray(value)
    if arr.ndim > 1:
        raise ConfigError(f"{key}: expected a number or a 1-d array over the runs, got shape {arr.shape}")
    if dtype is np.int64:
        if arr.dtype.kind not in "iu" and not (arr.dtype.kind == "f" and np.all(arr == np.round(arr))):
            raise ConfigError(f"{key} = {value!r}: expected whole numbers")
        arr = arr.astype(np.int64)
    else:
        try:
            arr = arr.astype(float)
        except (TypeError, ValueError):
            raise ConfigError(f"{key} = {value!r}: expected numbers") from None
    if arr.ndim == 1:
        sizes[key] = arr.shape[0]
    return arr


def _per_run_rows(key: str, value, sizes: dict) -> np.ndarray | None:
    if value is None:
        return None
    arr = np.asarray(value, dtype=float)
    if arr.ndim not in (1, 2):
        raise ConfigError(f"{key}: expected an array [R, m] or [m], got shape {arr.shape}")
    if arr.ndim == 2:
        sizes[key] = arr.shape[0]
    return arr


def _broadcast_length(sizes: dict) -> int:
    """R: the one length other than 1 among the per-run arguments; ConfigError naming two that differ."""
    long = [(key, n) for key, n in sizes.items() if n != 1]
    for key, n in long:
        if n == 0:
            raise ConfigError(f"{key}: no runs (an empty array)")
        if n != long[0][1]:
            first_key, first_n = long[0]
            raise ConfigError(f"per-run arguments of different lengths: {first_key} has {first_n} runs, {key} has {n}")
    return long[0][1] if long else 1


def _runner(method, problem: Problem):
    runner_of = getattr(method, "compiled_runner", None)
    runner = runner_of(problem) if runner_of is not None else None
    name = getattr(method, "name", type(method).__name__)
    if runner is None:
        if problem.kernels is None:
            raise ProblemError(f"{problem.name}: an ensemble needs compiled callbacks (Problem.kernels)")
        raise ConfigError(f"method {name}: no compiled loop for {problem.name}, so no ensemble")
    if not hasattr(runner, "module") or not hasattr(runner.module, "run_block"):
        raise ConfigError(f"method {name}: its compiled loop has no ensemble block (run_block)")
    return runner


def _start(override, key: str, default: np.ndarray, R: int, m: int) -> np.ndarray:
    if override is None:
        return default
    if override.shape[-1] != m:
        raise ConfigError(f"{key}: rows of {override.shape[-1]} entries, the problem has m = {m}")
    return np.ascontiguousarray(np.broadcast_to(override, (R, m)), dtype=float)


# --------------------------------------------------------------------------- the block call
def _run(runner, inputs: dict, backend: str, threads: int | None, problem: Problem, method) -> tuple[dict, str, str]:
    """(outputs, backend used, backend_note: why not the GPU for "auto", and the road each run took)."""
    R = inputs["h"].shape[0]
    note = ""
    if backend == "auto" and R < GPU_MIN_RUNS:
        note = f"backend auto: ran on numba; {R} runs, fewer than the GPU's least block of {GPU_MIN_RUNS}"
    elif backend in ("cuda", "auto"):
        try:
            return _run_cuda(runner, inputs), "cuda", f"per-run block on the GPU: all {R} runs (a thread each)"
        except BackendError as exc:
            if backend == "cuda":
                raise
            note = f"backend auto: ran on numba; {exc}"
    out, road = _run_numba(runner, inputs, threads, problem, method)
    return out, "numba", "; ".join(filter(None, (note, road)))


def require_gpu() -> None:
    """BackendError (one line) where numba-cuda is missing or finds no GPU."""
    try:
        from .kernels.cuda import cuda_available
    except ImportError as exc:
        raise BackendError(f"backend cuda is not available: {exc}") from None
    if not cuda_available():
        raise BackendError("backend 'cuda': no GPU found (numba-cuda is not installed or sees no CUDA device)")


def _run_cuda(runner, inputs: dict) -> dict:
    try:
        from .kernels.cuda import run_block_cuda
    except ImportError as exc:
        raise BackendError(f"backend cuda is not available: {exc}") from None
    return run_block_cuda(runner, inputs)


def _run_numba(runner, inputs: dict, threads: int | None, problem: Problem, method) -> tuple[dict, str]:
    """The block on the CPU: the runs in lockstep blocks where the loop has a lockstep form (``kernels/lanes.py``),
    else (and every run of other loops) by the per-run block. Returns the
    outputs and the road each run took, with the reason where it was not lockstep (``road``)."""
    import numba

    from .kernels.ensemble import run_block_numba

    previous = numba.get_num_threads()
    if threads is not None:
        if not isinstance(threads, int) or not 1 <= threads <= numba.config.NUMBA_NUM_THREADS:
            raise ConfigError(f"threads = {threads!r}: expected 1..{numba.config.NUMBA_NUM_THREADS}")
        numba.set_num_threads(threads)
    try:
        from .kernels.lanes import LockstepUnavailable

        lockstep = lane_groups(runner, inputs)
        refused = lockstep_refusal(runner, inputs["q0"].shape[1], inputs["lam0"].shape[1], method)
        with numba.parallel_chunksize(1):  # runs (lockstep blocks) handed out one at a time: unequal N balance
            try:
                out = _run_lockstep(runner, problem, inputs, lockstep) if lockstep else None
            except LockstepUnavailable as exc:
                out, lockstep, refused = None, [], f"no lockstep block: its module failed ({exc})"
            if out is None:
                out = run_block_numba(runner, inputs)
    finally:
        numba.set_num_threads(previous)
    # no registry.note_compiled here: its marker says that run_chunk's per-run signature is cached, which
    # compiling run_block (run_chunk on views of the block's rows) does not
    return out, road(inputs["params"], lockstep, refused, inputs["L"])


def lockstep_refusal(runner, m: int, nu: int, method=None) -> str | None:
    """Why no run of this loop goes in lockstep (the condition of ``lanes.applies`` that fails, or HBVM_LANES=0),
    as a phrase; None where the runs can."""
    import os

    from .kernels import lanes
    from .kernels.driver import CompiledRunner

    if os.environ.get("HBVM_LANES", "1") == "0":
        return "HBVM_LANES=0 turns lockstep off"
    form = lanes.lane_form(runner)
    if form is not None:  # a loop's own lockstep form (RATTLE's, the polynomial multiplier's)
        return form.refusal(runner, m, nu)
    if type(runner) is not CompiledRunner:
        name = getattr(method, "name", type(method).__name__) if method is not None else type(runner).__name__
        return f"method {name}: its compiled loop has no lockstep form"
    k, s = runner.tab[0].shape
    if k * s * m * (nu + 1) > lanes.LANE_WORK_MAX:
        return f"k s m (nu + 1) = {k * s * m * (nu + 1)}, above lockstep's {lanes.LANE_WORK_MAX}"
    size = lanes.bordered_size(runner, m, nu)
    if size > lanes.LANE_SYSTEM_MAX:
        return f"the blended solver's s m + nu = {size}, above lockstep's {lanes.LANE_SYSTEM_MAX}"
    return None if lanes.applies(runner, m, nu) else "no lockstep form for this loop"


def road(params: np.ndarray, groups: list[np.ndarray], refused: str | None, L: np.ndarray | None = None) -> str:
    """The road the runs took, for ``backend_note``: how many in lockstep blocks, how many of those blocks share
    one params row and how many take a params row per lane (``lane_blocks``), whether M != I (``L``: the runs'
    Cholesky factors); how many by the per-run block and why (``refused``, else: too few runs for a block)."""
    from .kernels.lanes import LANES, MIN_GROUP

    R = params.shape[0]
    locked = int(sum(g.size for g in groups))
    parts = []
    if locked:
        shared = mixed = 0
        for runs in groups:
            one_row, per_lane = lane_blocks(runs, params)
            shared, mixed = shared + one_row.size // LANES, mixed + per_lane.size // LANES
        kinds = [f"{n} {what}" for n, what in ((shared, "of one params row"), (mixed, "of a params row per lane")) if n]
        if L is not None and L.shape[1]:
            diagonal = not np.any(L - L * np.eye(L.shape[1]))
            kinds.append(f"M != I per lane, {'diagonal' if diagonal else 'full'}")
        parts.append(f"lockstep: {locked} of {R} runs, blocks of {LANES} lanes ({'; '.join(kinds)})")
    if locked < R:
        parts.append(f"per-run block: {R - locked} of {R} runs ({refused or f'fewer than {MIN_GROUP} runs'})")
    return "; ".join(parts)


def lane_groups(runner, inputs: dict) -> list[np.ndarray]:
    """The runs that go in lockstep: all of them (one structure: each lane takes its own params row and M) where
    there are at least ``lanes.MIN_GROUP``, the loop has a lockstep form (``lanes.applies``) and HBVM_LANES is
    not 0; [] otherwise. In the order of the blocks (``lane_blocks``): the runs of each params row by their numbers
    of steps, in as many whole blocks of LANES as the row fills; then the rest, by their numbers of steps. So a
    block's lanes share their params where they can, and finish together (a lane whose run is done idles)."""
    import os

    from .kernels import lanes

    m, nu = inputs["q0"].shape[1], inputs["lam0"].shape[1]
    R = inputs["h"].shape[0]
    if os.environ.get("HBVM_LANES", "1") == "0" or not lanes.applies(runner, m, nu) or R < lanes.MIN_GROUP:
        return []
    params = inputs["params"]
    if params.shape[1] == 0:
        inverse = np.zeros(R, dtype=np.int64)
    else:
        _, inverse = np.unique(params, axis=0, return_inverse=True)
        inverse = inverse.reshape(-1)
    N = inputs["N"]
    order = np.lexsort((N, inverse))
    rank = np.empty(R, dtype=np.int64)  # each run's place among the runs of its params row, by steps
    starts = np.r_[0, np.flatnonzero(np.diff(inverse[order])) + 1]
    sizes = np.diff(np.r_[starts, R])
    rank[order] = np.arange(R) - np.repeat(starts, sizes)
    whole = rank < np.bincount(inverse)[inverse] // lanes.LANES * lanes.LANES
    rest = np.flatnonzero(~whole)
    return [np.r_[order[whole[order]], rest[np.lexsort((inverse[rest], N[rest]))]].astype(np.int64)]


def lane_blocks(runs: np.ndarray, params: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``runs`` (ordered by ``lane_groups``) in blocks of LANES lanes, parted into the blocks whose runs share one
    params row and those whose lanes differ: (shared, per_lane), each the rows of ``lanes.run_lanes_numba`` (whole
    blocks, a block's empty lanes -1)."""
    from .kernels.lanes import LANES, lane_rows

    shared, mixed = [], []
    for start in range(0, runs.size, LANES):
        block = runs[start : start + LANES]
        same = params.shape[1] == 0 or bool(np.all(params[block] == params[block[0]]))
        (shared if same else mixed).append(lane_rows(block))
    join = lambda parts: np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)  # noqa: E731
    return join(shared), join(mixed)


def _run_lockstep(runner, problem: Problem, inputs: dict, groups: list[np.ndarray]) -> dict:
    """The lockstep groups by ``lanes.run_lanes_numba``, the other runs by the per-run block on their rows."""
    from .kernels import lanes
    from .kernels.ensemble import BLOCK_OUTPUTS, block_outputs, run_block_numba, saved_points

    R, m = inputs["q0"].shape
    nu = inputs["lam0"].shape[1]
    S = int(saved_points(inputs["N"], inputs["sample_every"]).max())
    out = block_outputs(R, S, m, nu)
    L = inputs["L"]
    has_m = L.shape[1] > 0
    diagonal = not has_m or not np.any(L - L * np.eye(L.shape[1]))
    for runs in groups:
        # the blocks of one params row take the module of such blocks (the per-lane one where it serves them too)
        for block_runs, per_lane in zip(lane_blocks(runs, inputs["params"]), (None, True)):
            if block_runs.size:
                module = lanes.lane_module(problem, runner, per_lane=per_lane, has_m=has_m, diagonal=diagonal)
                lanes.run_lanes_numba(runner, module, inputs, block_runs, out)
    rest = np.ones(R, dtype=bool)
    rest[np.concatenate(groups)] = False
    if np.any(rest):
        rows = np.flatnonzero(rest)
        per_run = {key: (val[rows] if isinstance(val, np.ndarray) else val) for key, val in inputs.items()}
        sub = run_block_numba(runner, per_run)
        for key in BLOCK_OUTPUTS:
            value = sub[key]
            if key in ("t", "q", "p"):  # the block's saved points: as many as these runs keep
                out[key][rows, : value.shape[1]] = value
            else:
                out[key][rows] = value
    return out
