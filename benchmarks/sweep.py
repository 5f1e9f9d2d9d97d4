"""End-to-end cost of a sweep of many tiny runs through Snakemake: time, files and bytes per run.

    python -m benchmarks.sweep [--runs 2000] [--cores 2] [--json] [--keep DIR]

The sweep: planar pendulum on [0, 1], HBVM(k, 1) for k = 1..10, h = 1/n for
n = 20, 21, ... (runs / 10 step sizes, at most 200), errors against the exact
solution; more than 2000 runs are 2000-run blocks over a grid of initial angular
velocities theta_dot0 in [0.5, 1.5]. Each run is 20 to 219 steps: microseconds of integration, so what is measured is
what surrounds a run (Snakemake, scheduling, storage, aggregation). It runs
``snakemake --cores N`` in a clean working directory (kernel cache warm: the
shipped problems' loops are compiled first, untimed) and reports the runs, the
wall time, ms per run, and the files and bytes of the run stores per run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from ._common import machine, timed_snakemake


def sweep_config(runs: int) -> dict:
    """The study of ``runs`` runs: 10 methods times ``runs / 10`` step sizes up to 2000 runs; beyond,
    2000-run blocks over a grid of ``runs / 2000`` initial velocities (the runs keep their size)."""
    if runs < 10 or runs % 10 or (runs > 2000 and runs % 2000):
        raise SystemExit(f"--runs {runs}: give a multiple of 10 up to 2000, or a multiple of 2000")
    n = range(20, 20 + min(runs, 2000) // 10)
    study = {
        "title": f"Sweep benchmark: {runs} runs",
        "problem": "planar_pendulum",
        "methods": [{"k": k, "s": 1} for k in range(1, 11)],
        "t_end": 1,
        "h": [1.0 / i for i in n],
        "errors": {"reference": "exact", "norm": 1, "sample": "all"},
    }
    if runs > 2000:
        count = runs // 2000
        study["grid"] = {"theta_dot0": [round(0.5 + i / (count - 1), 6) if count > 1 else 1.0 for i in range(count)]}
    return {"studies": {"sweep": study}, "select": ["sweep"]}


def footprint(runs_dir: Path) -> tuple[int, int]:
    """(files, bytes) under the run stores' folder."""
    files = size = 0
    for root, _, names in os.walk(runs_dir):
        for f in names:
            files += 1
            size += os.stat(os.path.join(root, f)).st_size
    return files, size


def run(runs: int, cores: int, keep: str | None = None) -> dict:
    env = dict(os.environ)
    subprocess.run([sys.executable, "-m", "hbvm_core", "kernels", "warm"], check=True, env=env, capture_output=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(keep) if keep else Path(tmp) / "work"
        work.mkdir(parents=True, exist_ok=True)
        cfg = work / "sweep.json"
        cfg.write_text(json.dumps(sweep_config(runs)))
        wall = timed_snakemake(work, "--configfile", str(cfg), cores=cores, env=env)
        files, size = footprint(work / "results" / "sweep" / "runs")
        rows = sum(1 for _ in open(work / "results" / "sweep" / "errors.csv")) - 1
    return {
        "benchmark": "sweep",
        "runs": runs,
        "rows": rows,
        "cores": cores,
        "wall_s": round(wall, 2),
        "ms_per_run": round(1000 * wall / runs, 2),
        "files_per_run": round(files / runs, 2),
        "bytes_per_run": round(size / runs),
        "load_average_after": os.getloadavg()[0],
        "command": f"snakemake --cores {cores} --configfile sweep.json all",
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=2000, help="runs in the sweep (a multiple of 10; default 2000)")
    ap.add_argument("--cores", type=int, default=2, help="snakemake --cores (default 2)")
    ap.add_argument("--keep", help="run in this folder and keep it (default: a temporary folder)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    out = run(args.runs, args.cores, args.keep) | {"machine": machine()}
    if args.json:
        print(json.dumps(out, indent=1))
        return
    print(
        f"{out['runs']} runs ({out['rows']} rows) in {out['wall_s']:.1f} s with --cores {out['cores']}: "
        f"{out['ms_per_run']:.1f} ms per run, {out['files_per_run']:.1f} files and "
        f"{out['bytes_per_run'] / 1000:.1f} kB per run (load {out['load_average_after']:.1f})"
    )


if __name__ == "__main__":
    main()
