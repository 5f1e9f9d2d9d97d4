"""The GPU backend of the ensemble's block call (numba-cuda): one thread per run, the whole time loop in one kernel.

``run_block_cuda(runner, inputs)`` integrates a block of runs on the GPU:
``runner`` is the per-run runner of (method, representative problem)
(``kernels.driver``: ``CompiledRunner``, ``PolynomialRunner``, ``RattleRunner``;
its loop module gives the compile-time sizes and the callbacks), ``inputs``
the block call's arrays, run axis first (``kernels/ensemble.BLOCK_INPUTS``:
``q0 [R, m]``, ``p0``, ``h [R]``, ``N [R]``, ``sample_every [R]``,
``params [R, P]``, ``lam0 [R, nu]``, ``L [R, m, m]`` or ``[R, 0, 0]`` for
M = I, ``compensated``, ``gamma_rows``, and ``shared``: the template's shared
run_chunk arguments -- tables, stopping rule, warm start -- in run_chunk's
order). It returns the block call's outputs (``BLOCK_OUTPUTS``: ``status``,
``fail_step``, ``steps``, ``iterations``, ``max_iterations``, ``n_saved``,
``t [R, S]``, ``q``, ``p [R, S, m]``, ``lam [R, nu]``), run axis first, NaN
beyond each run's saved points, as the CPU ensemble does.

The kernel module comes from the SAME template as the CPU loop: the template
with ``rules.py`` and ``linalg.py`` pasted (``registry.expand_inline``),
rewritten by ``cuda_source`` (work arrays as ``cuda.local.array`` of
compile-time size, ``run_chunk`` a device function) and a kernel written from
run_chunk's parameter names; k, s, m, nu, M != I and the solver are fixed at
compile time, the problem's callbacks bound as device functions
(``cuda.jit(device=True, inline="always")`` of their Python source). In global
memory the block is structure-of-arrays (``q0[a, r]``: adjacent threads read
adjacent words); each thread keeps its run's state in local memory (registers
where the compiler can), calls ``run_chunk`` until its run is done or failed,
and copies only the saved points out. A failed run records its status and
step; the others go on.

``cuda_available()`` says whether a GPU (or numba-cuda's simulator,
``NUMBA_ENABLE_CUDASIM=1``) can run it. Importing this module imports neither
numba nor numba.cuda.
"""

from __future__ import annotations

import importlib.metadata
import time
import types

import numpy as np

from ..errors import BackendError
from .modules import Binding, generated_module, module_tag
from .registry import compiled, expanded_template, resolve_callback

#: point and step rows a thread buffers per call of run_chunk before it copies the points to global memory
ROWS = 4
#: threads per block of a launch
THREADS = 128
#: the block call's per-run counts, in the kernel's order (then t, q, p, lam)
BLOCK_COUNTS = ("status", "fail_step", "steps", "iterations", "max_iterations", "n_saved")
#: how the GPU kernel binds a callback: a numba-cuda device function of its Python source (``device_function``)
CUDA_BINDING = Binding("hbvm_core.kernels.cuda:device_function", stem="cuda_kernel", module="_hbvm_cuda_")
_CAPPED: dict[tuple[str, int], object] = {}  # (module, max_registers) -> its kernel compiled with that cap


def cuda_available() -> bool:
    """Whether numba-cuda is installed and finds a GPU (or runs its simulator, ``NUMBA_ENABLE_CUDASIM=1``).

    On Linux a host whose CUDA driver library cannot be loaded has no GPU: told without importing numba.cuda
    (about 0.6 s, paid by every worker of a CPU-only cluster that a shard's backend ``auto`` asks)."""
    if not _driver_may_load():
        return False
    try:
        from numba import cuda
    except Exception:  # numba-cuda or its CUDA bindings missing
        return False
    try:
        return bool(cuda.is_available())
    except Exception:  # a driver that fails to initialise
        return False


def _driver_may_load() -> bool:
    """False only where numba-cuda would find no driver: Linux, numba.cuda not imported yet and its simulator
    not asked for, and neither ``NUMBA_CUDA_DRIVER`` nor libcuda.so(.1) loadable (numba-cuda's own candidates)."""
    import ctypes
    import os
    import sys

    if sys.platform != "linux" or "numba.cuda" in sys.modules or os.environ.get("NUMBA_ENABLE_CUDASIM", "0") != "0":
        return True
    for name in (os.environ.get("NUMBA_CUDA_DRIVER"), "libcuda.so.1", "libcuda.so"):
        if not name:
            continue
        try:
            ctypes.CDLL(name)
        except OSError:
            continue
        return True
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


def loop_sizes(runner, shared: tuple) -> dict[str, int]:
    """The compile-time sizes of the templates' work arrays: k, s (from the shared Ihat; 1 without), m, nu, sm."""
    from .cuda_source import chunk_parameters, shared_parameters

    names = shared_parameters(chunk_parameters(description_of(runner).path.read_text()))
    tables = dict(zip(names, shared))
    k, s = np.shape(tables["Ihat"]) if "Ihat" in tables else (1, 1)
    m, nu = int(runner.module.M_SIZE), int(runner.module.NU_SIZE)
    return {"k": int(k), "s": int(s), "m": m, "nu": nu, "sm": int(s) * m}


def description_of(runner):
    """The description of a runner's loop (``LoopDescription``); BackendError for a loop with no GPU form."""
    description = getattr(runner, "description", None)
    if description is None or not description.has("cuda"):
        raise BackendError(f"backend 'cuda': no GPU loop for {type(runner).__name__}")
    return description


def cuda_module(runner, shared: tuple, gamma_rows: int) -> types.ModuleType:
    """The generated CUDA module of a runner's (template, callbacks, constants), with k and s fixed too."""
    from .cuda_source import cuda_module_source

    description = description_of(runner)
    sizes = loop_sizes(runner, shared)
    cpu = runner.module
    constants = {key: getattr(cpu, key) for key in ("M_SIZE", "NU_SIZE", "HAS_M", "SOLVER") if hasattr(cpu, key)}
    constants |= {"K_SIZE": sizes["k"], "S_SIZE": sizes["s"]}
    constants = {key: val.item() if isinstance(val, np.generic) else val for key, val in constants.items()}
    callbacks = {key: resolve_callback(key, getattr(cpu, f"{key}_original")) for key in description.callbacks}
    try:
        source = cuda_module_source(expanded_template(description), sizes, ROWS, gamma_rows, description.fields())
    except ValueError as exc:
        raise BackendError(f"backend 'cuda': {exc}") from None
    tag = module_tag(description.template, (source,), _numba_cuda_version(), callbacks, constants)
    origin = f"hbvm_core.kernels.cuda from {description.path.name}"
    return generated_module(tag, source, callbacks, constants, CUDA_BINDING, origin)


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


def _scalar(value):
    """A shared scalar argument of run_chunk as a Python bool, int or float (numba-cuda types it by value)."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    return value.item() if isinstance(value, np.generic) else value


def block_arguments(runner, inputs: dict) -> tuple[types.ModuleType, list, dict, int]:
    """(module, the kernel's input arguments on the host in its order, the outputs' (shape, dtype), nu):
    the block's inputs as structure-of-arrays (run axis last), the shared run_chunk arguments after them."""
    shared = tuple(inputs["shared"])
    module = cuda_module(runner, shared, int(inputs.get("gamma_rows", 1)))
    sizes = loop_sizes(runner, shared)
    m, nu = sizes["m"], sizes["nu"]
    q0 = np.asarray(inputs["q0"], dtype=float)
    R = q0.shape[0]
    N = np.ascontiguousarray(inputs["N"], dtype=np.int64).reshape(R)
    every = np.ascontiguousarray(inputs["sample_every"], dtype=np.int64).reshape(R)
    S = int(saved_rows(N, every).max()) if R else 1
    args = [
        _soa(q0, (m, R)), _soa(inputs["p0"], (m, R)), _soa(inputs["lam0"], (1, R)),
        np.ascontiguousarray(inputs["h"], dtype=float).reshape(R), N, every,
        _soa(inputs["params"], (1, R)), _soa(inputs["L"], (1, 1, R)), bool(inputs.get("compensated", True)),
    ]  # fmt: skip
    args += [np.ascontiguousarray(a) if isinstance(a, np.ndarray) else _scalar(a) for a in shared]
    counts = {key: ((R,), np.int8 if key == "status" else np.int64) for key in BLOCK_COUNTS}
    outputs = counts | {
        "t": ((S, R), np.float64),
        "q": ((S, m, R), np.float64),
        "p": ((S, m, R), np.float64),
        "lam": ((max(nu, 1), R), np.float64),
    }
    return module, args, outputs, nu


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
    module, args, outputs, nu = block_arguments(runner, inputs)
    R = args[0].shape[1]
    t1 = clock()
    passed = [cuda.to_device(a) if isinstance(a, np.ndarray) else a for a in args]
    out = {key: cuda.device_array(shape, dtype=dtype) for key, (shape, dtype) in outputs.items()}
    cuda.synchronize()
    t2 = clock()
    if R:
        from numba.core.errors import NumbaError

        blocks = (R + threads - 1) // threads
        try:
            kernel(module, max_registers)[blocks, threads](*passed, *out.values())
        except NumbaError as exc:  # numba-cuda cannot compile it: a callback calling numpy array functions, say
            first = next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
            raise BackendError(
                f"backend 'cuda': the {description_of(runner).template} kernel does not compile: {first}"
            ) from None
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


def kernel_signature(runner, inputs: dict) -> tuple:
    """(the kernel's Python function, its numba signature for these inputs): what ``numba.cuda.compile_ptx``
    takes to compile it without a GPU (``benchmarks.gpu --ptx``)."""
    import numba

    module, args, outputs, _ = block_arguments(runner, inputs)
    arrays = [np.empty(shape, dtype=dtype) for shape, dtype in outputs.values()]
    return module.run_block.py_func, tuple(numba.typeof(a) for a in (*args, *arrays))
