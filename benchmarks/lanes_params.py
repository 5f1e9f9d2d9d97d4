"""Sweeps over a problem's params: lockstep blocks whose lanes differ in params (and M) against the scalar loop.

    NUMBA_NUM_THREADS=1 python -m benchmarks.lanes_params [--json] [--quick] [--repeats 3] [--solver blended]
        [--method rattle|polynomial]

Cases, each R runs of N steps given as arrays over the runs (``integrate_ensemble(problem, ..., params=...)``),
every run its own params row, first and last points kept:

- the conical pendulum over a grid of lengths (q0, g) and gravities (U), HBVM(2,2), h = 0.05;
- the researcher's formula problem (``benchmarks.researcher_sweep.PROBLEM``: two masses on rods in space, m = 6,
  nu = 3, M = diag(m1, m1, m1, m2, m2, m2) != I) over a grid of l1 (q0, g) and grav (U), HBVM(4,2), h = 0.01.

Rows, in us per run-step (process CPU time: the machine may be loaded): ``lockstep-1-thread``
(``integrate_ensemble`` with one thread, the host's H/g summary included), ``per-run-block-1-thread`` (the same
with ``HBVM_LANES=0``), ``run_chunk-one-run`` (the middle grid point's scalar loop, R N steps in one compiled
call: the anchor of the ratio). The compile (or load) happens in an untimed first call; each row is the best of
``--repeats``. ``--solver blended``: the same cases with HBVM's blended solver (simplified Newton), whose lockstep
blocks solve the bordered system (B2) in each lane. ``--method rattle``: the same cases by RATTLE (its lockstep
blocks: ``kernels/rattle_lanes.py``), ``--method polynomial`` by the polynomial-multiplier HBVM(k, s)
(``kernels/polynomial_lanes.py``); ``--solver`` does not apply to them. The first lockstep call's compile (or load)
of the lockstep module is reported (``lockstep_compile_s``, from ``registry.LOOP_TIMES``; "loaded" where numba's
cache had it: ``HBVM_KERNEL_CACHE=<empty folder>`` compiles afresh).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from functools import partial

import numpy as np

import hbvm_core as hc
from hbvm_core.problems.family import family_of

from ._common import machine
from .ensemble import best_of, per_run_chunk
from .researcher_sweep import PROBLEM


def cases(quick: bool, solver: str = "fixed-point", method: str = "hbvm") -> list[dict]:
    """(name, problem, method, h, params arrays, N) of each case (``method`` "rattle": RATTLE in both,
    "polynomial": the polynomial-multiplier HBVM(k, s))."""
    from hbvm_core.expressions import factory
    from hbvm_core.methods.polynomial import PolynomialHBVM
    from hbvm_core.methods.rattle import RATTLE

    def hbvm(k: int, s: int):
        if method == "polynomial":
            return PolynomialHBVM(k, s)
        return RATTLE() if method == "rattle" else hc.HBVM(k, s, solver=solver)

    scale = 4 if quick else 1
    lengths, gravities = np.meshgrid(np.linspace(0.5, 2.0, 50 // scale), np.linspace(0.5, 2.0, 40 // scale))
    l1, grav = np.meshgrid(np.linspace(0.5, 1.5, 25 // scale), np.linspace(5.0, 15.0, 20 // scale))
    return [
        {"name": "conical_pendulum over length x gravity", "problem": hc.get_problem("conical_pendulum"),
         "method": hbvm(2, 2), "h": 0.05,
         "params": {"length": lengths.ravel(), "gravity": gravities.ravel()}, "steps": 1000},
        {"name": "rods_in_space (M != I) over l1 x grav", "problem": factory(PROBLEM)(),
         "method": hbvm(4, 2), "h": 0.01, "params": {"l1": l1.ravel(), "grav": grav.ravel()},
         "steps": 500},
    ]  # fmt: skip


def ensemble(case: dict, N: int, lanes: bool) -> None:
    """The case's runs by one ``integrate_ensemble`` call on one thread (lockstep off where ``lanes`` is False)."""
    previous = os.environ.get("HBVM_LANES")
    os.environ["HBVM_LANES"] = "1" if lanes else "0"
    try:
        res = hc.integrate_ensemble(
            case["problem"], case["method"], case["h"], N, params=case["params"], sample_every=N, threads=1
        )
    finally:
        os.environ.pop("HBVM_LANES") if previous is None else os.environ.__setitem__("HBVM_LANES", previous)
    assert np.all(res.status == 0), res
    case["note"] = res.backend_note if lanes else case.get("note", "")


def measure_case(case: dict, repeats: int) -> list[dict]:
    R = next(iter(case["params"].values())).size
    N = case["steps"]
    middle = {key: float(np.median(val)) for key, val in case["params"].items()}
    one = family_of(case["problem"]).build(**middle)
    runner = case["method"].compiled_runner(one)
    hs = np.array([case["h"]])
    timed = {
        "lockstep-1-thread": partial(ensemble, case, N, True),
        "per-run-block-1-thread": partial(ensemble, case, N, False),
        "run_chunk-one-run": partial(per_run_chunk, runner, one, case["method"], hs, R * N),
    }
    from hbvm_core.kernels.registry import LOOP_TIMES

    since = len(LOOP_TIMES)
    ensemble(case, 2, True)  # compile (or load) the loops, untimed
    block = [t for t in LOOP_TIMES[since:] if t.loop == "lane_block"]
    compile_s = sum(t.seconds for t in block)
    how = "loaded" if block and all(t.cached for t in block) else "compiled"
    ensemble(case, 2, False)
    per_run_chunk(runner, one, case["method"], hs, 2)
    measured = {name: best_of(fn, repeats) for name, fn in timed.items()}
    anchor = measured["run_chunk-one-run"][1]
    return [
        {"case": case["name"], "runs": R, "steps": N, "implementation": name,
         "cpu_us_per_run_step": 1e6 * cpu / (R * N), "wall_us_per_run_step": 1e6 * wall / (R * N),
         "ratio_to_scalar_cpu": cpu / anchor,
         "note": case["note"] if name.startswith("lockstep") else "",
         "lockstep_compile_s": compile_s if name.startswith("lockstep") else None, "lockstep_module": how}
        for name, (wall, cpu) in measured.items()
    ]  # fmt: skip


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print a JSON list")
    ap.add_argument("--quick", action="store_true", help="about 16x fewer runs")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--solver", choices=("fixed-point", "blended"), default="fixed-point", help="HBVM's solver")
    ap.add_argument("--method", choices=("hbvm", "rattle", "polynomial"), default="hbvm", help="the method")
    args = ap.parse_args(argv)
    rows = [row for case in cases(args.quick, args.solver, args.method) for row in measure_case(case, args.repeats)]
    if args.json:
        print(json.dumps({"machine": machine(), "load": os.getloadavg(), "rows": rows}, indent=1))
        return 0
    what = args.solver if args.method == "hbvm" else args.method
    print(f"machine: {machine()}; numba threads {os.environ.get('NUMBA_NUM_THREADS', 'default')}; {what}")
    for r in rows:
        print(
            f"{r['case']:40s} {r['runs']:5d} x {r['steps']:5d} {r['implementation']:24s} "
            f"cpu {r['cpu_us_per_run_step']:7.3f} us/run-step, {r['ratio_to_scalar_cpu']:5.2f}x the scalar loop"
            + (f"  [{r['note']}]" if r["note"] else "")
            + (f"  [module {r['lockstep_module']}: {r['lockstep_compile_s']:.1f} s]" if r["lockstep_compile_s"] else "")
        )
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
