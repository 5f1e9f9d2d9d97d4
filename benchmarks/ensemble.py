"""Cost per run-step of the ensemble kernel against the scalar compiled loop, same problem and method.

    python -m benchmarks.ensemble [--json] [--quick] [--runs R] [--steps N]

Cases: HBVM(2,2) on the conical pendulum at h = T/100 and HBVM(6,2) on the
tethered satellites at h = 0.1 (fixed point), and the conical pendulum again
with many short runs (20 steps: a sweep's runs, where what is paid per run
shows), R runs of N steps each, the runs
differing in h (by up to 0.1%), only the initial and final points kept
(``sample_every = N``). Rows, each in us per run-step (wall, and thread CPU):

- ``ensemble-1-thread``: ``hbvm_core.integrate_ensemble`` with ``threads=1``
  (one compiled call for the block, the host's H/g summary included): the runs
  in lockstep blocks where the loop has one (``kernels/lanes.py``: fixed-point
  HBVM, M = I), else run by run inside the block;
- ``per-run-block-1-thread``: the same with the lockstep blocks turned off
  (``HBVM_LANES=0``): each run's whole time loop in turn inside the block;
- ``ensemble-all-cores``: the same with numba's default threads;
- ``integrate-per-run``: ``hbvm_core.integrate(..., backend="numba")`` run by run
  (what a sweep pays per run in Python today, without storage);
- ``run_chunk-per-run``: the compiled ``run_chunk`` called from Python run by
  run with preallocated buffers (the Python per run is a call and a few arrays);
- ``run_chunk-one-run``: one run of R N steps in one ``run_chunk`` call: the
  scalar loop's own step cost, the anchor of the ratio.

CPU is the process's CPU time (every thread: for ``ensemble-all-cores`` the sum
over the cores). The ratio column is the row's CPU time over
``run_chunk-one-run``'s (the ensemble's aim: a third or less on one core); the
wall ratio says what all cores buy. The compile (or load from the disk cache)
happens in an untimed first call; each row is the best of ``--repeats``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from functools import partial

import numpy as np

import hbvm_core as hc
from hbvm_core.kernels.ensemble import saved_points

from . import _common
from ._common import NullSink, machine


def best_of(fn, repeats: int) -> tuple[float, float]:
    """(min wall seconds, min process-CPU seconds, every thread) of ``repeats`` calls of fn()."""
    return _common.best_of(fn, repeats, clock=time.process_time)


def cases(quick: bool, runs: int | None, steps: int | None) -> list[dict]:
    conical = hc.get_problem("conical_pendulum")
    scale = 10 if quick else 1
    return [
        {"problem": "conical_pendulum", "k": 2, "s": 2, "h": conical.period / 100,
         "runs": runs or 2000 // scale, "steps": steps or 1000},
        {"problem": "tethered_satellites", "k": 6, "s": 2, "h": 0.1,
         "runs": runs or 200 // scale, "steps": steps or 500},
        {"problem": "conical_pendulum", "k": 2, "s": 2, "h": conical.period / 100,
         "runs": runs or 20000 // scale, "steps": steps or 20},
    ]  # fmt: skip


def per_run_chunk(runner, pb, method, hs, N) -> None:
    """Every run by the compiled run_chunk from Python (one call per run, its buffers preallocated)."""
    m, nu, s = pb.m, pb.nu, runner.guess_rows(method)
    cap = int(saved_points(N, N))
    pts = (np.empty(cap), np.empty((cap, m)), np.empty((cap, m)))
    stp = (np.empty(cap), np.empty((cap, nu)), np.empty(cap, dtype=np.int32))
    info = np.zeros(4)
    for h in hs:
        q, p, cq, cp = pb.q0.copy(), pb.p0.copy(), np.zeros(m), np.zeros(m)
        state = np.array([0, 0, 1, 0, 0, 0, 1], dtype=np.int64)
        args = runner.loop_arguments(pb, q, p, cq, cp, np.zeros((s, m)), state, float(h), int(N), int(N))
        status = runner.module.run_chunk(*args, *pts, *stp, info, *runner.tail_arguments(pb))
        assert status == 0 and state[0] == N


def ensemble(pb, method, hs, N, threads) -> None:
    """The block by one compiled call."""
    result = hc.integrate_ensemble(pb, method, hs, N, threads=threads)
    assert np.all(result.status == 0)


def per_run_block(pb, method, hs, N, threads) -> None:
    """The block by one compiled call, each run's time loop in turn (no lockstep: HBVM_LANES=0)."""
    previous = os.environ.get("HBVM_LANES")
    os.environ["HBVM_LANES"] = "0"
    try:
        ensemble(pb, method, hs, N, threads)
    finally:
        if previous is None:
            del os.environ["HBVM_LANES"]
        else:
            os.environ["HBVM_LANES"] = previous


def integrate_per_run(pb, method, hs, N) -> None:
    """Every run by hbvm_core.integrate (the compiled loop), its points dropped."""
    for h in hs:
        hc.integrate(pb, method, float(h), float(h) * N, save_every=N, sink=NullSink(), backend="numba")


def measure_case(case: dict, repeats: int) -> list[dict]:
    pb = hc.get_problem(case["problem"])
    method = hc.HBVM(case["k"], case["s"])
    R, N = case["runs"], case["steps"]
    hs = case["h"] * (1.0 + 1e-3 * np.arange(R) / R)
    runner = method.compiled_runner(pb)
    timed = {
        "ensemble-1-thread": partial(ensemble, pb, method, hs, N, 1),
        "ensemble-all-cores": partial(ensemble, pb, method, hs, N, None),
        "per-run-block-1-thread": partial(per_run_block, pb, method, hs, N, 1),
        "integrate-per-run": partial(integrate_per_run, pb, method, hs, N),
        "run_chunk-per-run": partial(per_run_chunk, runner, pb, method, hs, N),
        "run_chunk-one-run": partial(per_run_chunk, runner, pb, method, hs[:1], R * N),
    }
    ensemble(pb, method, hs, 2, 1)  # compile (or load) the block loops and the scalar loop, untimed
    per_run_block(pb, method, hs[:2], 2, 1)
    hc.integrate(pb, method, hs[0], hs[0], backend="numba")
    measured = {name: best_of(fn, repeats) for name, fn in timed.items()}
    anchor_wall, anchor = measured["run_chunk-one-run"]
    rows = []
    for name, (wall, cpu) in measured.items():
        rows.append({
            "problem": case["problem"], "k": case["k"], "s": case["s"], "h": case["h"], "runs": R, "steps": N,
            "implementation": name, "us_per_run_step": 1e6 * wall / (R * N), "cpu_us_per_run_step": 1e6 * cpu / (R * N),
            "ratio_to_scalar_cpu": cpu / anchor, "ratio_to_scalar_wall": wall / anchor_wall,
        })  # fmt: skip
    return rows


def measure(quick: bool = False, runs: int | None = None, steps: int | None = None, repeats: int = 3) -> list[dict]:
    return [row for case in cases(quick, runs, steps) for row in measure_case(case, repeats)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print a JSON list")
    ap.add_argument("--quick", action="store_true", help="10x fewer runs")
    ap.add_argument("--runs", type=int, default=None, help="runs of every case (default 2000, 200, 20000)")
    ap.add_argument("--steps", type=int, default=None, help="steps of every run (default 1000, 500, 20)")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    rows = measure(args.quick, args.runs, args.steps, args.repeats)
    if args.json:
        print(json.dumps(rows, indent=1))
        print(json.dumps({"machine": machine()}), file=sys.stderr)
        return 0
    print(f"machine: {machine()}")
    print(f"{'problem':20s} {'HBVM':6s} {'runs':>6s} {'steps':>6s} {'implementation':20s} "
          f"{'us/run-step':>11s} {'cpu us':>8s} {'cpu ratio':>9s} {'wall ratio':>10s}")  # fmt: skip
    for r in rows:
        print(
            f"{r['problem']:20s} ({r['k']},{r['s']})  {r['runs']:6d} {r['steps']:6d} {r['implementation']:20s} "
            f"{r['us_per_run_step']:11.3f} {r['cpu_us_per_run_step']:8.3f} {r['ratio_to_scalar_cpu']:9.2f} "
            f"{r['ratio_to_scalar_wall']:10.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
