"""What the workflow's parse imports: the Snakefile's modules and the expansion of a study of a built-in problem
stay clear of the heavy packages that only a job needs (scipy: 0.2-0.25 s of the parse of every ``snakemake``;
Dask, xarray). Checked in a fresh interpreter, whose ``sys.modules`` no other test has filled."""

from __future__ import annotations

import json
import subprocess
import sys

#: imported by jobs (a reference solution, a non-diagonal mass matrix, the cluster, errors.zarr), never by the parse
HEAVY = ("scipy", "dask", "distributed", "xarray")

PARSE = """
import json, sys
from hbvm_workflow.loading import load_studies
from hbvm_workflow.cluster import rule_resources
from hbvm_workflow.plan import write_plan
from hbvm_workflow.summary_job import aggregated_in_solve
config = json.loads(sys.argv[1])
studies = load_studies(config)
write_plan(config, studies)
print(json.dumps({"runs": sum(len(s.jobs) for s in studies.values()), "digest": studies["sweep"].runs_digest(),
                  "loaded": sorted({m.split(".")[0] for m in sys.modules})}))
"""


def test_the_parse_of_a_sweep_imports_no_scipy_dask_or_xarray(tmp_path):
    """A sweep of the planar pendulum at two grid values (its published instance and another: both problem
    factories) expanded, hashed and planned, as the Snakefile does, in a fresh interpreter: no heavy package."""
    study = {
        "problem": "planar_pendulum",
        "methods": [{"k": 2, "s": 1}, {"k": 3, "s": 1}],
        "t_end": 1,
        "h": [0.1, 0.05],
        "grid": {"theta_dot0": [0.5, 1.0]},
        "errors": {"reference": "exact", "norm": 1, "sample": 1.0},
        "save": "summary",
    }
    config = {"studies": {"sweep": study}, "results": str(tmp_path / "results")}
    out = subprocess.run(
        [sys.executable, "-c", PARSE, json.dumps(config)], capture_output=True, text=True, check=True, timeout=120
    )
    found = json.loads(out.stdout)
    assert found["runs"] == 2 * 2 * 2 and len(found["digest"]) == 16
    assert "hbvm_core" in found["loaded"] and "numpy" in found["loaded"]
    assert not set(HEAVY) & set(found["loaded"]), set(HEAVY) & set(found["loaded"])
