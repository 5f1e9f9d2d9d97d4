"""The first study of a new problem: a formula problem's convergence study from empty caches to its figure.

    python -m benchmarks.first_study [--cores 2] [--json] [--keep DIR]

The problem is the researcher's sweep's (``benchmarks.researcher_sweep.PROBLEM``: two point masses on rods, 6
coordinates, 3 constraints, a diagonal mass matrix that is not the identity), new to the caches: the kernel cache
(``HBVM_KERNEL_CACHE``) and numba's (``NUMBA_CACHE_DIR``) point at empty temporary folders. The study has seven
method entries -- HBVM(2,2), HBVM(4,2), HBVM(6,3), HBVM(4,2) with the blended solver, the polynomial multiplier
HBVM(6,3), RATTLE and DOP853 -- two step sizes each, ``errors.reference: reference`` (the index-reduced reference
solution). It reports the wall time of ``snakemake --cores N`` from start to the figure, the CPU seconds of
Snakemake and its jobs (less sensitive to a shared machine's load), and the solve log's line per compiled (or
loaded) loop: (problem, method), the loop, its seconds (``registry.LoopTime``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import tempfile
from pathlib import Path

from ._common import machine, project_bytecode
from .researcher_sweep import PROBLEM, _snakemake

METHODS = [
    {"k": 2, "s": 2},
    {"k": 4, "s": 2},
    {"k": 6, "s": 3},
    {"k": 4, "s": 2, "solver": "blended"},
    {"k": 6, "s": 3, "multiplier": "polynomial"},
    {"method": "rattle"},
    {"method": "dop853", "rtol": 1.0e-8, "h": [0.5]},
]
#: a solve log line of a loop: ``kernel: <problem>, <method>: <loop> of <module>: <how> in <seconds> s``
LOOP_LINE = re.compile(r"kernel: (.+?): (.+) of (\S+): (compiled|loaded from the kernel cache) in ([\d.]+) s")


def study_config() -> dict:
    study = {
        "title": "A first study of a new problem",
        "problem": PROBLEM,
        "methods": METHODS,
        "t_end": 1.0,
        "h": [0.05, 0.025],
        "errors": {"reference": "reference", "norm": "inf", "sample": "all"},
    }
    return {"studies": {"first": study}, "select": ["first"]}


def loops(log_lines: list[str]) -> list[dict]:
    """The solve log's loop lines as records: what (problem, method), loop, module, cached, seconds."""
    out = []
    for line in log_lines:
        if m := LOOP_LINE.search(line):
            what, loop, module, how, seconds = m.groups()
            out.append({"what": what, "loop": loop, "module": module, "cached": how != "compiled", "s": float(seconds)})
    return out


def run(cores: int, keep: str | None = None) -> dict:
    project_bytecode(True)
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["HBVM_KERNEL_CACHE"] = str(Path(tmp) / "kernels")  # inherited by Snakemake and its jobs
        os.environ["NUMBA_CACHE_DIR"] = str(Path(tmp) / "numba")
        work = Path(keep) if keep else Path(tmp) / "work"
        work.mkdir(parents=True, exist_ok=True)
        cfg = work / "first.json"
        cfg.write_text(json.dumps(study_config()))
        load_before = os.getloadavg()[0]
        used = resource.getrusage(resource.RUSAGE_CHILDREN)
        wall, _ = _snakemake(work, cfg, cores, "--quiet", "all")
        now = resource.getrusage(resource.RUSAGE_CHILDREN)  # Snakemake and every job, compile processes included
        cpu = (now.ru_utime - used.ru_utime) + (now.ru_stime - used.ru_stime)
        log = (work / "logs" / "first" / "solve.log").read_text().splitlines()
        figures = sorted(p.name for p in (work / "results" / "first").glob("*.png"))
    found = loops(log)
    return {
        "benchmark": "first_study",
        "cores": cores,
        "methods": len(METHODS),
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "compile_s": round(sum(r["s"] for r in found), 1),
        "loops": found,
        "figures": figures,
        "command": f"snakemake --cores {cores} --configfile first.json (empty kernel and numba caches)",
        "load_average_before": load_before,
        "load_average_after": os.getloadavg()[0],
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cores", type=int, default=2, help="snakemake --cores (default 2)")
    ap.add_argument("--keep", help="run in this folder and keep it (default: a temporary folder)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    out = run(args.cores, args.keep) | {"machine": machine()}
    if args.json:
        print(json.dumps(out, indent=1))
        return
    print(
        f"first study of a formula problem, {out['methods']} method entries, --cores {out['cores']}: "
        f"{out['wall_s']:.1f} s to the figure {out['figures']} ({out['cpu_s']:.1f} s of CPU), "
        f"{out['compile_s']:.1f} s in "
        f"{len(out['loops'])} loops (load {out['load_average_before']:.1f} before, "
        f"{out['load_average_after']:.1f} after)"
    )
    for r in out["loops"]:
        how = "cached" if r["cached"] else "compiled"
        print(f"  {r['s']:7.1f} s  {how:8s} {r['what']}: {r['loop']} ({r['module']})")


if __name__ == "__main__":
    main()
