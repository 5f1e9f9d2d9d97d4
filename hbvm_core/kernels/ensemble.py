"""The ensemble's block loop: one compiled call integrates a block of runs, each by the template's own ``run_chunk``.

``block_source(template)`` is the source of ``run_block``, which the generator
(``registry``) writes into the SAME generated module as the template's
``run_chunk`` (so numba caches both together, and the per-run step is the one
generated step: one stopping rule, one compensated update, one set of status
codes). It is written from the names of ``run_chunk``'s parameters, read from
the template, by one table of roles (``PER_RUN``): a parameter is either the
run's own (its state, its scalars h, N, save_every, its params row and its
Cholesky factor L, its point buffers: views of the block's output rows) or
shared by the block (the method's tables, the stopping rule, the warm start),
passed through in the order of ``BLOCK_SHARED``. So the three templates share
one generator, and ``run_chunk`` is not touched.

``run_block`` is ``numba.njit(parallel=True)`` with ``prange`` over the runs:
each run gets its own state and buffers and runs its whole time loop in
compiled code (no Python per run or per step). A failed run records its status
and step and stops alone. The multiplier of a run's last step is the one
``run_chunk`` carries to the next step (``LoopDescription.carried``: HBVM's
``lam_prev``, RATTLE's ``lam``); a template without one (the polynomial multiplier) is run
in two calls, to step N - 1 with the run's ``save_every``, then the last step
with ``save_every = 1``, and the multiplier is read from that step's row (the
point rule then keeps exactly the same points; a point N - 1 kept only because
it was the last of the first call is dropped).

The block call's inputs and outputs (``BLOCK_INPUTS``, ``BLOCK_OUTPUTS``) are
what every backend takes and gives (``run_block_numba`` here,
``hbvm_core.kernels.cuda.run_block_cuda``).
"""

from __future__ import annotations

import ast

import numpy as np

from ..errors import ConfigError

#: the block call's inputs, run axis first: q0 [R, m], p0 [R, m], h [R], N [R] int64, sample_every [R] int64,
#: params [R, P]; and what the loops need besides: lam0 [R, nu] (the first multiplier of each run: the blended
#: solver's lambda(q0, p0), else zeros), L [R, m, m] (the Cholesky factor of each run's M; [R, 0, 0] for M = I),
#: compensated (bool), gamma_rows (rows of the guess carried between steps: the runner's ``guess_rows``), shared
#: (the template's shared run_chunk arguments, a tuple in the order of the generated module's ``BLOCK_SHARED``)
BLOCK_INPUTS = ("q0", "p0", "h", "N", "sample_every", "params", "lam0", "L", "compensated", "gamma_rows", "shared")
#: the block call's outputs: status int8 [R], fail_step, steps, iterations, max_iterations, n_saved int64 [R],
#: t [R, S], q [R, S, m], p [R, S, m] (NaN beyond n_saved), lam [R, nu] (the last step's; NaN for a failed run)
BLOCK_OUTPUTS = ("status", "fail_step", "steps", "iterations", "max_iterations", "n_saved", "t", "q", "p", "lam")

#: run_chunk's parameters that belong to one run -> how run_block makes them (r: the run; m, nu: sizes)
PER_RUN = {
    "q": "q0[r].copy()",
    "p": "p0[r].copy()",
    "cq": "np.zeros(m)",
    "cp": "np.zeros(m)",
    "gamma_prev": "np.zeros((gamma_rows, m))",
    "lam_prev": "lam0[r].copy()",
    "lam": "lam0[r].copy()",
    "state": "_start_state(compensated)",
    "info": "np.zeros(INFO_SIZE)",
    "q_fail": "np.zeros(m)",
    "h": "h[r]",
    "P": "params[r]",
    "params": "params[r]",
    "L": "L[r]",
    "pt_t": "t[r, :cap]",
    "pt_q": "q[r, :cap]",
    "pt_p": "p[r, :cap]",
    "st_t": "np.empty(cap)",
    "st_lam": "np.empty((cap, nu))",
    "st_it": "np.empty(cap, dtype=np.int32)",
}
#: set per call by run_block: the steps to run to, and the save rule
CALL = ("N", "save_every")


def chunk_parameters(source: str) -> list[str]:
    """The parameter names of ``run_chunk`` in a template's source."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef) and node.name == "run_chunk":
            return [a.arg for a in node.args.args]
    raise ConfigError("a kernel template without run_chunk has no ensemble block")


def saved_points(N: np.ndarray, sample_every: np.ndarray) -> np.ndarray:
    """Points 0..N kept by the save rule (rules.point_saved): every sample_every-th, and the last."""
    N, every = np.asarray(N, dtype=np.int64), np.asarray(sample_every, dtype=np.int64)
    return N // every + 1 + (N % every != 0)


def block_source(source: str, carried: str | None) -> str:
    """The source of ``run_block`` (and ``BLOCK_SHARED``) for the template whose source is ``source``; ``carried``:
    the run_chunk argument that carries the multiplier from step to step (``LoopDescription.carried``: after the
    loop, the last step's), None where there is none (then two calls, the multiplier read from the last step's
    row). Reads run_chunk's state and info by their fields' names (``description.field_source``)."""
    names = chunk_parameters(source)
    shared = [n for n in names if n not in PER_RUN and n not in CALL]
    own = [n for n in names if n in PER_RUN]

    def call(n_steps: str, every: str) -> str:
        values = {"N": n_steps, "save_every": every}
        return f"run_chunk({', '.join(values.get(n, f'_{n}') for n in names)})"

    fresh = "\n".join(f"        _{n} = {PER_RUN[n]}" for n in own)
    if carried is not None:  # one call; the last step's multiplier is what run_chunk carries to the next step
        if carried not in names:
            raise ConfigError(f"the carried multiplier {carried!r} is no argument of run_chunk ({', '.join(names)})")
        steps = f"""            code = {call("n_run", "every")}"""
        last = f"_{carried}[b]"
    else:  # two calls: to step N - 1, then the last step alone, its multiplier in its step row
        steps = f"""            code = {call("n_run - 1", "every")}
            if code == OK and (n_run - 1) % every != 0:
                _state[STATE_POINTS] -= 1  # point N - 1 was kept only as the last point of that call
            if code == OK:
                code = {call("n_run", "1")}"""
        last = "_st_lam[_state[STATE_STEPS] - 1, b]"
    shared_params = "".join(f"_{n}, " for n in shared)
    return f'''

# --------------------------------------------------------------------------- the ensemble (kernels/ensemble.py)
from numba import prange  # noqa: E402

BLOCK_SHARED = {tuple(shared)!r}


@njit(cache=CACHE)
def _start_state(compensated):
    """run_chunk's state at n = 0: the initial point is row 0 of the point buffer."""
    state = np.zeros(STATE_SIZE, dtype=np.int64)
    state[STATE_POINTS] = 1
    state[STATE_COMPENSATED] = 1 if compensated else 0
    return state


@njit(parallel=True, cache=CACHE)
def run_block(q0, p0, lam0, h, N, sample_every, params, L, compensated, gamma_rows, {shared_params}
              status, fail_step, steps, iterations, max_iterations, n_saved, t, q, p, lam):
    """Every run r of the block by this module's run_chunk (kernels/ensemble.py); the outputs are rows r."""
    m, nu = q0.shape[1], lam.shape[1]
    for r in prange(q0.shape[0]):
        n_run, every = N[r], sample_every[r]
        cap = n_run // every + 1
        if n_run % every != 0:
            cap += 1
{fresh}
        _pt_t[0] = 0.0
        for a in range(m):
            _pt_q[0, a] = q0[r, a]
            _pt_p[0, a] = p0[r, a]
        code = OK
        if n_run > 0:
{steps}
        for i in range(_state[STATE_POINTS], cap):
            _pt_t[i] = np.nan
            for a in range(m):
                _pt_q[i, a] = np.nan
                _pt_p[i, a] = np.nan
        status[r] = code
        fail_step[r] = -1 if code == OK else int(_info[INFO_STEP])
        steps[r] = _state[STATE_N]
        iterations[r] = _state[STATE_ITERATIONS]
        max_iterations[r] = _state[STATE_MAX_ITERATIONS]
        n_saved[r] = _state[STATE_POINTS]
        for b in range(nu):
            lam[r, b] = {last} if code == OK and n_run > 0 else np.nan
'''


def block_outputs(R: int, S: int, m: int, nu: int) -> dict[str, np.ndarray]:
    """The output arrays of a block (``BLOCK_OUTPUTS``): NaN-filled t, q, p; -1 fail steps."""
    return {
        "status": np.zeros(R, dtype=np.int8),
        "fail_step": np.full(R, -1, dtype=np.int64),
        "steps": np.zeros(R, dtype=np.int64),
        "iterations": np.zeros(R, dtype=np.int64),
        "max_iterations": np.zeros(R, dtype=np.int64),
        "n_saved": np.zeros(R, dtype=np.int64),
        "t": np.full((R, S), np.nan),
        "q": np.full((R, S, m), np.nan),
        "p": np.full((R, S, m), np.nan),
        "lam": np.full((R, nu), np.nan),
    }


def shared_arguments(runner, problem) -> tuple:
    """The template's shared run_chunk arguments (``BLOCK_SHARED``) as the runner gives them (``loop_arguments``)."""
    m, s = problem.m, 1
    module = runner.module
    names = chunk_parameters_of(module)
    placeholders = (np.zeros(m), np.zeros(m), np.zeros(m), np.zeros(m), np.zeros((s, m)), np.zeros(7, np.int64))
    args = runner.loop_arguments(problem, *placeholders, 0.1, 1, 1)
    named = dict(zip(names, args))
    return tuple(named[n] for n in module.BLOCK_SHARED)


def chunk_parameters_of(module) -> list[str]:
    """run_chunk's parameter names in a generated module."""
    code = module.run_chunk.py_func.__code__
    return list(code.co_varnames[: code.co_argcount])


def run_block_numba(runner, inputs: dict) -> dict:
    """The block call on the CPU: one call of the module's ``run_block`` (parallel over the runs)."""
    q0 = inputs["q0"]
    R, m = q0.shape
    nu = inputs["lam0"].shape[1]
    S = int(saved_points(inputs["N"], inputs["sample_every"]).max()) if R else 1
    out = block_outputs(R, S, m, nu)
    gamma_rows = int(inputs["gamma_rows"])
    runner.module.run_block(
        q0, inputs["p0"], inputs["lam0"], inputs["h"], inputs["N"], inputs["sample_every"], inputs["params"],
        inputs["L"], bool(inputs["compensated"]), gamma_rows, *inputs["shared"],
        *(out[key] for key in BLOCK_OUTPUTS),
    )  # fmt: skip
    return out
