"""The GPU block call (hbvm_core/kernels/cuda.py) against the per-run compiled CPU loop, its oracle.

Without a GPU (here and in CI) the kernel runs under numba-cuda's simulator, which executes the same generated
module in Python: a few runs and steps of the conical pendulum (HBVM(2,2), blended), the planar pendulum
(HBVM(2,2), fixed point, one run failing at step 3), the tethered satellites (HBVM(6,2), M != I), the polynomial
multiplier (PolynomialHBVM(3,2), conical) and RATTLE (planar).
numba.cuda reads NUMBA_ENABLE_CUDASIM once, when first imported, so the blocks run in a subprocess
(tests/_gpu_runs.py) and this process never switches numba.cuda's mode. The tests marked ``gpu`` run the same
script on a real GPU and are skipped without one.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hbvm_core.kernels.cuda_source import SCALAR_MATH, to_cuda
from hbvm_core.kernels.description import template_source
from hbvm_core.kernels.registry import SHARED, expand_inline

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "_gpu_runs.py"
EPS = float(np.finfo(float).eps)
#: the same IEEE operations in the same order on both paths, but a GPU may contract a*b + c into one FMA and the
#: simulator computes with numpy scalars: a few ulps of the quantity's scale per step, growing at most linearly
ULPS_PER_STEP = 64
CASES = ("conical", "planar", "tethered", "polynomial", "rattle")
ENSEMBLE_FIELDS = ("status", "fail_step", "steps", "iterations", "max_iterations", "n_saved", "t", "q", "p", "lam")
needs_numba_cuda = pytest.mark.skipif(importlib.util.find_spec("numba_cuda") is None, reason="numba-cuda missing")


def _blocks(tmp_path_factory, device: bool) -> dict:
    out = tmp_path_factory.mktemp("gpu") / "blocks.npz"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    if device:
        env.pop("NUMBA_ENABLE_CUDASIM", None)
    else:
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    cmd = [sys.executable, str(SCRIPT), str(out), *(["--device"] if device else [])]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    with np.load(out) as data:
        return {key: data[key] for key in data.files}


@pytest.fixture(scope="module")
def simulated(tmp_path_factory) -> dict:
    return _blocks(tmp_path_factory, device=False)


@pytest.fixture(scope="module")
def on_gpu(tmp_path_factory) -> dict:
    probe = subprocess.run(
        [sys.executable, "-c", "from hbvm_core.kernels.cuda import cuda_available as a, simulated as s; "
         "print(int(a() and not s()))"],
        env={k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"} | {"PYTHONPATH": str(ROOT)},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    if probe.stdout.strip() != "1":
        pytest.skip("no CUDA GPU")
    return _blocks(tmp_path_factory, device=True)


def _agree(blocks: dict, case: str, sweeps_per_step: int) -> None:
    """Every run: status, failure step, steps, saved points, last multiplier and iterations as the CPU loop's
    (the iterations within ``sweeps_per_step`` per step)."""
    d = {key.split("/", 1)[1]: val for key, val in blocks.items() if key.startswith(f"{case}/")}
    N, fail = d["N"], d["cpu_fail_step"]
    ok = fail < 0
    assert np.array_equal(d["gpu_status"] == 0, ok)
    assert np.array_equal(d["gpu_fail_step"], fail)
    assert np.array_equal(d["gpu_steps"], np.where(ok, N, fail))
    rows = np.isfinite(d["cpu_t"]).sum(axis=1)
    assert np.array_equal(d["gpu_n_saved"], rows)
    for r in range(len(N)):
        n, steps = rows[r], max(int(d["gpu_steps"][r]), 1)
        for key in ("t", "q", "p"):
            gpu, cpu = d[f"gpu_{key}"][r], d[f"cpu_{key}"][r]
            assert np.all(np.isnan(gpu[n:])), (case, r, key)
            tol = ULPS_PER_STEP * EPS * steps * max(1.0, float(np.max(np.abs(cpu[:n]))))
            assert np.max(np.abs(gpu[:n] - cpu[:n])) <= tol, (case, r, key)
        if ok[r] and d["cpu_lam_saved"][r]:
            lam = d["cpu_lam"][r]
            tol = ULPS_PER_STEP * EPS * steps * max(1.0, float(np.max(np.abs(lam))))
            assert np.max(np.abs(d["gpu_lam"][r] - lam)) <= tol, (case, r)
        if ok[r]:
            assert abs(int(d["gpu_iterations"][r]) - int(d["cpu_iterations"][r])) <= sweeps_per_step * N[r], (case, r)
        else:
            assert np.all(np.isnan(d["gpu_lam"][r]))


def _conserves(blocks: dict, case: str) -> None:
    """|H - H0| and |g| at the GPU's saved points at round-off: U linear and g quadratic in q, which HBVM(2,2) and
    the polynomial-multiplier HBVM(3,2) conserve exactly (docs/method.md 3, 6: the quadrature is exact), so only
    the rounding of each step remains (linear in the steps)."""
    H, g, scale, N = (blocks[f"{case}/{key}"] for key in ("H_error", "g_error", "scale", "N"))
    bound = ULPS_PER_STEP * EPS * scale * N
    assert np.all(H <= bound), (H, bound)
    assert np.all(g <= bound), (g, bound)


# --------------------------------------------------------------------------- the generated source (no numba.cuda)
def _expanded(template: str) -> str:
    return expand_inline(template_source(template), *(path.read_text() for path in SHARED))


@pytest.mark.parametrize("template", ("hbvm", "polynomial", "rattle"))
def test_cuda_source_keeps_the_arithmetic(template):
    """The CUDA module's run_chunk is the CPU one but for the work arrays, the decorator and numpy's scalar
    functions (as math's): every other statement of the expanded template appears, in order, in the rewritten one."""
    sizes = {"k": 6, "s": 2, "m": 9, "nu": 3, "sm": 18}
    cpu = ast.unparse(ast.parse(_expanded(template))).splitlines()
    gpu = to_cuda(_expanded(template), sizes).splitlines()
    kept = []
    for line in cpu:
        if "np.empty" in line or "np.zeros" in line or line.strip() == "@njit(cache=CACHE)":
            continue
        for name in SCALAR_MATH:
            line = line.replace(f"np.{name}(", f"math.{name}(")
        kept.append(line)
    it = iter(gpu)
    missing = [line for line in kept if not any(line == other for other in it)]
    assert not missing, missing[:3]
    assert "@cuda.jit(device=True)" in gpu
    assert not [line for line in gpu if "np.empty" in line or "np.zeros" in line or "np.isfinite" in line]


def test_cuda_source_sizes_and_zeros():
    """The work arrays' sizes are integer literals from the compile-time sizes (0 allocated as 1); np.zeros is
    followed by its zero fill."""
    sizes = {"k": 6, "s": 2, "m": 9, "nu": 3, "sm": 18}
    gpu = to_cuda(_expanded("hbvm"), sizes).splitlines()
    # the literal sizes, 0 allocated as 1, and the zero fill of np.zeros
    assert "    A11 = cuda.local.array((18, 18), np.float64)" in gpu
    assert "    piv11 = cuda.local.array((18,), np.int64)" in gpu
    assert "    rhs = cuda.local.array((21,), np.float64)" in gpu
    no_constraints = to_cuda(_expanded("hbvm"), sizes | {"nu": 0})
    assert "    A = cuda.local.array((1, 1), np.float64)" in no_constraints.splitlines()
    fill = gpu.index("    GQ = cuda.local.array((6, 9, 3), np.float64)")
    assert gpu[fill + 4].strip().startswith("GQ[") and gpu[fill + 4].strip().endswith("= 0")


def test_cuda_kernel_roles_are_the_cpu_ensembles():
    """The GPU kernel gives a run its own copy of exactly the run_chunk parameters the CPU ensemble does
    (``kernels/ensemble.PER_RUN``), so both pass the same shared arguments (``BLOCK_SHARED``) in the same order."""
    from hbvm_core.kernels import cuda_source, ensemble

    assert set(cuda_source.LOCAL) | set(cuda_source.VIEWS) == set(ensemble.PER_RUN)
    assert set(cuda_source.CALL) == set(ensemble.CALL)
    for template in ("hbvm", "polynomial", "rattle"):
        names = cuda_source.chunk_parameters(_expanded(template))
        cpu_shared = [n for n in names if n not in ensemble.PER_RUN and n not in ensemble.CALL]
        assert cuda_source.shared_parameters(names) == cpu_shared


def test_cuda_source_refuses_what_it_cannot_rewrite():
    """A numpy function the rewrite does not know, or a shape that is not a compile-time size, is an error."""
    sizes = {"k": 2, "s": 2, "m": 3, "nu": 1, "sm": 6}
    with pytest.raises(ValueError, match="np.linalg"):
        to_cuda("def run_chunk(x):\n    return np.linalg.norm(x)\n", sizes)
    with pytest.raises(ValueError, match="compile-time size"):
        to_cuda("def run_chunk(x):\n    w = np.empty(x.shape[0])\n", sizes)


def test_no_gpu_is_one_line_backend_error():
    """Without a GPU (and without the simulator) the block call stops with one line naming the backend."""
    from hbvm_core.errors import BackendError
    from hbvm_core.kernels.cuda import cuda_available, run_block_cuda

    if cuda_available():
        pytest.skip("a GPU (or numba-cuda's simulator) is present")
    with pytest.raises(BackendError, match="backend 'cuda': no GPU") as err:
        run_block_cuda(None, {})
    assert "\n" not in str(err.value)


# --------------------------------------------------------------------------- the simulator (a few runs and steps)
@pytest.mark.slow
@needs_numba_cuda
@pytest.mark.parametrize("case", CASES)
def test_simulator_matches_compiled_loop(simulated, case):
    """The simulator computes the generated module's float64 operations one by one, as the CPU loop (no FMA): the
    stopping rule then decides alike, the same iterations (a tie within an ulp of the threshold would show here)."""
    _agree(simulated, case, sweeps_per_step=0)


@pytest.mark.slow
@needs_numba_cuda
@pytest.mark.parametrize("case", ("conical", "planar", "polynomial"))
def test_simulator_conserves_energy_and_constraints(simulated, case):
    _conserves(simulated, case)


@pytest.mark.slow
@needs_numba_cuda
def test_simulator_failed_run_stops_alone(simulated):
    """The planar block's last run fails at step 3 (no convergence, as the CPU loop's ConvergenceError): its
    status and step are recorded, its points 0..3 kept, and the block's other runs finish all their steps."""
    status, fail, steps = (simulated[f"planar/gpu_{key}"] for key in ("status", "fail_step", "steps"))
    assert list(status) == [0, 0, 0, 1] and fail[-1] == 3 and steps[-1] == 3
    assert np.array_equal(steps[:-1], simulated["planar/N"][:-1])
    assert simulated["planar/gpu_n_saved"][-1] == 4


@pytest.mark.slow
@needs_numba_cuda
def test_simulator_ensemble_end_to_end(simulated):
    """integrate_ensemble(backend="cuda") and ("auto") run the block on the (simulated) GPU and give the result of
    backend "numba" (the CPU ensemble) beyond round-off in nothing: counts alike, states to eps x scale x steps."""
    d = {key.split("/", 1)[1]: val for key, val in simulated.items() if key.startswith("ensemble/")}
    steps = int(d["N"].max())
    for backend in ("cuda", "auto"):
        assert str(d[f"{backend}_backend"]) == "cuda"
        assert str(d[f"{backend}_note"]) == "per-run block on the GPU: all 4 runs (a thread each)"  # the road
        for key in (*ENSEMBLE_FIELDS, "H_error", "g_error"):
            gpu, cpu = d[f"{backend}_{key}"], d[f"numba_{key}"]
            assert gpu.shape == cpu.shape and np.array_equal(np.isnan(gpu), np.isnan(cpu)), key
            if gpu.dtype.kind in "iu":
                assert np.array_equal(gpu, cpu), key
            else:
                scale = max(1.0, float(np.nanmax(np.abs(cpu))))
                assert np.nanmax(np.abs(gpu - cpu)) <= ULPS_PER_STEP * EPS * scale * steps, key


@pytest.mark.slow
def test_ensemble_without_gpu(monkeypatch):
    """Without a GPU: backend "cuda" stops with one line; "auto" runs the CPU ensemble and says so in one line."""
    import hbvm_core as hc
    from hbvm_core.errors import BackendError
    from hbvm_core.kernels.cuda import cuda_available
    from hbvm_core.problems.parametric import conical_pendulum

    if cuda_available():
        pytest.skip("a GPU (or numba-cuda's simulator) is present")
    pb = conical_pendulum(length=1.5)
    with pytest.raises(BackendError, match="backend 'cuda': no GPU") as err:
        hc.integrate_ensemble(pb, hc.HBVM(2, 2), 0.1, 3, backend="cuda")
    assert "\n" not in str(err.value)
    monkeypatch.setattr("hbvm_core.ensemble.GPU_MIN_RUNS", 1)  # a block "auto" would try on the GPU
    res = hc.integrate_ensemble(pb, hc.HBVM(2, 2), 0.1, 3, backend="auto")
    assert res.backend == "numba" and "no GPU" in res.backend_note and "\n" not in res.backend_note
    assert np.all(res.status == 0)


# --------------------------------------------------------------------------- a real GPU
@pytest.mark.gpu
@pytest.mark.slow
def test_gpu_matches_compiled_loop(on_gpu):
    """1000 runs x 200 steps of the conical pendulum, HBVM(2,2), on the GPU against the CPU loop, and at round-off;
    integrate_ensemble(backend="cuda") there."""
    _agree(on_gpu, "conical", sweeps_per_step=1)  # FMA contraction may move d across the stopping threshold
    _conserves(on_gpu, "conical")
    assert str(on_gpu["ensemble/cuda_backend"]) == "cuda"
    for key in ("t", "q", "p"):
        gpu, cpu = on_gpu[f"ensemble/cuda_{key}"], on_gpu[f"ensemble/numba_{key}"]
        scale = max(1.0, float(np.nanmax(np.abs(cpu))))
        assert np.nanmax(np.abs(gpu - cpu)) <= ULPS_PER_STEP * EPS * scale * int(on_gpu["ensemble/N"].max()), key
