"""A researcher's own sweep, end to end through Snakemake, against the ensemble kernel's own time for the same runs.

    python -m benchmarks.researcher_sweep [--values 10000] [--cores 2] [--steps 500] [--solver blended] [--json]
        [--keep DIR]

The road a user takes, not the benchmark's: a problem given as formulas in the config (two point masses in space
on rods, 6 coordinates, 3 constraints, a diagonal mass matrix that is not the identity), ``kind: sweep`` over
``--values`` lengths ``l1`` of the first rod (a param that enters q0 and g), HBVM(4,2) with the fixed point (or
``--solver blended``),
``--steps`` steps of h = 0.01, the state saved every 5 steps, ``errors.reference: none``. It reports, in one
sitting:

- the end-to-end wall time of ``snakemake --cores N`` in a clean folder (kernel cache warm: the loop compiled
  first, untimed), and each rule's time from Snakemake's own lines;
- the dry run (``snakemake -n``) and the rerun with nothing to do;
- the kernel: ``integrate_ensemble`` over the same runs with ``--cores`` threads, in this process: first with the
  pages as the system has them, then with transparent huge pages off as in the workflow's processes
  (``hbvm_workflow.pages``), the time the end to end is compared with.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ._common import REPO, machine, project_bytecode

#: the formula problem: masses m1, m2 on rods l1 (from the origin) and l2 (from the first), the second held in the
#: plane y = 0; q0 with both rods along x, p0 tangent to every constraint (hidden constraints zero) for any l1
PROBLEM = {
    "name": "rods_in_space",
    "coordinates": ["x1", "y1", "z1", "x2", "y2", "z2"],
    "params": {"m1": 1.0, "m2": 2.0, "l1": 1.0, "l2": 0.7, "grav": 9.81},
    "mass": ["m1", "m1", "m1", "m2", "m2", "m2"],
    "potential": "grav*(m1*z1 + m2*z2)",
    "constraints": ["x1**2 + y1**2 + z1**2 - l1**2", "(x2 - x1)**2 + (y2 - y1)**2 + (z2 - z1)**2 - l2**2", "y2"],
    "q0": ["l1", 0, 0, "l1 + l2", 0, 0],
    "p0": [0, "0.5*m1", 0, 0, 0, "0.3*m2"],
}
H = 0.01
SAMPLE_EVERY = 5
LOW, HIGH = 0.5, 1.5


def sweep_config(values: int, steps: int, solver: str = "fixed-point") -> dict:
    """The study: ``values`` lengths l1 in [0.5, 1.5], HBVM(4,2) with ``solver``, ``steps`` steps of 0.01, no
    reference."""
    study = {
        "title": f"A researcher's sweep: {values} lengths",
        "kind": "sweep",
        "problem": PROBLEM,
        "grid": {"l1": grid_values(values)},
        "methods": [{"k": 4, "s": 2} | ({"solver": solver} if solver != "fixed-point" else {})],
        "t_end": steps * H,
        "h": [H],
        "save_every": SAMPLE_EVERY,
        "errors": {"reference": "none", "norm": "inf", "sample": "all"},
    }
    return {"studies": {"mine": study}, "select": ["mine"]}


def grid_values(values: int) -> dict:
    """The grid's values as a user writes them: a ``linspace`` range of the config (numpy's values)."""
    return {"linspace": [LOW, HIGH, values]}


def kernel_seconds(values: int, steps: int, cores: int, solver: str = "fixed-point") -> float:
    """``integrate_ensemble`` over the same runs in this process (the problem built once, the lengths as an array),
    ``cores`` threads; the loop loaded first, untimed."""
    import numpy as np

    import hbvm_core as hc
    from hbvm_core.expressions import factory

    problem = factory(PROBLEM)()
    method = hc.HBVM(4, 2, solver=solver)
    hc.integrate_ensemble(problem, method, H, 2, params={"l1": np.full(16, 1.0)}, threads=cores)
    t0 = time.perf_counter()
    l1 = np.linspace(LOW, HIGH, values)  # the config's range: numpy's values
    hc.integrate_ensemble(problem, method, H, steps, params={"l1": l1}, sample_every=SAMPLE_EVERY, threads=cores)
    return time.perf_counter() - t0


def _snakemake(work: Path, cfg: Path, cores: int, *extra: str) -> tuple[float, list]:
    cmd = [
        sys.executable, "-m", "snakemake", "--cores", str(cores), "--snakefile", str(REPO / "Snakefile"),
        "--directory", str(work), "--configfile", str(cfg), *extra,
    ]  # fmt: skip
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = [(time.perf_counter() - t0, line.rstrip()) for line in proc.stdout if line.strip()]
    proc.wait()
    wall = time.perf_counter() - t0
    if proc.returncode:
        raise RuntimeError("snakemake failed:\n" + "\n".join(text for _, text in lines[-40:]))
    return wall, lines


def rule_seconds(lines: list) -> dict:
    """Each rule's seconds from Snakemake's lines: from its 'rule NAME:' line to its 'Finished jobid' line."""
    start, out = {}, {}
    for t, text in lines:
        if m := re.match(r"^(?:local)?rule (\w+):", text):
            start[m.group(1)] = t
        elif (m := re.search(r"Finished jobid: \d+ \(Rule: (\w+)\)", text)) and m.group(1) in start:
            out[m.group(1)] = round(t - start[m.group(1)], 2)
    return out


def run(values: int, steps: int, cores: int, keep: str | None = None, solver: str = "fixed-point") -> dict:
    project_bytecode(True)
    config = sweep_config(values, steps, solver)
    kernel_seconds(16, 2, cores, solver)  # the loop compiled into the kernel cache, untimed
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(keep) if keep else Path(tmp) / "work"
        work.mkdir(parents=True, exist_ok=True)
        cfg = work / "mine.json"
        cfg.write_text(json.dumps(config))
        dry, _ = _snakemake(work, cfg, cores, "-n", "--quiet", "all")
        wall, lines = _snakemake(work, cfg, cores)
        noop, _ = _snakemake(work, cfg, cores, "--quiet", "all")
        study = work / "results" / "mine"
        sizes = {p.name: p.stat().st_size for p in study.glob("table.*")}
        solve_log = (work / "logs" / "mine" / "solve.log").read_text().splitlines()
    kernel_huge = kernel_seconds(values, steps, cores, solver)  # this process's pages, as the system has them
    from hbvm_workflow.pages import small_pages

    small = small_pages()  # the pages the workflow's processes take (hbvm_workflow.pages)
    kernel = kernel_seconds(values, steps, cores, solver) if small else kernel_huge
    return {
        "benchmark": "researcher_sweep",
        "runs": values,
        "steps": steps,
        "cores": cores,
        "solver": solver,
        "wall_s": round(wall, 2),
        "kernel_s": round(kernel, 2),
        "kernel_s_system_pages": round(kernel_huge, 2),
        "end_to_end_over_kernel": round(wall / kernel, 2),
        "rules_s": rule_seconds(lines),
        "dry_run_s": round(dry, 2),
        "noop_rerun_s": round(noop, 2),
        "table_bytes": sizes,
        "solve_log": [line.split(" ", 2)[-1][:200] for line in solve_log],
        "command": f"snakemake --cores {cores} --configfile mine.json",
        "load_average_after": os.getloadavg()[0],
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--values", type=int, default=10000, help="grid values = runs (default 10000)")
    ap.add_argument("--steps", type=int, default=500, help="steps of each run (default 500)")
    ap.add_argument("--cores", type=int, default=2, help="snakemake --cores and the kernel's threads (default 2)")
    ap.add_argument("--solver", default="fixed-point", choices=("fixed-point", "blended"), help="HBVM's solver")
    ap.add_argument("--keep", help="run in this folder and keep it (default: a temporary folder)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    out = run(args.values, args.steps, args.cores, args.keep, args.solver) | {"machine": machine()}
    if args.json:
        print(json.dumps(out, indent=1))
        return
    print(
        f"{out['runs']} runs of {out['steps']} steps ({out['solver']}) in {out['wall_s']:.1f} s with --cores "
        f"{out['cores']}; kernel "
        f"alone {out['kernel_s']:.1f} s ({out['kernel_s_system_pages']:.1f} s with the system's pages; end to end / "
        f"kernel: {out['end_to_end_over_kernel']}); dry run "
        f"{out['dry_run_s']:.1f} s, rerun with nothing to do {out['noop_rerun_s']:.1f} s; rules {out['rules_s']}; "
        f"tables {out['table_bytes']} (load {out['load_average_after']:.1f})"
    )
    for line in out["solve_log"]:
        print("  solve.log:", line)


if __name__ == "__main__":
    main()
