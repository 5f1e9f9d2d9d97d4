"""Fixed point against blended (simplified Newton): iterations per step, and the largest step that converges.

    python -m benchmarks.solvers [--json]

HBVM(2,2) on the planar pendulum and HBVM(6,2) on the tethered satellites on
[0, 10] (the intervals of table1 and table4), compiled path, default stopping
rule (round-off, at most 100 iterations a step). For h = 10 / N,
N = 100, 50, 40, 20, 10, 8, 5, 4, 3, 2, 1, a run either completes -- mean
iterations per step reported -- or stops with a ConvergenceError (the step
that failed reported). ``max_h`` is the largest h below which every h of the
scan converged.
"""

from __future__ import annotations

import argparse
import json
import sys

import hbvm_core as hc
from hbvm_core.errors import ConvergenceError, NonFiniteError

from ._common import NullSink, machine

DIVISIONS = [100, 50, 40, 20, 10, 8, 5, 4, 3, 2, 1]
CASES = [("planar_pendulum", 2, 2), ("tethered_satellites", 6, 2)]
T_END = 10.0


def scan(problem: str, k: int, s: int, solver: str) -> dict:
    pb = hc.get_problem(problem)
    runs = []
    for n in DIVISIONS:
        h = T_END / n
        try:
            traj = hc.integrate(pb, hc.HBVM(k, s, solver=solver), h, T_END, sink=NullSink())
            runs.append({"h": h, "converged": True, "mean_iterations": traj.attrs["mean_iterations"]})
        except (ConvergenceError, NonFiniteError) as exc:
            runs.append({"h": h, "converged": False, "failed_step": getattr(exc, "step", None), "error": str(exc)})
    max_h = None
    for run in runs:
        if not run["converged"]:
            break
        max_h = run["h"]
    at_01 = next(r for r in runs if abs(r["h"] - 0.1) < 1e-12)
    return {
        "problem": problem,
        "k": k,
        "s": s,
        "solver": solver,
        "t_end": T_END,
        "mean_iterations_h0.1": at_01.get("mean_iterations"),
        "max_h": max_h,
        "first_failure_h": next((r["h"] for r in runs if not r["converged"]), None),
        "runs": runs,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rows = [scan(p, k, s, solver) for p, k, s in CASES for solver in ("fixed-point", "blended")]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"machine: {machine()}")
    for r in rows:
        first = r["first_failure_h"]
        print(
            f"{r['problem']:20s} HBVM({r['k']},{r['s']}) {r['solver']:12s} iterations at h = 0.1: "
            f"{r['mean_iterations_h0.1']:.2f}   converges up to h = {r['max_h']:.4g}"
            + (f", fails at h = {first:.4g}" if first else " (every h of the scan)")
        )
        print("    " + ", ".join(f"{x['h']:.3g}:{x['mean_iterations']:.1f}" if x["converged"] else f"{x['h']:.3g}:FAIL"
                                  for x in r["runs"]))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
