"""Bad workflow configs fail before any job runs, with one line naming the key and what was expected.

Each case of WORKFLOW below (one or a few of each origin of a ConfigError) is a real
``snakemake --cores 2`` on the repository's Snakefile in its own temporary folder
(tests/ on PYTHONPATH, so ``bad_problems:<factory>`` imports like a user's module). Every case must

- exit non-zero,
- print exactly one ``bad config: ...`` line that contains the expected fragment,
- start no job (no "rule ..." line) and write nothing: the folder holds only
  config.yaml and Snakemake's own run log (.snakemake/log), no results/, no logs/.

The workflow cases run concurrently (three Snakemake start-ups at a time) in one
fixture; each parametrized test then checks one of them. The other cases
(API_ONLY) are checked only in-process, through the functions common.smk calls;
every case is checked that way too.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml
from _reliability import snakemake, write_config

GOOD = {
    "problem": "planar_pendulum",
    "backend": "numpy",
    "methods": [{"k": 2, "s": 2}],
    "t_end": 1,
    "h": [0.1, 0.05],
    "errors": {"reference": "exact", "norm": 1, "sample": "all"},
}
DROP = object()  # remove the key from the good study


def study(**over) -> dict:
    out = dict(GOOD)
    for k, v in over.items():
        if v is DROP:
            out.pop(k, None)
        else:
            out[k] = v
    return out


def cfg(**over) -> dict:
    return {"studies": {"bad": study(**over)}}


# (id, config dict or YAML text, the exact fragment of the one-line message)
CASES = [
    (
        "unknown problem",
        cfg(problem="no_such_problem"),
        "studies.bad.problem = 'no_such_problem': unknown problem; built-in problems are branched_tree, chain, "
        "closed_chain, conical_pendulum,",
    ),
    (
        "factory module does not import",
        cfg(problem="no_such_module_xyz:make"),
        "studies.bad.problem = 'no_such_module_xyz:make': cannot import module 'no_such_module_xyz'",
    ),
    (
        "factory not in the module",
        cfg(problem="bad_problems:no_such_factory"),
        "studies.bad.problem = 'bad_problems:no_such_factory': module 'bad_problems' has no callable 'no_such_factory'",
    ),
    (
        "factory returns no Problem",
        cfg(problem="bad_problems:not_a_problem", errors={"reference": "none"}),
        "studies.bad.problem = 'bad_problems:not_a_problem': factory returned dict, expected a Problem",
    ),
    (
        "factory raises",
        cfg(problem="bad_problems:raises", errors={"reference": "none"}),
        "studies.bad.problem = 'bad_problems:raises': the factory raised RuntimeError: the factory broke on purpose",
    ),
    (
        "factory module raises on import",
        cfg(problem="broken_problems:make"),
        "studies.bad.problem = 'broken_problems:make': importing 'broken_problems' raised RuntimeError: "
        "this module is broken on purpose",
    ),
    (
        "TypeError inside the factory",
        cfg(problem="bad_problems:type_error_inside", errors={"reference": "none"}),
        "studies.bad.problem = 'bad_problems:type_error_inside': the factory raised TypeError: unsupported operand",
    ),
    (
        "params the factory does not take",
        cfg(problem="bad_problems:type_error_inside", params={"bogus": 1}, errors={"reference": "none"}),
        "studies.bad.params = {'bogus': 1}: got an unexpected keyword argument 'bogus'",
    ),
    (
        "a run of 10^10 steps",
        cfg(h=[1e-10]),
        "studies.bad: run hbvm_k2_s2/h=1e-10 takes 1e+10 steps and stores 840 GB (about 23.1 days on one core): "
        "above limits.max_steps = 1e+08; raise limits.max_steps to run it",
    ),
    (
        "a store above limits.max_bytes",
        {**cfg(), "limits": {"max_bytes": 1000}},
        "studies.bad: run hbvm_k2_s2/h=0.05 takes 20 steps and stores 1.74e-06 GB",
    ),
    (
        "chunk of 10^11 rows",
        cfg(chunk=10**11),
        "config.studies.bad.chunk = 100000000000: 100000000000 is greater than the maximum of 4194304",
    ),
    ("k < s", cfg(methods=[{"k": 1, "s": 2}]), "studies.bad.methods[0]: k = 1 < s = 2; HBVM(k, s) needs k >= s"),
    ("s < 1", cfg(methods=[{"k": 1, "s": 0}]), "config.studies.bad.methods[0].s = 0: 0 is less than the minimum of 1"),
    ("h <= 0", cfg(h=[0.1, 0.0]), "config.studies.bad.h[1] = 0.0: 0.0 is less than or equal to the minimum of 0"),
    (
        "h = .nan",
        yaml.safe_dump(cfg(h=[0.1]), sort_keys=False).replace("- 0.1", "- .nan"),
        "studies.bad.h = nan: expected a finite number > 0",
    ),
    ("h = .inf", cfg(h=[math.inf]), "studies.bad.h = inf: expected a finite number > 0"),
    ("t_end <= 0", cfg(t_end=-1), "config.studies.bad.t_end = -1: -1 is less than or equal to the minimum of 0"),
    (
        "h does not divide t_end",
        cfg(h=[0.3]),
        "studies.bad.methods[0]: h = 0.3 does not divide the interval [0, 1.0] into whole steps",
    ),
    (
        "h0 halvings do not divide t_end",
        cfg(h=DROP, h0=0.3, halvings=1),
        "studies.bad.methods[0]: h = 0.3 does not divide the interval [0, 1.0] into whole steps",
    ),
    (
        "norm 3",
        cfg(errors={"reference": "exact", "norm": 3}),
        "config.studies.bad.errors.norm = 3: 3 is not one of [1, 2, 'inf']",
    ),
    (
        "reference bogus",
        cfg(errors={"reference": "bogus"}),
        "config.studies.bad.errors.reference = 'bogus': 'bogus' is not one of ['exact', 'reference', 'self', 'none']",
    ),
    (
        "reference exact without a closed form",
        cfg(problem="modified_pendulum", errors={"reference": "exact", "norm": "inf"}),
        "studies.bad.errors.reference = 'exact': problem 'modified_pendulum' has no closed-form solution",
    ),
    (
        "sample periods without a period",
        cfg(errors={"reference": "exact", "norm": 1, "sample": "periods"}),
        "studies.bad.errors.sample = 'periods': problem 'planar_pendulum' has no period",
    ),
    (
        "interval in periods without a period",
        cfg(t_end=DROP, periods=2),
        "studies.bad.periods: problem 'planar_pendulum' has no period; give t_end",
    ),
    (
        "sample spacing off the step grid",
        cfg(errors={"reference": "exact", "norm": 1, "sample": 0.07}),
        "studies.bad.methods[0]: errors.sample = 0.07 is not a multiple of h * save_every = 0.1 (h = 0.1)",
    ),
    ("unknown top-level key", {**cfg(), "studys": {}}, "config: unknown key 'studys' (expected one of"),
    ("unknown study key", cfg(stepsize=0.1), "config.studies.bad: unknown key 'stepsize' (expected one of"),
    (
        "unknown errors key",
        cfg(errors={"reference": "exact", "nrom": 1}),
        "config.studies.bad.errors: unknown key 'nrom' (expected one of hc_norm, lambda_sample, norm,",
    ),
    (
        "unknown method key",
        cfg(methods=[{"k": 2, "s": 2, "stages": 3}]),
        "config.studies.bad.methods[0]: unknown key 'stages' (expected one of",
    ),
    (
        "solver bogus",
        cfg(solver="newton"),
        "config.studies.bad.solver = 'newton': 'newton' is not one of ['fixed-point', 'blended']",
    ),
    (
        "initial data off the constraint",
        cfg(problem="bad_problems:off_constraint", errors={"reference": "none"}),
        "studies.bad.problem = 'bad_problems:off_constraint': off_constraint: inconsistent initial data, "
        "|g(q0)| = 2.100e-01 (expected 0)",
    ),
    (
        "initial data violate the hidden constraint",
        cfg(problem="bad_problems:hidden_violated", errors={"reference": "none"}),
        "studies.bad.problem = 'bad_problems:hidden_violated': hidden_violated: inconsistent initial data, "
        "hidden constraint |G(q0)^T M^-1 p0| = 2.000e+00 (expected 0)",
    ),
    (
        "callback returns the wrong shape",
        cfg(problem="bad_problems:wrong_shape", errors={"reference": "none"}),
        "studies.bad.problem = 'bad_problems:wrong_shape': wrong_shape: callback grad_U returned shape (2, 1), "
        "expected (2, 2)",
    ),
    (
        "singular G^T M^-1 G",
        cfg(problem="bad_problems:singular", errors={"reference": "none"}),
        "studies.bad.problem = 'bad_problems:singular': singular: G^T M^-1 G is singular at q0",
    ),
    (
        "callback returns NaN",
        cfg(problem="bad_problems:nan_at_start", errors={"reference": "none"}),
        "studies.bad.problem = 'bad_problems:nan_at_start': nan_at_start: callback U returned non-finite values at q0",
    ),
    (
        "G of the wrong sign",
        cfg(problem="bad_problems:bead_on_parabola", errors={"reference": "none"}),
        "studies.bad.problem = 'bad_problems:bead_on_parabola': bead_on_parabola: callback G does not match the "
        "central differences of g at q0 (q = [0.5, 0.25]): relative discrepancy 2.00e+00",
    ),
    (
        "g not vectorised",
        cfg(problem="bad_problems:g_of_one_point", errors={"reference": "none"}),
        "studies.bad.problem = 'bad_problems:g_of_one_point': g_of_one_point: callback g raised IndexError for Q "
        "of shape (1, 2) (index 1 is out of bounds for axis 0 with size 1); callbacks receive Q of shape (n, m) "
        "(n points) and must return (n, ...)",
    ),
    (
        "U not vectorised",
        cfg(problem="bad_problems:U_of_one_point", errors={"reference": "none"}),
        "studies.bad.problem = 'bad_problems:U_of_one_point': U_of_one_point: callback U raised IndexError for Q "
        "of shape (1, 2)",
    ),
    ("unknown dask key", {**cfg(), "dask": {"workers": 2}}, "config.dask: unknown key 'workers' (expected one of"),
    (
        "select an unknown study",
        {**cfg(), "select": ["tabel1"]},
        "config: select: unknown study 'tabel1' (studies are bad)",
    ),
]
IDS = [c[0] for c in CASES]
#: checked in-process only (the same functions common.smk calls), to keep the Snakemake start-ups few: every
#: ConfigError takes the one path of common.smk to its one line (``bad config: ...``, exit 1), so the workflow
#: runs keep one or a few cases of each origin -- the schema (top level, a study key, a value), Snakemake's own
#: YAML (.nan), resolving and importing the problem (each way), the problem's checks (data, vectorisation), the
#: expansion (method, reference) and the limits -- and the rest are these (a wrong G also runs through
#: Snakemake in test_reruns.py)
API_ONLY = {
    "chunk of 10^11 rows",
    "s < 1",
    "t_end <= 0",
    "norm 3",
    "reference bogus",
    "unknown errors key",
    "solver bogus",
    "initial data violate the hidden constraint",
    "callback returns the wrong shape",
    "singular G^T M^-1 G",
    "callback returns NaN",
    "G of the wrong sign",
    "h does not divide t_end",
    "sample periods without a period",
    "TypeError inside the factory",
    "params the factory does not take",
    "a store above limits.max_bytes",
    "factory not in the module",
    "factory returns no Problem",
    "h = .inf",
    "h0 halvings do not divide t_end",
    "interval in periods without a period",
    "sample spacing off the step grid",
    "unknown method key",
    "unknown dask key",
    "select an unknown study",
    "g not vectorised",
}
WORKFLOW = [c for c in CASES if c[0] not in API_ONLY]


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, tuple[Path, object]]:
    """Run every case (three at a time); id -> (working folder, finished process)."""

    def one(case):
        name, config, _ = case
        workdir = tmp_path_factory.mktemp("badcfg")
        if isinstance(config, str):
            write_config(workdir, text=config)
        else:
            write_config(workdir, config["studies"], **{k: v for k, v in config.items() if k != "studies"})
        return name, (workdir, snakemake(workdir, "--cores", "2", timeout=180))

    with ThreadPoolExecutor(max_workers=3) as pool:
        return dict(pool.map(one, WORKFLOW))


def test_the_table_is_large_and_its_messages_distinct():
    assert len(WORKFLOW) >= 12 and API_ONLY <= set(IDS)
    assert len(set(IDS)) == len(IDS)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_bad_config_message_in_process(case):
    """Every case through load_studies, as workflow/rules/common.smk calls it."""
    from hbvm_core.errors import ConfigError
    from hbvm_workflow.loading import load_studies

    name, config, fragment = case
    config = yaml.safe_load(config) if isinstance(config, str) else config
    with pytest.raises(ConfigError) as info:
        load_studies(config)
    message = str(info.value)
    assert "\n" not in message and fragment in message, message


def test_the_good_study_runs_its_checks_cleanly():
    """The control: the study every case starts from passes every check the cases trip."""
    from hbvm_workflow.loading import load_studies

    assert list(load_studies(cfg())) == ["bad"]


@pytest.mark.slow
@pytest.mark.parametrize("case", WORKFLOW, ids=[c[0] for c in WORKFLOW])
def test_bad_config_fails_before_any_job_with_one_line(outcomes, case):
    name, _, fragment = case
    workdir, proc = outcomes[name]
    out = proc.stdout
    assert proc.returncode != 0, out[-2000:]
    assert "Traceback" not in out, out[-3000:]
    lines = [line for line in out.splitlines() if line.startswith("bad config: ")]
    assert len(lines) == 1, out[-3000:]
    assert fragment in lines[0], f"expected {fragment!r} in\n{lines[0]}"
    # no job started, nothing written: only the config and Snakemake's own run log
    assert "rule " not in out and "localrule" not in out, out[-2000:]
    written = sorted(
        str(p.relative_to(workdir))
        for p in workdir.rglob("*")
        if p.is_file() and not p.relative_to(workdir).parts[:2] == (".snakemake", "log")
    )
    assert written == ["config.yaml"], written
