"""The GPU backend of the ensemble's block call (numba-cuda): one thread per run, the whole time loop in one kernel.

``run_block_cuda(runner, inputs)`` integrates a block of runs on the GPU:
``runner`` is the per-run runner of (method, representative problem)
(``kernels.runner.CompiledRunner``: the tables, the stopping rule, the warm
start, the compile-time sizes and the callbacks), ``inputs`` the block call's
arrays, run axis first (``q0 [R, m]``, ``p0``, ``h [R]``, ``N [R]``,
``sample_every [R]``, ``params [R, P]``, ``lam0 [R, nu]``: the first
multiplier of each run, ``L [R, m, m]``: each run's Cholesky factor of M, or
``[R, 0, 0]`` for M = I, ``compensated``). It returns the block call's outputs
(``status``, ``fail_step``, ``steps``, ``iterations``, ``max_iterations``,
``n_saved``, ``t [R, S]``, ``q``, ``p [R, S, m]``, ``lam [R, nu]``), run axis
first, NaN beyond each run's saved points.

The kernel module comes from the SAME template as the CPU loop: the template
with ``rules.py`` and ``linalg.py`` pasted (``registry.expand_inline``),
rewritten by ``cuda_source`` (work arrays as ``cuda.local.array`` of
compile-time size, ``run_chunk`` a device function), k, s, m, nu, M != I and
the solver fixed at compile time, the problem's callbacks bound as device
functions (``cuda.jit(device=True, inline="always")`` of their Python source).
In global memory the state is structure-of-arrays (``q0[a, r]``: adjacent
threads read adjacent words); each thread keeps its run's state in local
memory (registers where the compiler can), calls ``run_chunk`` until its run
is done or failed, and copies only the saved points out. A failed run records
its status and step; the others go on. Only HBVM with the constant multiplier
(``hbvm.py``, both solvers) has a GPU loop so far.

``cuda_available()`` says whether a GPU (or numba-cuda's simulator,
``NUMBA_ENABLE_CUDASIM=1``) can run it. Importing this module imports neither
numba nor numba.cuda.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import time
import types

import numpy as np

from ..errors import BackendError
from .registry import SHARED, TEMPLATES, callback_source, compiled, expand_inline, import_generated, resolve_callback

#: point and step rows a thread buffers per call of run_chunk before it copies the points to global memory
ROWS = 4
#: threads per block of a launch
THREADS = 128
_MODULES: dict[str, types.ModuleType] = {}
_CAPPED: dict[tuple[str, int], object] = {}  # (module, max_registers) -> its kernel compiled with that cap


def cuda_available() -> bool:
    """Whether numba-cuda is installed and finds a GPU (or runs its simulator, ``NUMBA_ENABLE_CUDASIM=1``)."""
    try:
        from numba import cuda
    except Exception:  # numba-cuda or its CUDA bindings missing
        return False
    try:
        return bool(cuda.is_available())
    except Exception:  # a driver that fails to initialise
        return False


def simulated() -> bool:
    """Whether numba.cuda is numba-cuda's simulator (``NUMBA_ENABLE_CUDASIM=1`` when it was first imported)."""
    from numba import config

    return bool(getattr(config, "ENABLE_CUDASIM", 0))


def device_name() -> str:
    """The GPU's name ('simulator' under numba-cuda's simulator)."""
    from numba import cuda

    if simulated():
        return "numba-cuda simulator"
    name = cuda.get_current_device().name
    return name.decode() if isinstance(name, bytes) else str(name)


def device_function(f):
    """A problem callback (an njit dispatcher or a ``kernel``-marked function) as a numba-cuda device function."""
    from numba import cuda

    return cuda.jit(device=True, inline="always")(getattr(compiled(f), "py_func", f))


def _numba_cuda_version() -> str:
    try:
        return importlib.metadata.version("numba-cuda")
    except importlib.metadata.PackageNotFoundError:
        return "?"


def loop_sizes(runner) -> dict[str, int]:
    """The compile-time sizes of the templates' work arrays: k, s (from the tables), m, nu and sm = s m."""
    k, s = runner.tab[0].shape
    m, nu = int(runner.module.M_SIZE), int(runner.module.NU_SIZE)
    return {"k": int(k), "s": int(s), "m": m, "nu": nu, "sm": int(s) * m}


def cuda_module(runner) -> types.ModuleType:
    """The generated CUDA module of a ``CompiledRunner``'s (template, callbacks, constants), k and s fixed too."""
    from . import runner as runner_module
    from .cuda_source import cuda_module_source

    if type(runner) is not runner_module.CompiledRunner:
        raise BackendError(
            f"backend 'cuda': no GPU loop for {type(runner).__name__} yet (HBVM with the constant multiplier only)"
        )
    sizes = loop_sizes(runner)
    cpu = runner.module
    constants = {
        "M_SIZE": sizes["m"],
        "NU_SIZE": sizes["nu"],
        "K_SIZE": sizes["k"],
        "S_SIZE": sizes["s"],
        "HAS_M": bool(cpu.HAS_M),
        "SOLVER": int(cpu.SOLVER),
    }
    callbacks = {key: resolve_callback(key, getattr(cpu, f"{key}_original")) for key in ("grad_U", "G")}
    expanded = expand_inline(TEMPLATES["hbvm"].read_text(), *(path.read_text() for path in SHARED))
    try:
        source = cuda_module_source(expanded, sizes, ROWS)
    except ValueError as exc:
        raise BackendError(f"backend 'cuda': {exc}") from None
    digest = hashlib.sha256(source.encode())
    digest.update(_numba_cuda_version().encode())
    for key, (f, name) in callbacks.items():
        digest.update(f"{key}={name or id(f)}\n{callback_source(f)}".encode())
    digest.update(repr(sorted(constants.items())).encode())
    tag = digest.hexdigest()[:20]
    if tag in _MODULES:
        return _MODULES[tag]
    if all(name is not None for _, name in callbacks.values()):
        lines = ["# Generated by hbvm_core.kernels.cuda from hbvm.py; do not edit.", source, ""]
        lines.append("from hbvm_core.kernels.cuda import device_function as _device  # noqa: E402")
        bound = [f"{key}={name}" for key, (_, name) in callbacks.items()] + [f"{k}={v!r}" for k, v in constants.items()]
        lines.append(f"# bound: {', '.join(bound)}")
        for i, (key, (_, name)) in enumerate(callbacks.items()):
            module, _, qual = name.partition(":")
            lines.append(f"import {module} as _callbacks{i}  # noqa: E402")
            lines.append(f"{key} = _device(_callbacks{i}.{qual})")
        lines += [f"{key} = {val!r}" for key, val in constants.items()]
        module = import_generated(f"hbvm_cuda_kernel_{tag}", f"_hbvm_cuda_{tag}", "\n".join(lines) + "\n")
    else:  # callbacks that cannot be imported by name: compiled in every process
        module = types.ModuleType(f"_hbvm_cuda_{tag}")
        code = source.replace("\nCACHE = True", "\nCACHE = False", 1)
        exec(compile(code, f"<hbvm cuda kernel {tag}>", "exec"), module.__dict__)  # noqa: S102
        module.__dict__.update({key: device_function(f) for key, (f, _) in callbacks.items()})
        module.__dict__.update(constants)
    _MODULES[tag] = module
    return module


def kernel(module: types.ModuleType, max_registers: int | None = None):
    """The module's ``run_block``, or a copy compiled with at most ``max_registers`` registers per thread (more
    threads per SM, at the price of spills to local memory; ignored by the simulator)."""
    if not max_registers or simulated():
        return module.run_block
    key = (module.__name__, int(max_registers))
    if key not in _CAPPED:
        from numba import cuda

        _CAPPED[key] = cuda.jit(max_registers=int(max_registers))(module.run_block.py_func)
    return _CAPPED[key]


def saved_rows(N: np.ndarray, sample_every: np.ndarray) -> np.ndarray:
    """Points 0..N kept by the save rule (``rules.point_saved``): every sample_every-th, and the last."""
    N, every = np.asarray(N, dtype=np.int64), np.asarray(sample_every, dtype=np.int64)
    return N // every + 1 + (N % every != 0)


def _soa(a: np.ndarray, empty_shape: tuple[int, ...]) -> np.ndarray:
    """A run-first host array as structure-of-arrays (run axis last), C-contiguous; a dummy for an empty one."""
    a = np.asarray(a, dtype=float)
    if a.size == 0:
        return np.zeros(empty_shape)
    return np.ascontiguousarray(np.moveaxis(a, 0, -1))


def run_block_cuda(
    runner, inputs: dict, *, threads: int = THREADS, max_registers: int | None = None, timings: dict | None = None
) -> dict:
    """The block call on the GPU: one kernel launch, one thread per run (see the module docstring).

    ``threads``: threads per block; ``max_registers``: a cap on the registers of a thread (``kernel``).
    ``timings``, if given, receives the seconds of ``compile`` (building the module; numba-cuda compiles the
    kernel at its first launch, which then counts in ``kernel``), ``to_device``, ``kernel`` and ``to_host``.
    """
    if not cuda_available():
        raise BackendError("backend 'cuda': no GPU found (numba-cuda is not installed or sees no CUDA device)")
    from numba import cuda

    clock = time.perf_counter
    t0 = clock()
    module = cuda_module(runner)
    sizes = loop_sizes(runner)
    m, nu = sizes["m"], sizes["nu"]
    q0 = np.asarray(inputs["q0"], dtype=float)
    R = q0.shape[0]
    N = np.ascontiguousarray(inputs["N"], dtype=np.int64).reshape(R)
    every = np.ascontiguousarray(inputs["sample_every"], dtype=np.int64).reshape(R)
    S = int(saved_rows(N, every).max()) if R else 1
    t1 = clock()
    host = {
        "q0": _soa(q0, (m, R)),
        "p0": _soa(inputs["p0"], (m, R)),
        "lam0": _soa(inputs["lam0"], (1, R)),
        "h": np.ascontiguousarray(inputs["h"], dtype=float).reshape(R),
        "N": N,
        "sample_every": every,
        "params": _soa(inputs["params"], (1, R)),
        "L": _soa(inputs["L"], (1, 1, R)),
    }
    dev = {key: cuda.to_device(val) for key, val in host.items()}
    Ihat, W, X, E = (cuda.to_device(a) for a in runner.tab)
    rule = cuda.to_device(np.asarray(runner.rule, dtype=float))
    out = {
        "status": cuda.device_array(R, dtype=np.int8),
        "fail_step": cuda.device_array(R, dtype=np.int64),
        "steps": cuda.device_array(R, dtype=np.int64),
        "iterations": cuda.device_array(R, dtype=np.int64),
        "max_iterations": cuda.device_array(R, dtype=np.int64),
        "n_saved": cuda.device_array(R, dtype=np.int64),
        "t": cuda.device_array((S, R)),
        "q": cuda.device_array((S, m, R)),
        "p": cuda.device_array((S, m, R)),
        "lam": cuda.device_array((max(nu, 1), R)),
    }
    cuda.synchronize()
    t2 = clock()
    if R:
        blocks = (R + threads - 1) // threads
        kernel(module, max_registers)[blocks, threads](
            dev["q0"], dev["p0"], dev["lam0"], dev["h"], dev["N"], dev["sample_every"], dev["params"], dev["L"],
            bool(inputs.get("compensated", True)), int(runner.warm), rule, Ihat, W, X, E,
            *out.values(),
        )  # fmt: skip
    cuda.synchronize()
    t3 = clock()
    result = {key: val.copy_to_host() for key, val in out.items()}
    t4 = clock()
    result["t"] = np.ascontiguousarray(result["t"].T)
    result["q"] = np.ascontiguousarray(result["q"].transpose(2, 0, 1))
    result["p"] = np.ascontiguousarray(result["p"].transpose(2, 0, 1))
    result["lam"] = np.ascontiguousarray(result["lam"][:nu].T)
    if timings is not None:
        timings.update(compile=t1 - t0, to_device=t2 - t1, kernel=t3 - t2, to_host=t4 - t3)
    return result
