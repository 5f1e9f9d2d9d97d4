"""What a new user meets, through real Snakemake: the README run as written, the paths the docs name, the
tables' headers and captions, the logs, plain ``snakemake`` and ``python -m hbvm_workflow list``.

- the README's code blocks, in order, after its main job, each as a user copies it: a ```python block that
  starts with ``# <file>.py`` is saved as that file, every other one runs as its own ``python`` process in
  the working folder; a ```sh block runs as typed (the venv and pip steps and the test command aside), a
  ```yaml block of studies passes the config checks;
- every results path the README and docs/workflow.md name exists after the main job (``n=<n>``) and after a
  study with explicit step sizes (``h=<h>``);
- a small study of two studies through plain ``snakemake`` (the default profile: all cores, no ``reason:``
  lines): the job's shared facts once on the terminal, "1 run" in the singular, per-run lines only in the logs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
#: the steps of the README's sh blocks that set up a clone (done by the test's own environment) or run the tests
SETUP = ("python -m venv", ". .venv", "pip install", "pytest")  # . .venv/bin/activate, . .venv-test/...
#: two studies with explicit step sizes, one of them a single run (numpy: no compiling)
SMALL = {
    "tiny": {
        "problem": "planar_pendulum",
        "backend": "numpy",
        "methods": [{"k": 1, "s": 1}],
        "t_end": 0.2,
        "h": [0.1, 0.05],
        "errors": {"reference": "exact", "norm": 1, "sample": "all"},
    },
    "one": {
        "problem": "planar_pendulum",
        "backend": "numpy",
        "methods": [{"k": 2, "s": 2}],
        "t_end": 0.2,
        "h": [0.1],
        "errors": {"reference": "exact", "norm": 1, "sample": "all"},
    },
}


def env() -> dict:
    return dict(os.environ, MPLBACKEND="Agg", PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")


def clone(dest: Path) -> Path:
    """What a clone holds besides the installed packages: the Snakefile, the rules, the config, the profile."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "Snakefile", dest)
    for d in ("workflow", "config", "profiles"):
        shutil.copytree(ROOT / d, dest / d, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def blocks(path: Path) -> list[tuple[str, str]]:
    """(language, text) of each fenced code block, in order."""
    return re.findall(r"^```(\w+)\n(.*?)^```", path.read_text(), re.S | re.M)


def run(cmd, cwd: Path, timeout: int = 900) -> subprocess.CompletedProcess:
    shell = isinstance(cmd, str)
    proc = subprocess.run(cmd, cwd=cwd, env=env(), capture_output=True, text=True, timeout=timeout, shell=shell)
    assert proc.returncode == 0, f"{cmd} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc


def sh_steps(block: str) -> list[str]:
    """The commands of a ```sh block a user runs in a clone that is set up already."""
    steps = []
    for line in block.splitlines():
        for part in line.split(" && "):
            part = part.strip()
            if part and not part.startswith("#") and not part.startswith(SETUP):
                steps.append(part)
    return steps


@pytest.fixture(scope="module")
def main_job(tmp_path_factory) -> Path:
    """A clone in which the README's blocks ran, in order, from its main job on."""
    work = clone(tmp_path_factory.mktemp("readme"))
    ran = []
    for i, (lang, text) in enumerate(blocks(ROOT / "README.md")):
        if lang == "sh":
            for step in sh_steps(text):
                run(step, work)
                ran.append(step)
        elif lang == "python":
            first = text.splitlines()[0]
            saved = re.match(r"#\s*(\w+\.py)\b", first)
            if saved:  # a file the user saves (e.g. my_problems.py), imported by later blocks
                (work / saved.group(1)).write_text(text)
                continue
            (work / f"readme_block_{i}.py").write_text(text)
            run([sys.executable, f"readme_block_{i}.py"], work)
            ran.append(f"python block {i}")
        elif lang == "yaml" and "studies:" in text:
            from hbvm_workflow.loading import load_studies

            assert load_studies({"studies": yaml.safe_load(text)["studies"]}), text
    assert any(step.startswith("snakemake") for step in ran), ran  # the main job ran
    assert sum(r.startswith("python block") for r in ran) >= 2, ran
    return work


def test_readme_blocks_run_as_written(main_job):
    assert (main_job / "results" / "table1" / "table.md").exists()


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """The two small studies through plain ``snakemake`` (no flags: the default profile's cores)."""
    work = clone(tmp_path_factory.mktemp("small"))
    (work / "config" / "config.yaml").write_text(yaml.safe_dump({"studies": SMALL}, sort_keys=False))
    proc = run(["snakemake"], work, timeout=600)
    return work, proc


#: a backticked name in a description cell that is a path the workflow writes
PATHLIKE = re.compile(r"^[\w<>=./-]+\.(zarr\.zip|zarr|csv|md|tex|html|png|pdf|log|json)$")


def doc_paths() -> list[str]:
    """The results and logs paths named in backticks in the README and docs/workflow.md's outputs tables:
    the paths of the first column, and the file names the descriptions give (``h=<h>.zarr.zip``)."""
    out = []
    for doc in (ROOT / "README.md", ROOT / "docs" / "workflow.md"):
        for line in doc.read_text().splitlines():
            if line.startswith("| `results/") or line.startswith("| `logs/"):
                cells = line.split("|")[1:-1]
                out += re.findall(r"`([^`]+)`", cells[0])
                out += [s for cell in cells[1:] for s in re.findall(r"`([^`]+)`", cell) if PATHLIKE.match(s)]
    return out


def expand(span: str, previous: str) -> str:
    """A documented path as a glob: placeholders (<study>, <method>, <n>, <h>) match any name; a bare
    name follows the previous path's folder (``errors.zarr``), a bare extension its stem (``.tex``)."""
    if span.startswith("."):
        span = previous.rsplit(".", 1)[0] + span
    elif not span.startswith(("results/", "logs/")):
        span = previous.rsplit("/", 1)[0] + "/" + span
    return re.sub(r"<[^>]+>", "*", span).rstrip("/")


def test_every_path_the_docs_name_exists(main_job, small):
    work, _ = small
    spans = doc_paths()
    assert any("n=<n>.zarr.zip" in s for s in spans) and any("h=<h>.zarr.zip" in s for s in spans), spans
    missing = []
    previous = ""
    for span in spans:
        if span.startswith(("results/", "logs/")):
            previous = span
        if span.endswith((".failed.json", "runs.zarr")) or span.startswith("results/beyond"):
            continue  # a failed run's marker; the opt-in beyond studies and sweeps (test_sweep_shards writes runs.zarr)
        pattern = expand(span, previous)
        if not any(any(base.glob(pattern)) for base in (main_job, work)):
            missing.append(f"{span} ({pattern})")
    assert not missing, f"paths the docs name that no run wrote: {missing}"
    assert (main_job / "results/table1/runs/hbvm_k2_s2/n=3.zarr.zip").is_file()
    assert (work / "results/tiny/runs/hbvm_k1_s1/h=0.05.zarr.zip").is_file()


def test_tables_name_the_rates_show_h_and_say_the_convention(main_job):
    md = (main_job / "results" / "table1" / "table.md").read_text()
    assert "| n | h | e_s | rate(e_s) | e_lambda | rate(e_lambda) | e_H | e_g | e_hc | rate(e_hc) |" in md
    assert "| 3 | 0.0125 |" in md  # h = 0.1 * 2^-3 beside n = 3
    assert "errors against the exact solution, in the 1-norm, sampled at every step" in md
    tex = (main_job / "results" / "table2" / "table.tex").read_text()
    assert r"rate($e_\lambda$)" in tex and "sampled at whole periods" in tex
    html = (main_job / "results" / "table3" / "table.html").read_text()
    assert "against the same method with h/2" in html and "<th>rate(e_hc)</th>" in html


def test_errors_select_by_step_number(main_job):
    from hbvm_workflow import open_errors

    err = open_errors("table1", results=str(main_job / "results"))
    # table1: h = 0.1 * 2^-n, so n = 3 is h = 0.0125 exactly (a power of two times 0.1, as the study computes it)
    assert err.e_s.sel(scheme="hbvm_k2_s2", n=3).item() == err.e_s.sel(scheme="hbvm_k2_s2", h=0.1 * 2.0**-3).item()
    err2 = open_errors("table2", results=str(main_job / "results"))
    assert err2.sel(n=20).h.item() == err2.h.values[1]  # h = T/20, no method="nearest" needed


def test_plain_snakemake_quiet_logs(small):
    work, proc = small
    out = proc.stdout + proc.stderr
    assert "reason:" not in out, out[-3000:]  # the default profile's quiet: reason
    assert out.count("computing on") == 1, out[-3000:]  # a fact of the job: once, not once per study
    assert out.count("Dask task") == 1, out[-3000:]
    assert "[one] 1 run: 0 reused, 1 to compute" in out and "1 runs" not in out, out[-3000:]
    assert "hbvm_k1_s1/h=0.05: ok" not in out  # per-run lines: the log files only
    assert "hbvm_k1_s1/h=0.05: ok" in (work / "logs" / "tiny" / "solve.log").read_text()
    assert "computing on" in (work / "logs" / "one" / "solve.log").read_text()
    assert re.search(r"Provided cores: \d+", out), out[-3000:]  # cores: all, from the profile


def test_list_studies_counts_runs(small):
    work, _ = small
    proc = run([sys.executable, "-m", "hbvm_workflow", "list", "studies"], work)
    lines = proc.stdout.splitlines()
    assert "tiny (convergence, planar_pendulum): 2 runs: 2 computed, 0 reused, 0 failed, 0 damaged, 0 missing" in lines
    assert "one (convergence, planar_pendulum): 1 run: 1 computed, 0 reused, 0 failed, 0 damaged, 0 missing" in lines
    (work / "results/tiny/runs/hbvm_k1_s1/h=0.05.zarr.zip").unlink()
    proc = run([sys.executable, "-m", "hbvm_workflow", "list", "studies"], work)
    assert "tiny (convergence, planar_pendulum): 2 runs: 1 computed, 0 reused, 0 failed, 0 damaged, 1 missing" in (
        proc.stdout.splitlines()
    )


def test_a_bad_config_is_one_line_with_a_suggestion(tmp_path):
    work = clone(tmp_path)
    bad = {"a": {**SMALL["one"], "halving": 2}}
    (work / "config" / "config.yaml").write_text(yaml.safe_dump({"studies": bad}, sort_keys=False))
    proc = subprocess.run(["snakemake"], cwd=work, env=env(), capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "WorkflowError" not in out and "Traceback" not in out, out
    (line,) = [x for x in out.splitlines() if x.startswith("bad config: ")]
    assert "unknown key 'halving'" in line and line.endswith("did you mean 'halvings'?"), line
    assert not (work / "results").exists() and not (work / "logs").exists()
