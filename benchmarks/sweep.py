"""End-to-end cost of a sweep of many tiny runs through Snakemake: time, files and bytes per run.

    python -m benchmarks.sweep [--runs 2000] [--cores 2] [--json] [--keep DIR] [--timeline]

The sweep: planar pendulum on [0, 1], HBVM(k, 1) for k = 1..10, h = 1/n for
n = 20, 21, ... (runs / 10 step sizes, at most 200), errors against the exact
solution; more than 2000 runs are 2000-run blocks over a grid of initial angular
velocities theta_dot0 in [0.5, 1.5]. Each run is 20 to 219 steps: microseconds of integration, so what is measured is
what surrounds a run (Snakemake, scheduling, storage, aggregation). It runs
``snakemake --cores N`` in a clean working directory (kernel cache warm: the
shipped problems' loops are compiled first, untimed) and reports the runs, the
wall time, ms per run, and the files and bytes of the run stores per run. ``--timeline`` runs it with Snakemake's
and the jobs' lines not quieted and prints each with the seconds from the start at which it arrived (where the
fixed costs go: the parse, the job's start, Dask, the shards, the aggregation).
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

from ._common import REPO, machine, project_bytecode


def sweep_config(runs: int, save: str = "summary", shard_runs: int | None = None) -> dict:
    """The study of ``runs`` runs: 10 methods times ``runs / 10`` step sizes up to 2000 runs; beyond,
    2000-run blocks over a grid of ``runs / 2000`` initial velocities (the runs keep their size).

    ``save``: ``trajectory`` (a run store per run, errors at every step) or ``summary`` (the one sharded store,
    errors at t = 0 and t = 1: the saved points are the sample times, so every step would be 220 points a run)."""
    if runs < 10 or runs % 10 or (runs > 2000 and runs % 2000):
        raise SystemExit(f"--runs {runs}: give a multiple of 10 up to 2000, or a multiple of 2000")
    n = range(20, 20 + min(runs, 2000) // 10)
    study = {
        "title": f"Sweep benchmark: {runs} runs",
        "problem": "planar_pendulum",
        "methods": [{"k": k, "s": 1} for k in range(1, 11)],
        "t_end": 1,
        "h": [1.0 / i for i in n],
        "errors": {"reference": "exact", "norm": 1, "sample": "all" if save == "trajectory" else 1.0},
        "save": save,
    }
    if shard_runs:
        study["shard_runs"] = shard_runs
    if runs > 2000:
        count = runs // 2000
        study["grid"] = {"theta_dot0": [round(0.5 + i / (count - 1), 6) if count > 1 else 1.0 for i in range(count)]}
    return {"studies": {"sweep": study}, "select": ["sweep"]}


def footprint(folder: Path) -> tuple[int, int]:
    """(files, bytes) under a folder."""
    files = size = 0
    for root, _, names in os.walk(folder):
        for f in names:
            files += 1
            size += os.stat(os.path.join(root, f)).st_size
    return files, size


class PeakRSS:
    """The peaks of the summed memory of a process and its descendants (psutil): resident (RSS, every 0.1 s: a
    page that forked processes share counts in each of them) and proportional (PSS, every 0.5 s: a shared page
    counts once in the sum, split between its sharers; Linux, else None)."""

    def __init__(self, pid: int):
        import threading

        self.pid, self.peak, self.peak_pss = pid, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        import psutil

        try:
            root = psutil.Process(self.pid)
        except psutil.Error:
            return
        polls = 0
        while not self._stop.is_set():
            full = polls % 5 == 0  # PSS every 0.5 s: it walks the page tables (every 0.1 s: a 10^5 sweep 0.7 s slower)
            rss = pss = 0
            try:
                for p in [root, *root.children(recursive=True)]:
                    try:
                        mem = p.memory_full_info() if full else p.memory_info()
                    except psutil.Error:
                        continue
                    rss += mem.rss
                    pss += getattr(mem, "pss", 0)
            except psutil.Error:
                break
            self.peak = max(self.peak, rss)
            if full:
                self.peak_pss = max(self.peak_pss, pss)
            polls += 1
            self._stop.wait(0.1)

    def stop(self) -> tuple[int, int | None]:
        """(peak summed RSS, peak summed PSS or None where the platform does not tell it) in bytes."""
        self._stop.set()
        self._thread.join()
        return self.peak, self.peak_pss or None


def kernel_seconds(cfg: dict, cores: int, warm_only: bool = False) -> float:
    """The ensemble kernel's own wall time for the study's runs, in this process: ``integrate_ensemble`` over
    every run of each method (all grid values in one call), saving what the summary saves (t = 0 and t = 1),
    ``cores`` threads; the loops loaded once first, untimed."""
    import time

    import numpy as np

    from hbvm_core import get_problem, integrate_ensemble
    from hbvm_core.integrate import number_of_steps
    from hbvm_core.kernels.lanes import MIN_GROUP
    from hbvm_core.methods import method_from_entry

    study = cfg["studies"]["sweep"]
    values = (study.get("grid") or {}).get("theta_dot0", [1.0])
    problems = [get_problem("planar_pendulum", theta_dot0=v) for v in values]
    hs = np.array(study["h"], dtype=float)
    N = np.array([number_of_steps(h, study["t_end"]) for h in hs], dtype=np.int64)
    runs_p = [p for p in problems for _ in hs]
    h_all, N_all = np.tile(hs, len(problems)), np.tile(N, len(problems))
    methods = [method_from_entry({"method": "hbvm", "solver": "fixed-point", **m}) for m in study["methods"]]
    warm = np.repeat(hs[:1], MIN_GROUP)  # as many runs as a lockstep block takes: its module is loaded too
    for method in methods:  # load the compiled loops (both problem structures)
        for p in {id(p): p for p in problems}.values():
            integrate_ensemble([p], method, warm, N[0], sample_every=N[0], threads=cores)
    if warm_only:
        return 0.0
    t0 = time.perf_counter()
    for method in methods:
        # the published problem (theta_dot0 = 1) has its own callbacks: one call per problem structure
        for group in _structures(runs_p):
            integrate_ensemble([runs_p[i] for i in group], method, h_all[group], N_all[group],
                               sample_every=N_all[group], threads=cores)  # fmt: skip
    return time.perf_counter() - t0


def _structures(problems: list) -> list:
    import numpy as np

    keys = [p.kernels.grad_U for p in problems]
    out: dict = {}
    for i, k in enumerate(keys):
        out.setdefault(id(k), []).append(i)
    return [np.array(v) for v in out.values()]


def run(
    runs: int,
    cores: int,
    keep: str | None = None,
    save: str = "summary",
    shard_runs: int | None = None,
    timeline: bool = False,
    bytecode: bool = True,
) -> dict:
    """The sweep through ``snakemake --cores cores`` in a clean folder (``keep``: that one); with ``timeline``,
    Snakemake's and the jobs' lines (not quieted) with the seconds from the start at which each arrived;
    ``bytecode``: the project's bytecode cache written first, else removed (``project_bytecode``)."""
    env = dict(os.environ)
    project_bytecode(bytecode)
    subprocess.run([sys.executable, "-m", "hbvm_core", "kernels", "warm"], check=True, env=env, capture_output=True)
    config = sweep_config(runs, save, shard_runs)
    if save == "summary":  # the ensemble loops compiled into the kernel cache first, untimed
        kernel_seconds(config, cores, warm_only=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(keep) if keep else Path(tmp) / "work"
        work.mkdir(parents=True, exist_ok=True)
        cfg = work / "sweep.json"
        cfg.write_text(json.dumps(config))
        target = "results/sweep/errors.csv"  # plan, solve, store, aggregate (no tables or figure)
        cmd = [
            sys.executable, "-m", "snakemake", target, "--cores", str(cores), "--snakefile", str(REPO / "Snakefile"),
            "--directory", str(work), "--configfile", str(cfg), *(() if timeline else ("--quiet", "all")),
        ]  # fmt: skip
        t0 = time.perf_counter()
        stderr = subprocess.STDOUT if timeline else subprocess.PIPE
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=stderr, text=True)
        rss = PeakRSS(proc.pid)
        lines: list[list] = []
        if timeline:  # each line as it arrives
            for line in proc.stdout:
                if line.strip():
                    lines.append([round(time.perf_counter() - t0, 2), line.rstrip()[:160]])
        out, err = proc.communicate()
        err = err if err is not None else "\n".join(text for _, text in lines)
        wall = time.perf_counter() - t0
        peak, peak_pss = rss.stop()
        if proc.returncode != 0:
            raise RuntimeError(f"snakemake failed ({proc.returncode}):\n{err[-3000:]}")
        study = work / "results" / "sweep"
        store = study / ("runs.zarr" if save == "summary" else "runs")
        files, size = footprint(store)
        all_files, _ = footprint(study)
        rows = sum(1 for _ in open(study / "errors.csv")) - 1
    kernel = kernel_seconds(config, cores) if save == "summary" else float("nan")
    return {
        "benchmark": "sweep",
        "save": save,
        "runs": runs,
        "rows": rows,
        "cores": cores,
        "wall_s": round(wall, 2),
        "ms_per_run": round(1000 * wall / runs, 4),
        "kernel_s": round(kernel, 3),
        "end_to_end_over_kernel": round(wall / kernel, 2) if kernel == kernel else None,
        "files": files,
        "files_in_study": all_files,
        "files_per_1000_runs": round(1000 * files / runs, 3),
        "bytes": size,
        "bytes_per_run": round(size / runs, 1),
        "peak_rss_mb": round(peak / 2**20, 1),
        "peak_pss_mb": round(peak_pss / 2**20, 1) if peak_pss else None,
        "load_average_after": os.getloadavg()[0],
        "bytecode_cache": bytecode,
        "command": f"snakemake --cores {cores} --configfile sweep.json {target}",
    } | ({"timeline": lines} if timeline else {})


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=2000, help="runs in the sweep (a multiple of 10; default 2000)")
    ap.add_argument("--cores", type=int, default=2, help="snakemake --cores (default 2)")
    ap.add_argument("--keep", help="run in this folder and keep it (default: a temporary folder)")
    ap.add_argument("--save", choices=("summary", "trajectory"), default="summary", help="the study's save key")
    ap.add_argument("--shard-runs", type=int, help="the study's shard_runs (default: the schema's)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument(
        "--timeline", action="store_true", help="Snakemake's lines not quieted, each with its arrival time (s)"
    )
    ap.add_argument(
        "--no-bytecode-cache",
        action="store_true",
        help="remove the project's bytecode cache first (with PYTHONDONTWRITEBYTECODE set, as here: each process "
        "compiles the project's modules from source)",
    )
    args = ap.parse_args(argv)
    out = run(
        args.runs, args.cores, args.keep, args.save, args.shard_runs, args.timeline, not args.no_bytecode_cache
    ) | {"machine": machine()}
    if args.json:
        print(json.dumps(out, indent=1))
        return
    for seconds, line in out.get("timeline", []):
        print(f"{seconds:7.2f}  {line}")
    print(
        f"{out['runs']} runs ({out['rows']} rows, save {out['save']}) in {out['wall_s']:.1f} s with --cores "
        f"{out['cores']}: {out['ms_per_run']:.3f} ms per run; kernel alone {out['kernel_s']:.2f} s "
        f"(end to end / kernel: {out['end_to_end_over_kernel']}); {out['files']} files "
        f"({out['files_per_1000_runs']:.2f} per 1000 runs), {out['bytes_per_run']:.0f} bytes per run; peak RSS "
        f"{out['peak_rss_mb']:.0f} MB, PSS {out['peak_pss_mb']} MB (load {out['load_average_after']:.1f})"
    )


if __name__ == "__main__":
    main()
