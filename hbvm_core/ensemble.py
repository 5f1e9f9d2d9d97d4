"""Ensembles: a block of runs of one problem structure and one method integrated by one compiled call.

``integrate_ensemble`` groups R runs that share a compiled loop (the same compiled callbacks, m, nu and
mass-matrix form, the same method and solver) and differ in their params (``Kernels.params`` of each
run's problem instance), initial data, h and number of steps N. The block call is
``kernels/ensemble.py``'s ``run_block`` on the CPU (backend "numba": numba's ``prange`` over the runs,
each run by the template's own ``run_chunk``) or ``hbvm_core.kernels.cuda.run_block_cuda`` on a GPU
(backend "cuda"); both take and give the dicts named by ``ensemble.BLOCK_INPUTS`` / ``BLOCK_OUTPUTS``.
H_error and g_error are computed here, on the host, from the saved points with the problems' numpy
callbacks (docs/method.md 1: H, g), grouped by problem instance, so they do not depend on the backend.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

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
        params (``Kernels.params``) and mass matrix of its own.
    method : Method
        One with a compiled loop: HBVM (constant multiplier, fixed point or blended), PolynomialHBVM, RATTLE.
    h : float or array [R]
    N : int or int array [R]
        Steps of each run.
    q0, p0 : array [R, m] (or [m]), optional
        Initial data; default each problem's own.
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
        For a method without a compiled loop, a bad backend, h, N or sample_every, or per-run arguments
        of different lengths.
    ProblemError
        For problems of different structure (names the first run that differs) or without compiled callbacks.
    BackendError
        backend="cuda" where no GPU (or no numba-cuda) is usable.
    """
    if backend not in BACKENDS:
        raise ConfigError(f"backend = {backend!r}: expected one of {', '.join(BACKENDS)}")
    if backend == "cuda":
        require_gpu()  # before any CPU loop is built: a demanded GPU that is missing fails at once
    runs, problem_list = _problems(problems)
    sizes = {"problems": runs}
    h_arr = _per_run("h", h, float, sizes)
    n_arr = _per_run("N", N, np.int64, sizes)
    q_arr = _per_run_rows("q0", q0, sizes)
    p_arr = _per_run_rows("p0", p0, sizes)
    every = None if sample_every is None else _per_run("sample_every", sample_every, np.int64, sizes)
    R = _broadcast_length(sizes)
    first = problem_list[0]
    index = np.zeros(R, dtype=np.int64) if len(problem_list) == 1 else np.arange(R)
    instances, inverse, first_run = _instances(problem_list, index)
    runner = _runner(method, first)
    _check_structure(instances, first_run, runner)
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
    q_start = _start(q_arr, "q0", instances, inverse, R, m)
    p_start = _start(p_arr, "p0", instances, inverse, R, m)
    inputs = {
        "q0": q_start,
        "p0": p_start,
        "h": np.ascontiguousarray(h_arr),
        "N": np.ascontiguousarray(n_arr),
        "sample_every": np.ascontiguousarray(every),
        "params": _rows([np.array(pb.kernels.params, dtype=float).reshape(-1) for pb in instances], inverse),
        "lam0": _start_multipliers(runner, instances, inverse, q_start, p_start, nu),
        "L": _rows([_cholesky(pb) for pb in instances], inverse),
        "compensated": bool(compensated),
        "gamma_rows": runner.guess_rows(method),
    }
    from .kernels.ensemble import shared_arguments

    inputs["shared"] = shared_arguments(runner, first)
    out, used, note = _run(runner, inputs, backend, threads, first)
    H_error, g_error = _errors(instances, inverse, out, nu)
    return EnsembleResult(
        **{key: out[key] for key in ("status", "fail_step", "steps", "iterations", "max_iterations", "n_saved")},
        t=out["t"], q=out["q"], p=out["p"], lam=out["lam"], H_error=H_error, g_error=g_error,
        backend=used, backend_note=note,
    )  # fmt: skip


# --------------------------------------------------------------------------- the inputs
def _problems(problems) -> tuple[int, list[Problem]]:
    if isinstance(problems, Problem):
        return 1, [problems]
    problem_list = list(problems)
    if not problem_list:
        raise ConfigError("problems: expected a Problem or a non-empty sequence of Problems")
    for i, pb in enumerate(problem_list):
        if not isinstance(pb, Problem):
            raise ConfigError(f"problems[{i}] = {pb!r}: expected a hbvm_core.Problem")
    return len(problem_list), problem_list


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


def _instances(problem_list: list[Problem], index: np.ndarray) -> tuple[list[Problem], np.ndarray, list[int]]:
    """The distinct problem objects, per run which of them it is (grouped by identity), and each one's first run."""
    seen: dict[int, int] = {}
    instances: list[Problem] = []
    first_run: list[int] = []
    slot = np.empty(len(problem_list), dtype=np.int64)
    for i, pb in enumerate(problem_list):
        if id(pb) not in seen:
            seen[id(pb)] = len(instances)
            instances.append(pb)
            first_run.append(i)
        slot[i] = seen[id(pb)]
    if len(problem_list) == 1:
        return instances, np.zeros(index.shape[0], dtype=np.int64), first_run
    return instances, slot[index], first_run


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


def structure_key(problem: Problem) -> tuple:
    """What runs of one ensemble block must share (hashable): the compiled callbacks, m, nu, whether M = I and
    the number of params; ``(None,)`` for a problem without compiled callbacks. Group runs by it before calling
    ``integrate_ensemble`` (a parametric factory at its defaults returns the published problem, whose
    callbacks differ: ``hbvm_core.problems.parametric``)."""
    k = problem.kernels
    if k is None:
        return (None,)
    callbacks = tuple(getattr(k, name) for name in ("grad_U", "G", "g", "d2g"))
    return (callbacks, problem.m, problem.nu, problem.M is None, len(tuple(k.params)))


def _check_structure(instances: list[Problem], first_run: list[int], runner) -> None:
    """Every instance must share the first's compiled loop (ProblemError naming the first that differs), and its
    compiled callbacks must agree with its numpy ones at its own params (``runner.check_callbacks``)."""
    from .kernels.runner import check_callbacks

    first = instances[0]
    ref = structure_key(first)
    what = ("compiled callbacks", "m", "nu", "mass-matrix form (M = I or not)", "number of params")
    for i, pb in zip(first_run, instances):
        mine = structure_key(pb)
        if mine != ref:
            diff = "compiled callbacks" if len(mine) == 1 else next(w for w, a, b in zip(what, mine, ref) if a != b)
            raise ProblemError(
                f"problems[{i}] ({pb.name}) differs from problems[0] ({first.name}) in its {diff}: "
                "an ensemble runs one problem structure"
            )
        if pb is not first:
            check_callbacks(pb, runner.module, np.array(pb.kernels.params, dtype=float).reshape(-1))


def _start(override, key: str, instances: list[Problem], inverse: np.ndarray, R: int, m: int) -> np.ndarray:
    if override is None:
        return _rows([getattr(pb, key) for pb in instances], inverse)
    if override.shape[-1] != m:
        raise ConfigError(f"{key}: rows of {override.shape[-1]} entries, the problem has m = {m}")
    return np.ascontiguousarray(np.broadcast_to(override, (R, m)), dtype=float)


def _rows(values: list[np.ndarray], inverse: np.ndarray) -> np.ndarray:
    """Per-run rows from per-instance values."""
    return np.ascontiguousarray(np.stack(values)[inverse])


def _cholesky(pb: Problem) -> np.ndarray:
    from .kernels.runner import cholesky_factor

    return cholesky_factor(pb)


def _start_multipliers(runner, instances, inverse, q0, p0, nu: int) -> np.ndarray:
    """lam0 of each run: lambda(q0, p0) for the blended solver with d2g (as ``blended.initial_multiplier``), else 0."""
    from .kernels.runner import SOLVER_CODES

    lam0 = np.zeros((q0.shape[0], nu))
    if nu == 0 or getattr(runner, "solver", None) != SOLVER_CODES["blended"]:
        return lam0
    for slot, pb in enumerate(instances):
        rows = np.flatnonzero(inverse == slot)
        if pb.d2g is not None and rows.size:
            lam0[rows] = pb.multiplier(q0[rows], p0[rows])
    return lam0


# --------------------------------------------------------------------------- the block call
def _run(runner, inputs: dict, backend: str, threads: int | None, problem: Problem) -> tuple[dict, str, str]:
    R = inputs["h"].shape[0]
    note = ""
    if backend == "auto" and R < GPU_MIN_RUNS:
        note = f"backend auto: ran on numba; {R} runs, fewer than the GPU's least block of {GPU_MIN_RUNS}"
    elif backend in ("cuda", "auto"):
        try:
            return _run_cuda(runner, inputs), "cuda", ""
        except BackendError as exc:
            if backend == "cuda":
                raise
            note = f"backend auto: ran on numba; {exc}"
    out, lanes_note = _run_numba(runner, inputs, threads, problem)
    return out, "numba", "; ".join(filter(None, (note, lanes_note)))


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


def _run_numba(runner, inputs: dict, threads: int | None, problem: Problem) -> tuple[dict, str]:
    """The block on the CPU: runs that share params in lockstep blocks where the loop has a lockstep form
    (``kernels/lanes.py``), the others (and every run of other loops) by the per-run block. Returns the
    outputs and a note ('' unless a lockstep block could not be compiled: then every run went run by run)."""
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
        note = ""
        with numba.parallel_chunksize(1):  # runs (lockstep blocks) handed out one at a time: unequal N balance
            try:
                out = _run_lockstep(runner, problem, inputs, lockstep) if lockstep else None
            except LockstepUnavailable as exc:
                out, note = None, f"no lockstep block ({exc}): ran run by run"
            if out is None:
                out = run_block_numba(runner, inputs)
    finally:
        numba.set_num_threads(previous)
    # no registry.note_compiled here: its marker says that run_chunk's per-run signature is cached, which
    # compiling run_block (run_chunk on views of the block's rows) does not
    return out, note


def lane_groups(runner, inputs: dict) -> list[np.ndarray]:
    """The runs that go in lockstep, grouped by params row: groups of at least ``lanes.MIN_GROUP`` runs, where the
    loop has a lockstep form (``lanes.applies``) and HBVM_LANES is not 0; [] otherwise. Each group is ordered by
    the runs' numbers of steps, so that a block's lanes finish together (a lane whose run is done idles)."""
    return [g[np.argsort(inputs["N"][g], kind="stable")] for g in _param_groups(runner, inputs)]


def _param_groups(runner, inputs: dict) -> list[np.ndarray]:
    """The groups of ``lane_groups`` in run order."""
    import os

    from .kernels import lanes

    m, nu = inputs["q0"].shape[1], inputs["lam0"].shape[1]
    if os.environ.get("HBVM_LANES", "1") == "0" or not lanes.applies(runner, m, nu):
        return []
    params = inputs["params"]
    if params.shape[1] == 0:  # no params: one group
        runs = np.arange(inputs["h"].shape[0], dtype=np.int64)
        return [runs] if runs.size >= lanes.MIN_GROUP else []
    _, inverse = np.unique(params, axis=0, return_inverse=True)
    order = np.argsort(inverse.reshape(-1), kind="stable")
    groups = np.split(order, np.flatnonzero(np.diff(inverse.reshape(-1)[order])) + 1)
    return [g.astype(np.int64) for g in groups if g.size >= lanes.MIN_GROUP]


def _run_lockstep(runner, problem: Problem, inputs: dict, groups: list[np.ndarray]) -> dict:
    """The lockstep groups by ``lanes.run_lanes_numba``, the other runs by the per-run block on their rows."""
    from .kernels import lanes
    from .kernels.ensemble import BLOCK_OUTPUTS, block_outputs, run_block_numba, saved_points

    R, m = inputs["q0"].shape
    nu = inputs["lam0"].shape[1]
    S = int(saved_points(inputs["N"], inputs["sample_every"]).max())
    out = block_outputs(R, S, m, nu)
    module = lanes.lane_module(problem, runner)
    for runs in groups:
        lanes.run_lanes_numba(runner, module, inputs, runs, out)
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


# --------------------------------------------------------------------------- what the summary holds
def _errors(instances, inverse, out: dict, nu: int) -> tuple[np.ndarray, np.ndarray]:
    """max over the saved points of |H - H(q0, p0)| and of |g_i(q)|, by the numpy callbacks per instance."""
    q, p, n_saved = out["q"], out["p"], out["n_saved"]
    R, S = q.shape[0], q.shape[1]
    H_error = np.full(R, np.nan)
    g_error = np.full((R, nu), np.nan)
    valid = np.arange(S)[None, :] < n_saved[:, None]
    for slot, pb in enumerate(instances):
        rows = np.flatnonzero(inverse == slot)
        if not rows.size:
            continue
        mask = valid[rows]
        qs, ps = q[rows][mask], p[rows][mask]
        with np.errstate(all="ignore"):
            H = np.full(mask.shape, np.nan)
            H[mask] = _finite_rows(pb.hamiltonian, qs, ps)
            dH = np.where(mask, np.abs(H - H[:, :1]), -np.inf)
            H_error[rows] = np.max(dH, axis=1)
            if nu:
                g = np.full(mask.shape + (nu,), np.nan)
                g[mask] = _finite_rows(lambda a, b, pb=pb: pb.constraint(a), qs, ps, nu)
                g_error[rows] = np.max(np.where(mask[:, :, None], np.abs(g), -np.inf), axis=1)
    return H_error, g_error


def _finite_rows(f, q: np.ndarray, p: np.ndarray, width: int | None = None) -> np.ndarray:
    """f at the rows of (q, p) that are finite; NaN at the others (a NaN initial state stays NaN)."""
    shape = (q.shape[0],) if width is None else (q.shape[0], width)
    result = np.full(shape, np.nan)
    ok = np.all(np.isfinite(q), axis=1) & np.all(np.isfinite(p), axis=1)
    if np.any(ok):
        result[ok] = f(q[ok], p[ok])
    return result
