"""What a run's identity costs when the published studies are planned (hbvm_core.fingerprint).

    python -m benchmarks.identity [--results results] [--json]

Plans the seven published studies (config/config.yaml) as the Snakefile and each job script does
(``load_studies``) in a fresh process, and times apart what identity adds: each problem's structure
(parsed sources of its modules, from the on-disk digest cache or parsed: ``cold``), its probe values,
the numerics fingerprint of each method, and the snap to what the stores of ``--results`` record (none
when the folder is empty). Compare with the published study's wall time (``python -m benchmarks.study``):
the workflow plans once per process that loads the studies (the Snakefile, the solve step, each
aggregation).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

from ._common import REPO, machine

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import yaml
import hbvm_core.fingerprint as fp
from hbvm_workflow import study as st
from hbvm_workflow.loading import load_studies

spent = {"structure": 0.0, "probe": 0.0, "numerics": 0.0, "snap": 0.0}


def timed(name, f):
    def wrapper(*args, **kwargs):
        t = time.perf_counter()
        try:
            return f(*args, **kwargs)
        finally:
            spent[name] += time.perf_counter() - t
    return wrapper


fp.problem_structure = timed("structure", fp.problem_structure)
fp.problem_probe = timed("probe", fp.problem_probe)
fp.method_fingerprint = timed("numerics", fp.method_fingerprint)
real_identify = st._identify


def identify(study, inst, *recorded):
    t = time.perf_counter()
    before = spent["structure"] + spent["probe"]
    real_identify(study, inst, *recorded)
    spent["snap"] += time.perf_counter() - t - (spent["structure"] + spent["probe"] - before)


st._identify = identify
config = yaml.safe_load(open(sys.argv[1]))
config["results"] = sys.argv[2]
config["select"] = ["table1", "table2", "table3", "table4", "fig1", "fig2", "fig3"]
t1 = time.perf_counter()
studies = load_studies(config, names=config["select"])
plan = time.perf_counter() - t1
print(json.dumps({"plan_s": plan, "runs": sum(len(s.jobs) for s in studies.values()),
                  **{f"{k}_s": v for k, v in spent.items()}}))
"""


def plan(results: str, env: dict) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(REPO / "config" / "config.yaml"), results],
        capture_output=True, text=True, check=True, env=env, cwd=REPO,
    )  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--results", default=None, help="a results folder whose stores the plan snaps to")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    with tempfile.TemporaryDirectory() as tmp:
        results = args.results or os.path.join(tmp, "results")
        cold = plan(results, env | {"HBVM_KERNEL_CACHE": os.path.join(tmp, "cache")})  # no digest cached yet
        warm = plan(results, env)
    out = {"benchmark": "identity", "results": args.results or "(empty)", "cold": cold, "warm": warm, **machine()}
    if args.json:
        print(json.dumps(out, indent=1))
        return
    for name, r in (("cold digest cache", cold), ("warm digest cache", warm)):
        ident = sum(r[k] for k in ("structure_s", "probe_s", "numerics_s", "snap_s"))
        parts = ", ".join(f"{k[:-2]} {1e3 * r[k]:.0f} ms" for k in ("structure_s", "probe_s", "numerics_s", "snap_s"))
        print(f"{name}: plan of {r['runs']} runs {r['plan_s']:.2f} s, identity {1e3 * ident:.0f} ms ({parts})")


if __name__ == "__main__":
    main()
