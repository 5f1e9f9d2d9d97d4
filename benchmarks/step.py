"""Cost of one HBVM(k, s) step: the compiled (numba) path, the numpy path, and a plain C reference.

    python -m benchmarks.step [--json] [--quick] [--no-c]

Cases: HBVM(2,2) on the conical pendulum at h = T/100 and HBVM(6,2) on the
tethered satellites at h = 0.1, each with the fixed-point and the blended
solver. Prints a JSON list (one object per case and implementation: problem,
k, s, h, steps, solver, implementation, us_per_step, cpu_us_per_step,
mean_iterations) with --json, else a table. us_per_step is the best of several
runs' wall time over the steps (cpu_us_per_step: thread CPU time, less
sensitive to a busy machine); the chunks go to a sink that keeps nothing, so
this is the step and the time loop without storage. The compile (or load from
the disk cache) happens in an untimed first run. "c" is
benchmarks/c_reference/hbvm_fp.c (fixed point only) built with the system C
compiler (-O2, k and s run-time values, as in the kernel); "c-specialised" the
same source with k, s fixed at compile time and -O3 -march=native.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import hbvm_core as hc

from ._common import NullSink, best_of, machine

C_SOURCE = Path(__file__).with_name("c_reference") / "hbvm_fp.c"
C_DEFINES = {"conical_pendulum": "CONICAL", "tethered_satellites": "TETHERED"}


def cases(quick: bool) -> list[dict]:
    conical = hc.get_problem("conical_pendulum")
    scale = 10 if quick else 1
    return [
        {"problem": "conical_pendulum", "k": 2, "s": 2, "h": conical.period / 100, "steps": 1_000_000 // scale},
        {"problem": "tethered_satellites", "k": 6, "s": 2, "h": 0.1, "steps": 200_000 // scale},
    ]


def run_python(case: dict, solver: str, backend: str, steps: int, repeats: int) -> dict:
    pb = hc.get_problem(case["problem"])
    method = hc.HBVM(case["k"], case["s"], solver=solver)
    h = case["h"]
    t0 = time.perf_counter()
    hc.integrate(pb, method, h, h, sink=NullSink(), backend=backend)  # compile or load from the cache
    first = time.perf_counter() - t0
    out = {}

    def once():
        out["traj"] = hc.integrate(pb, method, h, steps * h, sink=NullSink(), backend=backend)

    wall, cpu = best_of(once, repeats)
    attrs = out["traj"].attrs
    assert attrs["backend"] == backend
    return {
        **case,
        "steps": steps,
        "solver": solver,
        "implementation": backend,
        "us_per_step": 1e6 * wall / steps,
        "cpu_us_per_step": 1e6 * cpu / steps,
        "mean_iterations": attrs["mean_iterations"],
        "first_call_s": first,
    }


C_BUILDS = {
    "c": ["-O2"],  # plain: k, s run-time arguments, as in the compiled kernel
    "c-specialised": ["-O3", "-march=native", "-DKK={k}", "-DSS={s}"],  # k, s compile-time, tuned for this CPU
}


def run_c(case: dict, steps: int, repeats: int, workdir: Path, build: str = "c") -> dict | None:
    """The C reference of the same fixed-point loop (same warm start, stopping rule, Kahan update, stores q, p)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None or case["problem"] not in C_DEFINES:
        return None
    exe = workdir / f"hbvm_fp_{case['problem']}_{build}"
    flags = [f.format(k=case["k"], s=case["s"]) for f in C_BUILDS[build]]
    subprocess.run([cc, *flags, f"-D{C_DEFINES[case['problem']]}", "-o", str(exe), str(C_SOURCE), "-lm"], check=True)
    tab = hc.tableau(case["k"], case["s"])
    table = workdir / f"tableau_{case['k']}_{case['s']}.txt"
    table.write_text("\n".join(" ".join(repr(float(x)) for x in a.ravel()) for a in (tab.Ihat, tab.W, tab.X, tab.E)))
    best = None
    for _ in range(repeats):
        w0 = time.perf_counter()
        res = subprocess.run(
            [str(exe), str(case["k"]), str(case["s"]), repr(case["h"]), str(steps), str(table)],
            capture_output=True,
            text=True,
            check=True,
        )
        wall = time.perf_counter() - w0
        cpu_us, iters, _ = res.stdout.split()
        row = {"us": 1e6 * wall / steps, "cpu": float(cpu_us), "iters": float(iters)}
        best = row if best is None or row["cpu"] < best["cpu"] else best
    return {
        **case,
        "steps": steps,
        "solver": "fixed-point",
        "implementation": build,
        "us_per_step": best["us"],
        "cpu_us_per_step": best["cpu"],
        "mean_iterations": best["iters"],
    }


def measure(quick: bool = False, with_c: bool = True, repeats: int = 3) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases(quick):
            for solver in ("fixed-point", "blended"):
                rows.append(run_python(case, solver, "numba", case["steps"], repeats))
                rows.append(run_python(case, solver, "numpy", max(200, case["steps"] // 500), 1))
            for build in C_BUILDS if with_c else ():
                row = run_c(case, case["steps"], repeats, Path(tmp), build)
                if row:
                    rows.append(row)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print a JSON list")
    ap.add_argument("--quick", action="store_true", help="10x fewer steps")
    ap.add_argument("--no-c", action="store_true", help="skip the C reference")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    rows = measure(args.quick, not args.no_c, args.repeats)
    if args.json:
        print(json.dumps(rows, indent=1))
        print(json.dumps({"machine": machine()}), file=sys.stderr)
        return 0
    print(f"machine: {machine()}")
    print(f"{'problem':22s} {'k':>2s} {'s':>2s} {'h':>8s} {'steps':>8s} {'solver':12s} {'impl':13s} "
          f"{'us/step':>9s} {'cpu us':>9s} {'iters':>6s}")  # fmt: skip
    for r in rows:
        print(
            f"{r['problem']:22s} {r['k']:2d} {r['s']:2d} {r['h']:8.5f} {r['steps']:8d} {r['solver']:12s} "
            f"{r['implementation']:13s} {r['us_per_step']:9.3f} {r['cpu_us_per_step']:9.3f} {r['mean_iterations']:6.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
