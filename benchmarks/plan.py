"""Planning a sweep: the parse and plan of its grid, the dry run and the rerun with nothing to do, CPU and wall.

    python -m benchmarks.plan [--values 10000 100000] [--parse-only 1000000] [--problems formula conical]
                              [--steps 10] [--cores 2] [--no-snakemake] [--json]

Two problems: the formula problem of ``benchmarks.researcher_sweep`` (``kind: sweep`` over ``l1``, HBVM(4,2)) and
the built-in conical pendulum over ``length`` x ``gravity`` (a ``save: summary`` convergence study, a two-key grid
of 10^(d//2) x the rest values, HBVM(2,2)); ``--steps`` steps of h = 0.01, no reference. Per grid size:

- parse and plan: a fresh Python process expands the config as the Snakefile does (``loading.load_studies``, the
  runs' digest, the work estimate) and writes the plan (``plan.write_plan``, what Snakemake's onstart does);
  its imports apart (they are the same at any size);
- dry run: ``snakemake -n`` in a clean folder (of ``TARGETS``: the conical study's errors.csv);
- run: ``snakemake --cores N`` from its start to the solve job's first line (the parse, the DAG and the plan;
  CPU: Snakemake's main process then, read from /proc), then to its end;
- no-op rerun: ``snakemake --cores N`` once more, nothing to do.

``--parse-only``: sizes of which only the parse is timed (no plan, no Snakemake). CPU seconds are what to compare on
a loaded machine; the children's CPU (``getrusage``) for a Snakemake command.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ._common import REPO, machine, project_bytecode

H = 0.01
#: what Snakemake builds: the formula sweep's every file; the conical study's numbers (solve and aggregation, one
#: job), not the tables and figure of a convergence study of 10^4 instances (a panel and table rows per instance)
TARGETS = {"formula": "all", "conical": "results/mine/errors.csv"}


def config(problem: str, values: int, steps: int) -> dict:
    """The study of ``values`` grid values of ``problem`` (formula or conical), ``steps`` steps of 0.01."""
    if problem == "formula":
        from .researcher_sweep import sweep_config

        return sweep_config(values, steps)
    a = 10 ** (len(str(values)) // 2)  # 10^4: 100 x 100, 10^5: 100 x 1000, 10^6: 1000 x 1000
    study = {
        "title": f"Conical pendula: {values} lengths x gravities",
        "kind": "convergence",
        "save": "summary",
        "problem": "conical_pendulum",
        "grid": {"length": {"linspace": [0.5, 1.5, a]}, "gravity": {"linspace": [5.0, 15.0, values // a]}},
        "methods": [{"k": 2, "s": 2}],
        "t_end": steps * H,
        "h": [H],
        "errors": {"reference": "none", "norm": "inf", "sample": "all"},
    }
    return {"studies": {"mine": study}, "select": ["mine"]}


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def inner(cfg_path: str, write: bool) -> dict:
    """The parse (and plan) in this process, as the Snakefile's: what each step takes."""
    c0, w0 = _cpu(), time.perf_counter()
    import hbvm_workflow.loading  # noqa: F401  (what common.smk imports)
    from hbvm_workflow.loading import load_studies
    from hbvm_workflow.plan import write_plan
    from hbvm_workflow.runs import work_seconds

    cfg = json.loads(Path(cfg_path).read_text())
    out = {"imports_cpu_s": _cpu() - c0, "imports_wall_s": time.perf_counter() - w0}
    c0, w0 = _cpu(), time.perf_counter()
    studies = load_studies(cfg)
    for study in studies.values():  # what the rules ask of each study
        study.runs_digest()
        work_seconds(study.jobs)
    out |= {"parse_cpu_s": _cpu() - c0, "parse_wall_s": time.perf_counter() - w0}
    if write:
        c0, w0 = _cpu(), time.perf_counter()
        path = write_plan(cfg, studies)
        out |= {"plan_cpu_s": _cpu() - c0, "plan_wall_s": time.perf_counter() - w0}
        out["plan_bytes"] = os.path.getsize(path) if path else None
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out["runs"] = sum(len(s.jobs) for s in studies.values())
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in out.items()}


def _parse(work: Path, cfg: Path, write: bool) -> dict:
    cmd = [sys.executable, "-m", "benchmarks.plan", "--inner", str(cfg)] + (["--write"] if write else [])
    res = subprocess.run(cmd, cwd=work, capture_output=True, text=True, env=os.environ | {"PYTHONPATH": str(REPO)})
    if res.returncode:
        raise RuntimeError(f"the parse failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout)


def _proc_cpu(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` so far (/proc), None where it cannot be read."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def _snakemake(work: Path, cfg: Path, cores: int, *extra: str) -> dict:
    """Wall and CPU (Snakemake and the jobs it waited for) of one ``snakemake`` command; with no ``-n``, also the
    wall and Snakemake's own CPU up to the solve job's first line."""
    cmd = [
        sys.executable, "-m", "snakemake", "--cores", str(cores), "--snakefile", str(REPO / "Snakefile"),
        "--directory", str(work), "--configfile", str(cfg), *extra,
    ]  # fmt: skip
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out, tail = {}, []
    for line in proc.stdout:
        tail = (tail + [line])[-40:]
        if "-n" not in extra and "to_solve_wall_s" not in out and re.match(r"^(?:local)?rule solve_summary:", line):
            out["to_solve_wall_s"] = time.perf_counter() - t0
            out["to_solve_cpu_s"] = _proc_cpu(proc.pid)
    proc.wait()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        raise RuntimeError("snakemake failed:\n" + "".join(tail))
    out["wall_s"] = time.perf_counter() - t0
    out["cpu_s"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {k: round(v, 2) if isinstance(v, float) else v for k, v in out.items()}


def run(problem: str, values: int, steps: int, cores: int, snakemake: bool, parse_only: bool) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        cfg = work / "mine.json"
        cfg.write_text(json.dumps(config(problem, values, steps) | {"results": "results"}))
        out = {"problem": problem, "values": values, "parse": _parse(work, cfg, write=not parse_only)}
        if snakemake and not parse_only:
            target = TARGETS[problem]
            out["target"] = target
            out["dry_run"] = _snakemake(work, cfg, cores, "-n", "--quiet", "all", "--", target)
            out["run"] = _snakemake(work, cfg, cores, "--", target)
            out["noop_rerun"] = _snakemake(work, cfg, cores, "--quiet", "all", "--", target)
    return out


def _line(r: dict) -> str:
    p = r["parse"]
    text = (
        f"{r['problem']:8s} {r['values']:>8d} values: parse {p['parse_cpu_s']:.2f} s CPU ({p['parse_wall_s']:.2f} wall)"
    )
    if "plan_cpu_s" in p:
        text += f", plan {p['plan_cpu_s']:.2f} s CPU ({p['plan_wall_s']:.2f} wall, {p['plan_bytes'] / 1e6:.0f} MB)"
    text += f", imports {p['imports_cpu_s']:.2f} s CPU, peak RSS {p['peak_rss_mb']:.0f} MB"
    for key in ("dry_run", "run", "noop_rerun"):
        if key in r:
            s = r[key]
            text += f"; {key} {s['cpu_s']:.2f} s CPU ({s['wall_s']:.2f} wall)"
            if "to_solve_wall_s" in s:
                text += f" [to the solve job: {s['to_solve_cpu_s']} s CPU, {s['to_solve_wall_s']} wall]"
    return text


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--values", type=int, nargs="+", default=[10000, 100000], help="grid sizes (default 10^4 10^5)")
    ap.add_argument("--parse-only", type=int, nargs="*", default=[1000000], help="sizes timed by the parse only")
    ap.add_argument("--problems", nargs="+", default=["formula", "conical"], choices=["formula", "conical"])
    ap.add_argument("--steps", type=int, default=10, help="steps of each run (default 10: the plan is the subject)")
    ap.add_argument("--cores", type=int, default=2, help="snakemake --cores (default 2)")
    ap.add_argument("--no-snakemake", action="store_true", help="the parse and plan only")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--inner", help=argparse.SUPPRESS)
    ap.add_argument("--write", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.inner:
        print(json.dumps(inner(args.inner, args.write)))
        return
    project_bytecode(True)
    results = []
    for problem in args.problems:
        for values in args.values:
            results.append(run(problem, values, args.steps, args.cores, not args.no_snakemake, False))
            if not args.json:
                print(_line(results[-1]), flush=True)
        for values in args.parse_only:
            results.append(run(problem, values, args.steps, args.cores, False, True))
            if not args.json:
                print(_line(results[-1]), flush=True)
    if args.json:
        print(json.dumps({"benchmark": "plan", "results": results, "machine": machine()}, indent=1))
    else:
        print(f"(load average {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
