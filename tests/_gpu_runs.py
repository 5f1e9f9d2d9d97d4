"""Blocks of runs by the GPU block call (``kernels.cuda.run_block_cuda``) and by the per-run compiled CPU loop.

Run as a script in its own process (``python tests/_gpu_runs.py OUT.npz [--cases a,b]``), because numba.cuda
reads ``NUMBA_ENABLE_CUDASIM`` when it is first imported: tests/verification/test_gpu.py runs it once with the
simulator, and, where a GPU is present, once on the GPU. Writes, per case, the GPU's outputs (``<case>/gpu_<key>``),
the CPU loop's saved points, last multiplier, iterations and failure step (``<case>/cpu_<key>``), and the energy and
constraint errors of the GPU's saved points by the problems' numpy callbacks.
"""

from __future__ import annotations

import sys
import time

import numpy as np

from hbvm_core import ConvergenceError, integrate
from hbvm_core.blended import initial_multiplier
from hbvm_core.kernels.cuda import device_name, run_block_cuda
from hbvm_core.kernels.driver import cholesky_factor
from hbvm_core.methods import HBVM, RATTLE, PolynomialHBVM
from hbvm_core.problems.parametric import conical_pendulum, planar_pendulum, tethered_satellites


def cases(device: bool) -> dict:
    """case -> (problems, method, h, N, sample_every): a few runs and steps (the simulator is Python); on a GPU,
    a block of 1000 runs. The last planar run's steps are too long for the fixed-point iteration: its step 3 fails
    (the per-run loop's ConvergenceError), with save_every 1 so that its points 0..3 are those of a 3-step run."""
    if device:
        R = 1000
        gravity = np.linspace(0.5, 2.0, R)
        return {
            "conical": (
                [conical_pendulum(gravity=g) for g in gravity],
                HBVM(2, 2),
                np.full(R, 0.05),
                np.full(R, 200),
                np.full(R, 7),
            ),
        }
    return {
        "conical": (
            [conical_pendulum(gravity=g) for g in (1.2, 1.5, 2.0, 0.7)],
            HBVM(2, 2, solver="blended"),
            np.array([0.1, 0.05, 0.2, 0.1]),
            np.array([12, 16, 8, 10]),
            np.array([1, 3, 1, 4]),
        ),
        "planar": (
            [planar_pendulum(theta_dot0=w, length=ell) for w, ell in ((0.5, 1.0), (1.2, 0.8), (0.9, 1.5), (1.9, 1.0))],
            HBVM(2, 2),
            np.array([0.1, 0.2, 0.05, 1.2]),
            np.array([10, 6, 12, 8]),
            np.array([1, 2, 5, 1]),
        ),
        "polynomial": (
            [conical_pendulum(length=ell) for ell in (1.5, 2.0, 0.8)],
            PolynomialHBVM(3, 2),
            np.array([0.1, 0.05, 0.1]),
            np.array([6, 9, 5]),
            np.array([1, 4, 2]),
        ),
        "rattle": (
            [planar_pendulum(theta_dot0=w, length=ell) for w, ell in ((0.5, 1.0), (1.2, 0.8), (0.9, 1.5))],
            RATTLE(),
            np.array([0.1, 0.05, 0.2]),
            np.array([12, 9, 7]),
            np.array([1, 4, 3]),
        ),
        "tethered": (
            [tethered_satellites(masses=ms) for ms in ((1.0, 1.1, 0.9), (1.2, 1.0, 0.8))],
            HBVM(6, 2),
            np.array([0.1, 0.2]),
            np.array([5, 4]),
            np.array([1, 2]),
        ),
    }


def block_inputs(runner, problems, method, h, N, sample_every) -> dict:
    """The block call's inputs (run axis first) for these problems, one run each."""
    from hbvm_core.kernels.ensemble import shared_arguments

    blended = getattr(method, "solver", None) == "blended"
    return {
        "q0": np.stack([p.q0 for p in problems]),
        "p0": np.stack([p.p0 for p in problems]),
        "h": h,
        "N": N,
        "sample_every": sample_every,
        "params": np.stack([np.array(p.kernels.params, dtype=float) for p in problems]),
        "lam0": np.stack([initial_multiplier(p) if blended else np.zeros(p.nu) for p in problems]),
        "L": np.stack([cholesky_factor(p) for p in problems]),
        "compensated": True,
        "gamma_rows": runner.guess_rows(method),
        "shared": shared_arguments(runner, problems[0]),
    }


def cpu_run(problem, method, h: float, N: int, every: int, S: int) -> dict:
    """The per-run compiled loop's saved points (NaN-padded to S rows), last multiplier, iterations, failure."""
    out = {"t": np.full(S, np.nan), "q": np.full((S, problem.m), np.nan), "p": np.full((S, problem.m), np.nan)}
    out |= {"lam": np.full(problem.nu, np.nan), "iterations": -1, "fail_step": -1, "lam_saved": False}
    try:
        tr = integrate(problem, method, h, N * h, save_every=every, backend="numba")
    except ConvergenceError as exc:
        out["fail_step"] = exc.step
        if exc.step > 0:  # the points before the failure: those of a run of exc.step steps
            tr = integrate(problem, method, h, exc.step * h, save_every=every, backend="numba")
            n = len(tr.t)
            out["t"][:n], out["q"][:n], out["p"][:n] = tr.t, tr.q, tr.p
        return out
    n = len(tr.t)
    out["t"][:n], out["q"][:n], out["p"][:n] = tr.t, tr.q, tr.p
    out["lam"], out["lam_saved"] = tr.lam[-1], (N - 1) % every == 0  # the step row of the last step is saved
    out["iterations"] = int(round(tr.attrs["mean_iterations"] * N))
    return out


ENSEMBLE_FIELDS = ("status", "fail_step", "steps", "iterations", "max_iterations", "n_saved", "t", "q", "p", "lam")
ENSEMBLE_FIELDS += ("H_error", "g_error")


def ensemble(arrays: dict) -> None:
    """``integrate_ensemble`` end to end with backend cuda and auto (here: the GPU or the simulator) and numba:
    two instances of the parametric conical pendulum, per-run h, N and sample_every, HBVM(2,2) fixed point."""
    import hbvm_core.ensemble
    from hbvm_core import integrate_ensemble

    hbvm_core.ensemble.GPU_MIN_RUNS = 1  # "auto" sends even these four runs to the GPU (its threshold: test_ensemble)
    problems = [conical_pendulum(length=1.5), conical_pendulum(length=2.0, gravity=1.3)]
    runs = [problems[0], problems[1], problems[0], problems[1]]
    h, N, every = np.array([0.05, 0.04, 0.1, 0.02]), np.array([12, 8, 7, 10]), np.array([3, 5, 1, 10])
    for backend in ("cuda", "auto", "numba"):
        res = integrate_ensemble(runs, HBVM(2, 2), h, N, sample_every=every, backend=backend)
        for key in ENSEMBLE_FIELDS:
            arrays[f"ensemble/{backend}_{key}"] = getattr(res, key)
        arrays[f"ensemble/{backend}_backend"] = np.array(res.backend)
        arrays[f"ensemble/{backend}_note"] = np.array(res.backend_note)
    arrays["ensemble/N"] = N


def main(path: str, only: list[str] | None) -> None:
    device = "--device" in sys.argv
    arrays: dict[str, np.ndarray] = {"device": np.array(device_name())}
    if not only or "ensemble" in only:
        ensemble(arrays)
    for case, (problems, method, h, N, every) in cases(device).items():
        if only and case not in only:
            continue
        runner = method.compiled_runner(problems[0])
        timings: dict = {}
        t0 = time.perf_counter()
        out = run_block_cuda(runner, block_inputs(runner, problems, method, h, N, every), timings=timings)
        arrays[f"{case}/wall_s"] = np.array(time.perf_counter() - t0)
        S = out["t"].shape[1]
        for key, val in out.items():
            arrays[f"{case}/gpu_{key}"] = val
        runs = [cpu_run(p, method, float(h[r]), int(N[r]), int(every[r]), S) for r, p in enumerate(problems)]
        for key in runs[0]:
            arrays[f"{case}/cpu_{key}"] = np.array([run[key] for run in runs])
        H_err, g_err, scale = [], [], []
        for r, p in enumerate(problems):
            n = int(out["n_saved"][r])
            q, pp = out["q"][r, :n], out["p"][r, :n]
            H = p.hamiltonian(q, pp)
            H_err.append(float(np.max(np.abs(H - H[0]))))
            g_err.append(float(np.max(np.abs(p.g(q)))))
            scale.append(float(max(1.0, np.max(np.abs(q)), np.max(np.abs(pp)), abs(H[0]))))
        arrays[f"{case}/H_error"], arrays[f"{case}/g_error"] = np.array(H_err), np.array(g_err)
        arrays[f"{case}/scale"], arrays[f"{case}/N"] = np.array(scale), N
    np.savez(path, **arrays)


if __name__ == "__main__":
    only = next((a.split("=", 1)[1].split(",") for a in sys.argv if a.startswith("--cases=")), None)
    main(sys.argv[1], only)
