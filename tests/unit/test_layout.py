"""Every path from hbvm_workflow.layout: the published names pinned, no file name written out in a rule
file, the rule files in the shape `snakemake --lint` wants, and the conda environment of the rules in step
with pyproject.toml. (CI runs `snakemake --lint` itself: .ci/run.)"""

import io
import re
import tokenize
import tomllib
from pathlib import Path

import pytest
import yaml

from hbvm_workflow import layout
from hbvm_workflow.kinds import KINDS

ROOT = Path(__file__).resolve().parents[2]
RULE_FILES = sorted((ROOT / "workflow" / "rules").glob("*.smk")) + [ROOT / "Snakefile"]

#: what a file name of the results or logs looks like in a string literal (not the report's captions,
#: ../report/table.rst: files of the workflow's source, next to the rules)
PATH_LIKE = re.compile(
    r"errors\.(csv|zarr)|solve\.json|timings\.csv|table\.(md|tex|html|\{)|\.(png|pdf|log|md|csv|tex|html)\b"
    r"|logs/|\.runs-|beyond/"
)
#: a path built in code from the results folder (an f-string or a join)
BUILT = re.compile(r"\{RESULTS\}|join\(\s*RESULTS\b")


def path_literals(source: str) -> list[tuple[int, str]]:
    """(line, text) of each string literal of a Snakemake file (rules and Python alike) that writes out a
    results path, and of each path joined from RESULTS by hand; comments and docstrings don't count."""
    skip = (tokenize.COMMENT, tokenize.NL)
    tokens = [t for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type not in skip]
    found, after_def = [], False  # after_def: from a def or class to its body's first statement
    for i, tok in enumerate(tokens):
        prev = tokens[i - 1] if i else None
        nxt = tokens[i + 1] if i + 1 < len(tokens) else None
        if tok.type == tokenize.NAME and tok.string in ("def", "class"):
            after_def = True
            continue
        if tok.type == tokenize.STRING:
            docstring = after_def and prev.type == tokenize.INDENT and nxt is not None and nxt.type == tokenize.NEWLINE
            if not docstring and (PATH_LIKE.search(tok.string) or BUILT.search(tok.string)):
                found.append((tok.start[0], tok.string))
        elif tok.string == "RESULTS" and prev is not None and prev.string == "(" and tokens[i - 2].string == "join":
            found.append((tok.start[0], "join(RESULTS, ...)"))
        if prev is not None and prev.type == tokenize.INDENT:
            after_def = False
    return found


# --------------------------------------------------------------------------- the published names
def test_the_published_names_stay_where_they_are():
    assert layout.aggregate_outputs("results", "table1") == {
        "zarr": "results/table1/errors.zarr",
        "csv": "results/table1/errors.csv",
        "timings": "results/table1/timings.csv",
        "md": "results/table1/table.md",
        "tex": "results/table1/table.tex",
        "html": "results/table1/table.html",
        "png": "results/table1/table1.png",
        "pdf": "results/table1/table1.pdf",
    }
    assert layout.manifest_path("results", "table1") == "results/table1/solve.json"
    assert layout.runs_marker("results", "table1", "ab12") == "results/table1/.runs-ab12"
    assert layout.beyond_table("results", "wp", "work_precision", "csv") == "results/wp/work_precision.csv"
    assert layout.beyond_summary("results", "long_time", "png") == "results/beyond/long_time.png"
    assert layout.time_to_accuracy_csv("results") == "results/beyond/time_to_accuracy.csv"
    assert layout.log_path("table1", "solve") == "logs/table1/solve.log"
    assert layout.log_path(layout.BEYOND, "long_time") == "logs/beyond/long_time.log"
    assert layout.SLURM_LOGS == "logs/dask-slurm"
    assert layout.timings_beside("out/s/errors.csv") == "out/s/timings.csv"


def test_a_wildcard_study_gives_the_rules_patterns():
    assert layout.errors_zarr("res", "{study}") == "res/{study}/errors.zarr"
    assert layout.figure_path("res", "{study}", "png") == "res/{study}/{study}.png"
    assert layout.beyond_summary("res", "{kind}", "md") == "res/beyond/{kind}.md"


def test_each_kind_builds_its_files():
    assert KINDS["convergence"].targets("results", "s") == [
        "results/s/errors.csv",
        "results/s/errors.zarr",
        "results/s/table.md",
        "results/s/table.tex",
        "results/s/table.html",
        "results/s/s.png",
        "results/s/s.pdf",
    ]
    assert KINDS["sweep"].targets("results", "s") == KINDS["convergence"].targets("results", "s")
    assert KINDS["work_precision"].targets("results", "w") == [
        "results/w/errors.csv",
        "results/w/w.png",
        "results/w/w.pdf",
        "results/w/work_precision.md",
        "results/w/work_precision.csv",
    ]
    assert KINDS["long_time"].targets("r", "l")[-2:] == ["r/l/long_time.md", "r/l/long_time.csv"]


def test_an_errors_store_is_told_by_its_manifest(tmp_path):
    study = tmp_path / "s"
    (study / "errors.zarr").mkdir(parents=True)
    assert not layout.is_errors_store(str(study / "errors.zarr"))
    (study / "solve.json").write_text("{}")
    assert layout.is_errors_store(str(study / "errors.zarr"))
    assert not layout.is_errors_store(str(study / "solve.json"))


# --------------------------------------------------------------------------- the rule files
def test_the_check_finds_a_path_written_out():
    old = '''
def f(name):
    """The manifest results/<study>/solve.json."""
    return os.path.join(RESULTS, name)  # errors.csv


rule aggregate:
    input:
        manifest=f"{RESULTS}/{{study}}/solve.json",
    output:
        timings=layout.timings_csv(RESULTS, "{study}"),
    log:
        "logs/{study}/aggregate.log"
    script:
        "../scripts/aggregate.py"
'''
    found = path_literals(old)
    assert [line for line, _ in found] == [4, 9, 13], found


@pytest.mark.parametrize("path", RULE_FILES, ids=lambda p: p.name)
def test_no_rule_file_writes_out_a_path(path):
    found = path_literals(path.read_text())
    assert not found, f"{path.name}: paths not from hbvm_workflow.layout: {found}"


def test_rules_and_functions_live_apart():
    """What `snakemake --lint` checks (its regexes, comments and strings included): a file with a rule defines
    no function; the functions are in rules/common.smk, which defines no rule."""
    rule, func = re.compile("rule .+?:"), re.compile("def .+?:")
    for path in RULE_FILES:
        text = path.read_text()
        assert not (rule.search(text) and func.search(text)), f"{path.name}: rules and functions in one file"
    assert not rule.search((ROOT / "workflow" / "rules" / "common.smk").read_text())


def test_every_rule_with_a_job_names_the_environment():
    """`conda: HBVM_ENV` on each rule with a job; Snakemake reads the path relative to the rule's file."""
    env = re.search(r'^HBVM_ENV = "(.+)"$', (ROOT / "workflow" / "rules" / "common.smk").read_text(), re.M)
    assert (ROOT / "workflow" / "rules" / env.group(1)).resolve() == ROOT / "workflow" / "envs" / "hbvm.yaml"
    assert not [p for p in RULE_FILES if p.parent.name != "rules" and "script:" in p.read_text()]
    for path in RULE_FILES:
        text = path.read_text()
        jobs = len(re.findall(r"^\s+(script|shell|run):", text, re.M))
        assert len(re.findall(r"^\s+conda:\n\s+HBVM_ENV$", text, re.M)) == jobs, path.name


# --------------------------------------------------------------------------- the conda environment
def _requirement(text):
    from packaging.requirements import Requirement

    req = Requirement(re.sub(r"\s+", "", text.split("#")[0]))
    return req.name.lower(), req.specifier


def test_the_environment_lists_every_dependency():
    """workflow/envs/hbvm.yaml: each of pyproject.toml's dependencies (its conda-forge name where that
    differs), with the same versions, and Python as pyproject requires it."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    env = yaml.safe_load((ROOT / "workflow" / "envs" / "hbvm.yaml").read_text())
    assert env["channels"][0] == "conda-forge"
    conda_names = {"matplotlib": "matplotlib-base"}
    listed = {}
    for dep in env["dependencies"]:
        if isinstance(dep, dict):
            pip = dep["pip"]
            assert pip[-1] == "-e ../..", "the project itself, last"
            listed |= dict(_requirement(d) for d in pip[:-1])
        elif dep != "pip":
            listed |= dict([_requirement(dep)])
    assert str(listed.pop("python")) == project["requires-python"]
    wanted = dict(_requirement(d) for d in project["dependencies"])
    wanted = {conda_names.get(name, name): spec for name, spec in wanted.items()}
    assert listed == wanted
