"""Aggregation time of a 20-run ``errors.reference: reference`` study of a user problem.

    python -m benchmarks.reference [--json] [--form callbacks|expressions|both]

The bead on a circle (README: U = y, g = x^2 + y^2 - r^2) with no closed form given, so its errors are
measured against the index-reduced reference ODE (DOP853 at rtol 1e-13, ``hbvm_core.references``):
HBVM(2,2), (4,2), (6,2), (4,4) at h = 0.1 2^-n, n = 0..4, on [0, 20] (20 runs). ``callbacks``: the
problem as numpy callbacks (the README's form); ``expressions``: the same problem given as expressions.
The runs are solved first (untimed, numpy path for the callbacks, compiled for the expressions), then
``hbvm_workflow.tables.aggregate`` is timed (wall and this process's CPU time, the latter less sensitive to
a busy machine): reading the 20 stores and measuring their errors, which solves the reference ODE; the
aggregation includes importing xarray and pandas (about a second of CPU).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import numpy as np

from ._common import machine

METHODS = [{"k": 2, "s": 2}, {"k": 4, "s": 2}, {"k": 6, "s": 2}, {"k": 4, "s": 4}]
EXPRESSIONS = {
    "name": "bead_on_circle",
    "coordinates": ["x", "y"],
    "params": {"r": 1.0},
    "potential": "y",
    "constraints": ["x**2 + y**2 - r**2"],
    "q0": [0, "-r"],
    "p0": [1, 0],
}


def bead_on_circle(r: float = 1.0):
    """The README's user problem: numpy callbacks, no closed form."""
    from hbvm_core import Problem

    return Problem(
        name="bead_on_circle",
        q0=[0.0, -r],
        p0=[1.0, 0.0],
        U=lambda Q: Q[:, 1].copy(),
        grad_U=lambda Q: np.broadcast_to([0.0, 1.0], Q.shape).copy(),
        g=lambda Q: (np.einsum("nm,nm->n", Q, Q) - r * r)[:, None],
        G=lambda Q: 2.0 * Q[:, :, None],
        d2g=lambda Q, V: 2.0 * np.einsum("nm,nm->n", V, V)[:, None],
        params={"r": r},
    )


def study_time(form: str) -> dict:
    from hbvm_workflow.study import expand_study
    from hbvm_workflow.tables import aggregate
    from hbvm_workflow.worker import solve_job

    if form == "expressions":
        problem, params = dict(EXPRESSIONS), {}
    else:
        problem, params = "benchmarks.reference:bead_on_circle", {"r": 1.0}
    cfg = {
        "problem": problem,
        "params": params,
        "methods": METHODS,
        "t_end": 20.0,
        "h0": 0.1,
        "halvings": 4,
        "errors": {"reference": "reference"},
    }
    with tempfile.TemporaryDirectory() as tmp:
        study = expand_study("bench", cfg, results=os.path.join(tmp, "results"))
        t0, c0 = time.perf_counter(), time.process_time()
        for job in study.jobs.values():
            solve_job(job)
        solve_s, solve_cpu = time.perf_counter() - t0, time.process_time() - c0
        out = os.path.join(tmp, "out")
        os.makedirs(out)
        t0, c0 = time.perf_counter(), time.process_time()
        rows = aggregate(study, *(os.path.join(out, f) for f in ("e.zarr", "e.csv", "t.md", "t.tex")))
        aggregate_s, aggregate_cpu = time.perf_counter() - t0, time.process_time() - c0
    return {
        "benchmark": "reference_study",
        "form": form,
        "runs": len(study.jobs),
        "solve_s": round(solve_s, 2),
        "aggregate_s": round(aggregate_s, 2),
        "solve_cpu_s": round(solve_cpu, 2),
        "aggregate_cpu_s": round(aggregate_cpu, 2),
        "max_e_s": max(r["e_s"] for r in rows),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--form", choices=("callbacks", "expressions", "both"), default="both")
    args = parser.parse_args()
    forms = ("callbacks", "expressions") if args.form == "both" else (args.form,)
    results = [study_time(form) for form in forms]
    if args.json:
        print(json.dumps({"machine": machine(), "results": results}, indent=1))
        return
    for r in results:
        print(
            f"{r['form']:12s} {r['runs']} runs: solve {r['solve_s']:.2f} s (CPU {r['solve_cpu_s']:.2f} s), "
            f"aggregate {r['aggregate_s']:.2f} s (CPU {r['aggregate_cpu_s']:.2f} s)"
        )


if __name__ == "__main__":
    main()
