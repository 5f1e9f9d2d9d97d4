"""The aggregation of a ``save: summary`` sweep from its shards' partial results against from their states.

    python -m benchmarks.aggregation [--runs 1000000] [--repeats 2] [--keep DIR] [--json]

The sweep of ``benchmarks.sweep`` (the planar pendulum, HBVM(k,1) for k = 1..10, h = 1/n for n = 20..219,
2000-run blocks over theta_dot0, errors against the exact solution at t = 0 and 1: two saved points a run), solved
and aggregated once by ``snakemake results/sweep/errors.csv`` (untimed: its shard tasks write the partial results).
Then, in this process, ``ensemble_errors.compute_summary_errors`` (errors.zarr, errors.csv, timings.csv; 2 workers)
is timed ``--repeats`` times each way, alternated: from the partial results (``use_partials``: the coordinates,
``counts``, ``scalars`` and each shard's ``partial`` array read) and from the states (every shard's ``t`` and ``y``
read too); and the bytes of the files each way reads per shard. The two ways' e_s, e_hc agree (checked).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from ._common import REPO, machine
from .sweep import sweep_config


def _bytes(store: str, names: tuple[str, ...], slots: int) -> float:
    """Mean bytes per shard of the files of arrays ``names`` (``partial``: the shard's partial array's folder)."""
    total = 0
    for name in names:
        folder = os.path.join(store, name) if name != "partial" else None
        if folder is None:
            for slot in range(slots):
                sub = os.path.join(store, "shards", str(slot), "partial")
                total += sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(sub) for f in fs)
        else:
            total += sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(folder) for f in fs)
    return total / slots


def run(runs: int, repeats: int, keep: str | None = None) -> dict:
    from hbvm_workflow.ensemble_errors import compute_summary_errors, summary_columns
    from hbvm_workflow.loading import load_studies

    config = sweep_config(runs, "summary")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(keep) if keep else Path(tmp) / "work"
        work.mkdir(parents=True, exist_ok=True)
        (work / "sweep.json").write_text(json.dumps(config))
        cmd = [
            sys.executable, "-m", "snakemake", "results/sweep/errors.csv", "--cores", "2", "--quiet", "all",
            "--snakefile", str(REPO / "Snakefile"), "--directory", str(work), "--configfile", str(work / "sweep.json"),
        ]  # fmt: skip
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode:
            raise SystemExit(f"snakemake failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        solve = time.perf_counter() - t0
        (study,) = load_studies({**config, "results": str(work / "results")}).values()
        store = str(work / "results" / "sweep" / "runs.zarr")
        out = work / "bench"
        out.mkdir(exist_ok=True)
        times: dict[str, list[float]] = {"partials": [], "states": []}
        for _ in range(repeats):
            for way in ("partials", "states"):
                lines: list[str] = []
                t0 = time.perf_counter()
                compute_summary_errors(
                    study, str(out / f"{way}.zarr"), str(out / "e.csv"), str(out / "t.csv"), 2, lines.append,
                    use_partials=way == "partials",
                )  # fmt: skip
                times[way].append(round(time.perf_counter() - t0, 2))
                assert not lines, lines  # every partial taken
        a, b = summary_columns(study, use_partials=True), summary_columns(study, use_partials=False)
        for c in ("e_s", "e_hc", "rate_s"):
            assert np.allclose(a[c], b[c], rtol=1e-12, atol=0, equal_nan=True), c  # the same code on the same states
        slots = -(-runs // int(study.cfg.get("shard_runs") or 10000))
        kb = {
            "partials": _bytes(store, ("hash", "sample_every", "counts", "scalars", "partial"), slots) / 1000,
            "states": _bytes(store, ("hash", "sample_every", "counts", "scalars", "t", "y"), slots) / 1000,
        }
    return {
        "benchmark": "aggregation",
        "runs": runs,
        "shards": slots,
        "solve_and_first_aggregation_s": round(solve, 1),
        "aggregation_s": times,
        "kB_read_per_shard": {k: round(v, 1) for k, v in kb.items()},
        "load_average_after": os.getloadavg()[0],
        "machine": machine(),
        "command": f"python -m benchmarks.aggregation --runs {runs} --repeats {repeats}",
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1_000_000, help="runs (a multiple of 2000; default 10^6)")
    ap.add_argument("--repeats", type=int, default=2, help="timed aggregations each way, alternated (default 2)")
    ap.add_argument("--keep", help="run in this folder and keep it (default: a temporary folder)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    result = run(args.runs, args.repeats, args.keep)
    print(json.dumps(result) if args.json else json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
