"""The documentation cannot rot: every config key is documented, and every Python example runs.

(a) every key of the config schema (top level, a study, a method entry, errors, dask,
    resources, expected_rates) is named in docs/configuration.md;
(b) every ```python block of docs/*.md runs, in order, in a folder where
    the study FIRST_STUDY was built first through real Snakemake (``results/first_study``);
    a block may query it as the README does and must get numbers.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
#: the pages whose examples run here (README.md's run as a user copies them: tests/workflow/test_front_door.py)
DOCS = sorted((ROOT / "docs").glob("*.md"))
#: the study every example may assume (README: "Querying results with xarray")
FIRST_STUDY = {
    "problem": "planar_pendulum",
    "methods": [{"k": 1, "s": 1}, {"k": 2, "s": 2}],
    "t_end": 1,
    "h": [0.1, 0.05, 0.025],
    "errors": {"reference": "exact", "norm": 1, "sample": "all"},
}
#: docs/querying.md's sweep (save: summary, one sharded store), built beside it
FIRST_SWEEP = {
    "kind": "sweep",
    "problem": "planar_pendulum",
    "grid": {"theta_dot0": [1.5, 1.9]},
    "methods": [{"k": 1, "s": 1}, {"k": 2, "s": 2}],
    "t_end": 1,
    "h": [0.1, 0.05, 0.025],
    "errors": {"reference": "exact", "norm": 1, "sample": "all"},
}


def schema_keys() -> dict[str, list[str]]:
    from hbvm_workflow.schema import schema

    doc = schema()  # schema.yaml with the method entry keys the registered methods declare
    d = doc["$defs"]
    resources = doc["properties"]["resources"]["additionalProperties"]["properties"]
    return {
        "top level": list(doc["properties"]),
        "resources": list(resources),
        "study": list(d["study"]["properties"]),
        "expected_rates": list(d["study"]["properties"]["expected_rates"]["properties"]),
        "method entry": list(d["method"]["properties"]),
        "errors": list(d["errors"]["properties"]),
        "dask": list(d["dask"]["properties"]),
        "indexed problem": list(d["indexed_problem"]["properties"]),
        "indexed terms": list(d["indexed_sum"]["properties"]) + list(d["indexed_constraint"]["properties"]),
    }


def test_every_schema_key_is_documented():
    text = re.sub(r"^```.*?^```", "", (ROOT / "docs" / "configuration.md").read_text(), flags=re.S | re.M)
    spans = [span for line in text.splitlines() for span in re.findall(r"`([^`]+)`", line)]
    words = {w for span in spans for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", span)}
    missing = [f"{where}: {key}" for where, keys in schema_keys().items() for key in keys if key not in words]
    assert not missing, f"schema keys not named (in backticks) in docs/configuration.md: {missing}"


def python_blocks() -> list[tuple[str, str]]:
    out = []
    for doc in DOCS:
        for i, block in enumerate(re.findall(r"^```python\n(.*?)^```", doc.read_text(), re.S | re.M)):
            out.append((f"{doc.relative_to(ROOT)}[{i}]", block))
    return out


@pytest.fixture(scope="module")
def first_study(tmp_path_factory):
    """A folder with results/first_study built by ``snakemake --cores 2`` (seconds)."""
    work = tmp_path_factory.mktemp("docs")
    config = {
        "studies": {"first_study": FIRST_STUDY, "first_sweep": FIRST_SWEEP},
        "select": ["first_study", "first_sweep"],
    }
    (work / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    bin_ = Path(sys.executable).parent
    cmd = [str(bin_ / "snakemake"), "-s", str(ROOT / "Snakefile"), "-d", str(work), "--cores", "2"]
    cmd += ["--configfile", str(work / "config.yaml")]
    env = dict(os.environ, MPLBACKEND="Agg", PATH=f"{bin_}{os.pathsep}{os.environ.get('PATH', '')}")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=work)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return work


@pytest.mark.slow
def test_every_python_example_runs(first_study, monkeypatch):
    blocks = python_blocks()
    assert blocks, "no ```python blocks found"
    monkeypatch.chdir(first_study)
    monkeypatch.syspath_prepend(str(first_study))
    namespace: dict = {"__name__": "docs_examples"}
    for i, (where, code) in enumerate(blocks):
        path = first_study / f"docs_block_{i}.py"  # a real file: numba's cache=True needs one
        path.write_text(code)
        try:
            exec(compile(code, str(path), "exec"), namespace)
        except Exception as exc:
            raise AssertionError(f"{where} fails: {type(exc).__name__}: {exc}\n{code}") from exc


@pytest.mark.slow
def test_the_readme_queries_return_numbers(first_study, monkeypatch):
    from hbvm_workflow import open_errors

    monkeypatch.chdir(first_study)
    err = open_errors("first_study")
    value = err.e_s.sel(scheme="hbvm_k2_s2", h=0.025).item()
    assert isinstance(value, float) and 0 < value < 1e-3
    assert err.e_s.sel(scheme="hbvm_k2_s2").dims == ("h",)  # selects one method (method= would not)
    assert err.set_index(scheme=["k", "s"]).e_s.sel(k=2, s=2, h=0.025).item() == value
    assert not any(hasattr(v.data, "dask") for v in err.variables.values())  # loaded, not lazy
    assert err.e_s.attrs["units"] == "1" and err.h.attrs["long_name"] == "step size"


def test_the_methods_table_is_generated_from_the_declarations():
    """docs/baselines.md's table of methods is what ``python -m hbvm_core.methods.table`` prints."""
    from hbvm_core.methods.table import markdown

    text = (ROOT / "docs" / "baselines.md").read_text()
    found = re.search(r"<!-- methods table:[^\n]*-->\n(.*?)<!-- end of methods table -->", text, re.S)
    assert found, "docs/baselines.md: no methods table between its markers"
    assert found.group(1) == markdown(), "docs/baselines.md: regenerate it with python -m hbvm_core.methods.table"
