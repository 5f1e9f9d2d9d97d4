"""Ensembles on a GPU: run-steps per second of the GPU block call against the CPU ensemble of the same machine.

    python -m benchmarks.gpu [--runs 1000 10000 ...] [--steps 1000] [--cases conical tethered] [--cpu-runs R]
                             [--threads 128] [--max-registers 0 128 ...] [--json]
    python -m benchmarks.gpu --ptx [--cases ...]

Cases: HBVM(2,2) on the conical pendulum at h = T/100 and HBVM(6,2) on the
tethered satellites at h = 0.1 (both fixed point, as ``benchmarks.step``), an
initial-condition scan: run r starts from p0 scaled by 1 + 0.1 r / R (still
tangent to the constraints), ``--steps`` steps each, only the initial and the
final point saved. For each number of runs (default 10^3 .. 4 10^6): the
kernel's time (``kernels.cuda.run_block_cuda``'s ``timings``: the launch to
its end, synchronised; the module's build and numba-cuda's compile are paid in
an untimed first call, the transfers are reported apart), run-steps per second
and ns per run-step; max |H - H0| and max |g| over the runs' final points.
The CPU ensemble (``integrate_ensemble(backend="numba")`` on all cores, the same
problem and method, ``--cpu-runs`` runs; where that API is missing, the
per-run compiled loop on one core times the cores, marked as an estimate) is
timed in the same run; the speed-up is the ratio of the run-step rates.

Without a GPU (or under numba-cuda's simulator) it stops with one line.
``--ptx`` needs no GPU, only NVVM (``pip install numba-cuda[cu12]``): it
compiles each case's kernel (both solvers) to PTX for sm_90 and prints its size and the
registers, stack and spills of a thread (by ``ptxas -v``, where ``$PTXAS`` or the PATH has
one: ``pip install nvidia-cuda-nvcc``). ``--max-registers`` caps a thread's registers (0: no cap): more
threads per SM against spills.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

import hbvm_core as hc
from hbvm_core.methods import HBVM, RATTLE, PolynomialHBVM

from ._common import machine

RUNS = (1_000, 10_000, 100_000, 1_000_000, 4_000_000)


def cases() -> dict:
    """case -> (problem, method, h)."""
    conical = hc.get_problem("conical_pendulum")
    return {
        "conical": (conical, HBVM(2, 2), conical.period / 100),
        "tethered": (hc.get_problem("tethered_satellites"), HBVM(6, 2), 0.1),
    }


def scan(problem, R: int) -> tuple[np.ndarray, np.ndarray]:
    """q0 [R, m], p0 [R, m]: the problem's q0, and its p0 scaled by 1 + 0.1 r / R."""
    scale = 1.0 + 0.1 * np.arange(R) / max(R, 1)
    return np.broadcast_to(problem.q0, (R, problem.m)).copy(), scale[:, None] * problem.p0[None, :]


def block_inputs(problem, method, runner, R: int, h: float, steps: int) -> dict:
    """The block call's inputs of the scan (run axis first)."""
    from hbvm_core.blended import initial_multiplier
    from hbvm_core.kernels.driver import cholesky_factor
    from hbvm_core.kernels.ensemble import shared_arguments

    q0, p0 = scan(problem, R)
    lam0 = initial_multiplier(problem) if getattr(runner, "solver", 0) else np.zeros(problem.nu)
    L = cholesky_factor(problem)
    return {
        "q0": q0,
        "p0": p0,
        "h": np.full(R, h),
        "N": np.full(R, steps, dtype=np.int64),
        "sample_every": np.full(R, steps, dtype=np.int64),
        "params": np.broadcast_to(runner.params, (R, runner.params.size)),
        "lam0": np.broadcast_to(lam0, (R, problem.nu)),
        "L": np.broadcast_to(L, (R, *L.shape)),
        "compensated": True,
        "gamma_rows": runner.guess_rows(method),
        "shared": shared_arguments(runner, problem),
    }


def gpu_row(case: str, problem, method, h: float, R: int, steps: int, threads: int, regs: int | None = None) -> dict:
    """The GPU block call of R runs x steps: kernel time, transfers, rates and the runs' errors."""
    from hbvm_core.kernels.cuda import run_block_cuda

    runner = method.compiled_runner(problem)
    inputs = block_inputs(problem, method, runner, R, h, steps)
    timings: dict = {}
    out = run_block_cuda(runner, inputs, threads=threads, max_registers=regs, timings=timings)
    ok = out["status"] == 0
    last = out["n_saved"] - 1
    rows = np.arange(R)
    q, p = out["q"][rows, last], out["p"][rows, last]
    H0 = problem.hamiltonian(inputs["q0"], inputs["p0"])
    H = problem.hamiltonian(q, p)
    g = np.abs(problem.g(q)) if problem.nu else np.zeros((R, 1))
    run_steps = float(np.sum(out["steps"]))
    return {
        "case": case, "method": method.label(), "runs": R, "steps": steps, "threads": threads,
        "max_registers": regs, "failed": int(np.sum(~ok)),
        "kernel_s": timings["kernel"], "to_device_s": timings["to_device"], "to_host_s": timings["to_host"],
        "run_steps_per_s": run_steps / timings["kernel"], "ns_per_run_step": 1e9 * timings["kernel"] / run_steps,
        "max_H_error": float(np.max(np.abs(H - H0)[ok])) if ok.any() else float("nan"),
        "max_g_error": float(np.max(g[ok])) if ok.any() else float("nan"),
    }  # fmt: skip


def cpu_row(case: str, problem, method, h: float, R: int, steps: int) -> dict:
    """The CPU ensemble on all cores (integrate_ensemble, backend numba), untimed once first (its compile)."""
    q0, p0 = scan(problem, R)
    try:
        from hbvm_core.ensemble import integrate_ensemble
    except ImportError:
        integrate_ensemble = None
    if integrate_ensemble is not None:
        integrate_ensemble(problem, method, h, 2, q0=q0[:2], p0=p0[:2], backend="numba")
        t0 = time.perf_counter()
        res = integrate_ensemble(problem, method, h, steps, q0=q0, p0=p0, backend="numba")
        wall = time.perf_counter() - t0
        run_steps, how = float(np.sum(res.steps)), "integrate_ensemble(backend='numba'), all cores"
    else:  # the per-run compiled loop on one core, times the cores: an estimate of the ensemble
        from dataclasses import replace

        R = min(R, 200)
        hc.integrate(problem, method, h, 2 * h, backend="numba")
        t0 = time.perf_counter()
        for r in range(R):
            hc.integrate(replace(problem, p0=p0[r]), method, h, steps * h, save_every=steps, backend="numba")
        wall = (time.perf_counter() - t0) / (os.cpu_count() or 1)
        run_steps, how = float(R * steps), "per-run loop on one core / cores (estimate)"
    return {
        "case": case, "method": method.label(), "runs": R, "steps": steps, "cpu": how, "wall_s": wall,
        "run_steps_per_s": run_steps / wall, "ns_per_run_step": 1e9 * wall / run_steps,
    }  # fmt: skip


def ptx_methods(case: str) -> list:
    """The methods whose kernels ``--ptx`` compiles for a case: HBVM with both solvers, and for the conical
    pendulum the polynomial multiplier and RATTLE."""
    k, s = (2, 2) if case == "conical" else (6, 2)
    extra = [PolynomialHBVM(3, 2), RATTLE()] if case == "conical" else []
    return [HBVM(k, s), HBVM(k, s, solver="blended"), *extra]


def ptx(names: list[str]) -> list[dict]:
    """Each case's kernels compiled to PTX for sm_90 (no GPU needed; NVVM is): their size, and where ``ptxas``
    is found (``$PTXAS``, the PATH), the registers, stack and spills of a thread (``ptxas -v``)."""
    import re
    import shutil
    import subprocess
    import tempfile

    import numba.cuda.dispatcher as dispatcher
    from numba import cuda

    from hbvm_core.kernels.cuda import kernel_signature

    class _Target:  # the device functions compile for the current device's cc: sm_90 here, no GPU
        compute_capability = (9, 0)

    dispatcher.get_current_device = lambda: _Target()
    ptxas = os.environ.get("PTXAS") or shutil.which("ptxas")
    rows = []
    for case, (problem, _, h) in cases().items():
        if case not in names:
            continue
        for method in ptx_methods(case):
            runner = method.compiled_runner(problem)
            func, sig = kernel_signature(runner, block_inputs(problem, method, runner, 4, h, 10))
            t0 = time.perf_counter()
            text, _ = cuda.compile_ptx(func, sig, cc=(9, 0))
            row = {"case": case, "method": method.label(), "ptx_bytes": len(text),
                   "compile_s": round(time.perf_counter() - t0, 1)}  # fmt: skip
            if ptxas:
                with tempfile.TemporaryDirectory() as tmp:
                    src = os.path.join(tmp, "k.ptx")
                    with open(src, "w") as fh:
                        fh.write(text)
                    cmd = [ptxas, "-arch=sm_90", "-O3", "-v", src, "-o", os.path.join(tmp, "k.cubin")]
                    report = subprocess.run(cmd, capture_output=True, text=True).stderr
                for key, pattern in (("registers", r"Used (\d+) registers"), ("stack_bytes", r"(\d+) bytes stack"),
                                     ("spill_store_bytes", r"(\d+) bytes spill stores")):  # fmt: skip
                    hit = re.search(pattern, report)
                    row[key] = int(hit.group(1)) if hit else None
            rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, nargs="+", default=list(RUNS))
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--cases", nargs="+", default=["conical", "tethered"], choices=["conical", "tethered"])
    parser.add_argument("--cpu-runs", type=int, default=20_000, help="runs of the CPU ensemble (its rate is per run)")
    parser.add_argument("--threads", type=int, default=128, help="threads per block")
    parser.add_argument("--max-registers", type=int, nargs="+", default=[0], help="register caps to try (0: none)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--ptx", action="store_true", help="compile the kernels to PTX (no GPU needed), then stop")
    args = parser.parse_args(argv)
    if args.ptx:
        rows = ptx(args.cases)
        print(json.dumps(rows, indent=1) if args.json else "\n".join(map(str, rows)))
        return 0
    from hbvm_core.kernels.cuda import cuda_available, device_name, simulated

    if not cuda_available() or simulated():
        print("benchmarks.gpu: no CUDA GPU here (numba-cuda sees none, or runs its simulator); nothing measured")
        return 2
    info = machine() | {"gpu": device_name()}
    rows = []
    for case, (problem, method, h) in cases().items():
        if case not in args.cases:
            continue
        gpu_row(case, problem, method, h, 64, 10, args.threads)  # untimed: the module's build and the compile
        cpu = cpu_row(case, problem, method, h, args.cpu_runs, args.steps)
        for regs in args.max_registers:
            gpu_row(case, problem, method, h, 64, 10, args.threads, regs or None)  # untimed: the capped compile
            for R in args.runs:
                row = gpu_row(case, problem, method, h, R, args.steps, args.threads, regs or None)
                row["speedup_vs_cpu"] = row["run_steps_per_s"] / cpu["run_steps_per_s"]
                rows.append(row)
        rows.append(cpu | {"backend": "cpu"})
    if args.json:
        print(json.dumps({"machine": info, "rows": rows}, indent=1))
        return 0
    print(" ".join(f"{k}={v}" for k, v in info.items()))
    for row in rows:
        if row.get("backend") == "cpu":
            print(f"{row['case']:9} {row['method']:10} CPU  {row['runs']:>8} runs: {row['run_steps_per_s']:.3e} "
                  f"run-steps/s, {row['ns_per_run_step']:.1f} ns/run-step ({row['cpu']})")  # fmt: skip
        else:
            print(f"{row['case']:9} {row['method']:10} GPU  {row['runs']:>8} runs (regs {row['max_registers']}): "
                  f"{row['run_steps_per_s']:.3e} "
                  f"run-steps/s, {row['ns_per_run_step']:.3f} ns/run-step, kernel {row['kernel_s']:.3f} s, "
                  f"transfers {row['to_device_s'] + row['to_host_s']:.3f} s, x{row['speedup_vs_cpu']:.0f} CPU, "
                  f"max|H-H0| {row['max_H_error']:.1e}, max|g| {row['max_g_error']:.1e}, "
                  f"failed {row['failed']}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
