"""Study expansion (hbvm_workflow.study): the published config, step-size rules, partners, labels, hashes, bad input."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import yaml

from hbvm_core.errors import ConfigError
from hbvm_core.problems.spherical import PERIOD
from hbvm_workflow.loading import SCHEMA, load_studies, validate_config
from hbvm_workflow.study import expand_study, method_label, step_sizes

ROOT = Path(__file__).resolve().parents[2]
CONFIG = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())


@pytest.fixture(scope="module")
def published():
    return load_studies(copy.deepcopy(CONFIG), SCHEMA)


def small(**over):
    cfg = {
        "problem": "planar_pendulum",
        "methods": [{"k": 1, "s": 1}],
        "t_end": 1,
        "h": [0.1, 0.05],
        "errors": {"reference": "exact", "norm": 1, "sample": "all"},
    }
    cfg.update(over)
    return cfg


def test_published_config_has_the_seven_studies_with_the_paper_grids(published):
    assert list(published)[:7] == ["table1", "table2", "table3", "table4", "fig1", "fig2", "fig3"]
    t1 = published["table1"]
    assert [m.name for m in t1.methods] == ["HBVM(1,1)", "HBVM(2,2)", "HBVM(3,3)"]
    assert [r.n for r in t1.methods[0].rows] == list(range(9))
    assert [r.h for r in t1.methods[0].rows] == [0.1 * 2.0**-n for n in range(9)]
    assert len(t1.jobs) == 27 and t1.reference == "exact" and t1.convention.norm == 1

    t2 = published["table2"]
    assert [len(m.rows) for m in t2.methods] == [10, 8, 6, 4]
    assert [r.n for r in t2.methods[3].rows] == [10, 20, 30, 40]
    assert t2.methods[1].rows[1].h == PERIOD / 20
    assert math.isclose(t2.t_end, 10 * PERIOD)
    assert t2.convention.sample == "periods" and t2.convention.lambda_sample == "all"

    t3 = published["table3"]
    assert [(m.k, m.s) for m in t3.methods] == [(3, 1), (6, 2), (9, 3)]
    # reference: self schedules the h/2 runs: n = 0..8 rows, and one extra run n = 9 per method
    assert len(t3.rows) == 27 and len(t3.jobs) == 30
    for m in t3.methods:
        for a, b in zip(m.rows, m.rows[1:]):
            assert a.partner == b.job  # the h/2 partner of row n is the run of row n + 1
        assert t3.jobs[m.rows[-1].partner].h == 0.1 * 2.0**-9
    assert t3.convention.sample == 0.1 and t3.convention.hc_norm == 1

    t4 = published["table4"]
    assert len(t4.rows) == 12 and len(t4.jobs) == 15
    assert published["fig3"].jobs[next(iter(published["fig3"].jobs))].steps == 10_000
    fig1 = published["fig1"]
    assert len(fig1.jobs) == 1 and fig1.rows[0].h == PERIOD / 100 and math.isclose(fig1.t_end, 100 * PERIOD)
    assert fig1.plot == "solution_error" and published["fig2"].plot == "invariants"


def test_job_ids_hashes_and_stores_are_stable_and_change_with_the_parameters():
    a = expand_study("s", small())
    b = expand_study("s", small())
    assert [j.id for j in a.jobs.values()] == ["hbvm_k1_s1/h=0.1", "hbvm_k1_s1/h=0.05"]
    assert [j.hash for j in a.jobs.values()] == [j.hash for j in b.jobs.values()]
    assert a.jobs["hbvm_k1_s1/h=0.1"].store == "results/s/runs/hbvm_k1_s1/h=0.1.zarr.zip"
    longer = expand_study("s", small(t_end=2))
    assert longer.jobs["hbvm_k1_s1/h=0.1"].hash != a.jobs["hbvm_k1_s1/h=0.1"].hash
    blended = expand_study("s", small(solver="blended"))
    assert blended.jobs["hbvm_k1_s1_blended/h=0.1"].hash != a.jobs["hbvm_k1_s1/h=0.1"].hash
    # adding a step size adds one job and leaves the others as they were
    more = expand_study("s", small(h=[0.1, 0.05, 0.025]))
    assert set(more.jobs) - set(a.jobs) == {"hbvm_k1_s1/h=0.025"}
    assert all(more.jobs[i].hash == a.jobs[i].hash for i in a.jobs)


def test_step_size_rules():
    assert step_sizes({"h": [0.05, 0.1]}, None, "x") == [(None, 0.1, 0.05), (None, 0.05, 0.025)]
    assert [n for n, *_ in step_sizes({"h0": 0.2, "halvings": 3}, None, "x")] == [0, 1, 2, 3]
    rows = step_sizes({"period_divisions": {"start": 10, "step": 5, "stop": 20}}, 2.0, "x")
    assert rows == [(10, 0.2, 0.1), (15, 2.0 / 15, 2.0 / 30), (20, 0.1, 0.05)]
    with pytest.raises(ConfigError, match="exactly one rule"):
        step_sizes({"h": [0.1], "h0": 0.1}, None, "x")
    with pytest.raises(ConfigError, match="no period"):
        step_sizes({"period_divisions": [10]}, None, "x")


def test_method_labels_are_stable_and_file_name_safe():
    assert method_label({"method": "hbvm", "k": 6, "s": 2, "solver": "fixed-point"}) == "hbvm_k6_s2"
    assert method_label({"k": 6, "s": 2, "solver": "blended"}) == "hbvm_k6_s2_blended"
    assert method_label({"k": 6, "s": 3, "multiplier": "polynomial", "projection": True}) == "hbvm_k6_s3_poly_proj"
    assert method_label({"method": "rattle"}) == "rattle"
    assert method_label({"method": "dop853", "rtol": 1e-8, "projection": True}) == "dop853_rtol1e-08_proj"


def test_per_method_step_lists_override_the_study_rule():
    cfg = {
        "problem": "conical_pendulum",
        "periods": 1,
        "period_divisions": [10, 20],
        "methods": [{"k": 1, "s": 1}, {"k": 2, "s": 2, "period_divisions": [10]}],
        "errors": {"reference": "exact", "norm": "inf", "sample": "periods"},
    }
    st = expand_study("s", cfg)
    assert [len(m.rows) for m in st.methods] == [2, 1]
    assert st.row_label == "n"


@pytest.mark.parametrize(
    "over, message",
    [
        ({"problem": "no_such_problem"}, r"studies\.s\.problem = 'no_such_problem': unknown problem"),
        ({"problem": "no_such_module:factory"}, r"cannot import module 'no_such_module'"),
        ({"methods": [{"k": 1, "s": 2}]}, r"methods\[0\]: k = 1 < s = 2"),
        ({"h": [0.1, -0.05]}, r"h = -0\.05: expected a finite number > 0"),
        ({"h": [0.3]}, r"h = 0\.3 does not divide the interval"),
        ({"periods": 2, "t_end": None}, r"periods: problem 'planar_pendulum' has no period"),
        ({"errors": {"reference": "exact", "norm": 3}}, r"errors\.norm = 3"),
        ({"errors": {"reference": "self", "sample": 0.03}}, r"errors\.sample = 0\.03 is not a multiple"),
        ({"methods": [{"k": 1, "s": 1}, {"k": 1, "s": 1}]}, r"duplicate method 'hbvm_k1_s1'"),
    ],
)
def test_bad_studies_fail_with_a_message_naming_the_key(over, message):
    cfg = {k: v for k, v in small(**over).items() if v is not None}
    with pytest.raises(ConfigError, match=message):
        expand_study("s", cfg)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda c: c["studies"]["table1"].update(colour="red"), r"config\.studies\.table1: unknown key 'colour'"),
        (lambda c: c["studies"]["table1"]["methods"][0].update(kk=1), r"methods\[0\]: unknown key 'kk'"),
        (lambda c: c["studies"]["table1"].update(h0=-0.1), r"config\.studies\.table1\.h0 = -0\.1"),
        (lambda c: c["studies"]["table1"]["errors"].update(reference="oracle"), r"errors\.reference = 'oracle'"),
        (lambda c: c.update(dask={"adress": "tcp://127.0.0.1:1"}), r"config\.dask: unknown key 'adress'"),
        (
            lambda c: c["studies"].update({"bad name": c["studies"]["fig1"]}),
            r"config\.studies: bad name 'bad name' \(letters, digits, _ and -, starting with a letter or digit\)",
        ),
        (lambda c: c["studies"]["table1"].pop("errors"), r"'errors' is a required property"),
    ],
)
def test_schema_errors_are_one_line_and_name_the_key(mutate, message):
    cfg = copy.deepcopy(CONFIG)
    mutate(cfg)
    with pytest.raises(ConfigError, match=message) as err:
        validate_config(cfg, SCHEMA)
    assert "\n" not in str(err.value)


def test_select_names_existing_studies():
    cfg = copy.deepcopy(CONFIG) | {"select": ["table1", "tabel2"]}
    with pytest.raises(ConfigError, match="select: unknown study 'tabel2'"):
        load_studies(cfg, SCHEMA)


def test_a_user_problem_by_module_path(tmp_path, monkeypatch):
    (tmp_path / "my_problems.py").write_text(
        "from hbvm_core.problems import planar_pendulum\n\ndef pendulum(**kw):\n    return planar_pendulum()\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    st = expand_study("u", small(problem="my_problems:pendulum"))
    assert st.problem == "my_problems:pendulum" and len(st.jobs) == 2


def test_warm_up_runs_one_step_per_distinct_problem_and_method():
    from hbvm_workflow.worker import warm_up

    st = expand_study("s", small(methods=[{"k": 1, "s": 1}, {"k": 2, "s": 2}], h=[0.1, 0.05, 0.025], backend="numpy"))
    assert len(st.jobs) == 6 and warm_up(st.jobs.values()) == 2
    diverging = expand_study("d", small(t_end=4, h=[2.0], backend="numpy"))
    assert warm_up(diverging.jobs.values()) == 1  # a step that fails is left to the real run


def test_workers_for_size_a_solve_job_by_its_estimated_work(published):
    """Seconds of work: one worker (the other cores go to other studies' jobs); hours: every core it may have."""
    from hbvm_core.methods import DOP853, HBVM, RATTLE
    from hbvm_workflow.runs import RUN_OVERHEAD_S, WORK_PER_WORKER_S, Job, work_seconds, workers_for

    STEP_NODE_S, NUMPY_STEP_NODE_S = HBVM.STEP_SECONDS  # the methods' declared cost models

    def solve_workers(jobs, cores, share=1.0):
        jobs = list(jobs)
        return workers_for(len(jobs), work_seconds(jobs), cores, share)

    table1 = published["table1"].jobs.values()
    assert sum(j.estimated_seconds() for j in table1) < WORK_PER_WORKER_S
    assert solve_workers(table1, cores=16) == 1

    def job(i, steps, problem="tethered_satellites", **method):
        return Job(
            "big",
            f"m{i}",
            "HBVM(6,2)",
            problem,
            {},
            method or {"k": 6, "s": 2},
            0.1,
            steps * 0.1,
            1,
            True,
            "auto",
            65536,
        )

    hour = round(3600 / (6 * STEP_NODE_S))  # steps of an hour's compiled HBVM(6,2)
    big = [job(i, hour) for i in range(40)]
    assert solve_workers(big, cores=16) == 16  # capped by the cores
    assert solve_workers(big[:3], cores=16) == 3  # by the runs
    assert solve_workers(big, cores=16, share=0.25) == 4  # by its share of the selected studies' work
    # the numpy path (a user's problem, a baseline) costs ~100x the compiled loop per step
    user = [job(i, 20_000, problem="tests.user_problems:double_pendulum") for i in range(8)]
    assert solve_workers(user, cores=8) == 8 and solve_workers(user[:1], cores=8) == 1
    assert job(0, 20_000, method="dop853").estimated_seconds() == RUN_OVERHEAD_S + 20_000 * DOP853.STEP_SECONDS[1]
    assert job(0, 20_000, method="rattle").estimated_seconds() == RUN_OVERHEAD_S + 20_000 * RATTLE.STEP_SECONDS[0]
    assert job(0, 20_000).estimated_seconds() == RUN_OVERHEAD_S + 20_000 * 6 * STEP_NODE_S
    assert solve_workers([], cores=4) == 1
    # the sum taken per run of jobs that share method, problem and backend: the sum of the jobs' own (to round-off)
    mixed = [*table1, *big[:2], *user[:3], job(9, 500, method="rattle"), *big[2:4]]
    assert work_seconds(mixed) == pytest.approx(sum(j.estimated_seconds() for j in mixed), rel=1e-12)


WARM_SCRIPT = """
import json
from hbvm_workflow.worker import _uncached_loops, warm_up
from hbvm_workflow.runs import Job

def job(problem, k, s, h):
    return Job("w", f"k{k}s{s}", f"HBVM({k},{s})", problem, {}, {"k": k, "s": s}, h, 10 * h, 1, True, "auto", 65536)

jobs = [job("planar_pendulum", 1, 1, 0.1), job("planar_pendulum", 2, 2, 0.1), job("tethered_satellites", 6, 2, 0.1)]
cold = sorted(j.problem for j in _uncached_loops(jobs))
n = warm_up(jobs, processes=2)
from hbvm_core.methods import method_from_entry
from hbvm_core.problems import get_problem
loops = [method_from_entry(j.method).compiled_runner(get_problem(j.problem)).module.run_chunk for j in jobs]
stats = [(len(f.stats.cache_hits), len(f.stats.cache_misses)) for f in loops]
print(json.dumps({"cold": cold, "n": n, "after": len(_uncached_loops(jobs)), "stats": stats}))
"""


@pytest.mark.slow
def test_warm_up_compiles_the_uncached_loops_side_by_side_and_loads_them(tmp_path):
    """A cold cache: one loop per problem is compiled in a forked process each; this process only loads them."""
    import json
    import os
    import subprocess
    import sys

    env = dict(os.environ, HBVM_KERNEL_CACHE=str(tmp_path / "kernels"), NUMBA_CACHE_DIR=str(tmp_path / "numba"))
    out = subprocess.run([sys.executable, "-c", WARM_SCRIPT], capture_output=True, text=True, env=env, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["cold"] == ["planar_pendulum", "tethered_satellites"]  # HBVM(1,1) and (2,2) share one loop
    assert got["n"] == 3 and got["after"] == 0
    assert all(hits >= 1 and misses == 0 for hits, misses in got["stats"])  # loaded from disk, not compiled here


# --------------------------------------------------------------------------- grids
def test_a_grid_makes_one_instance_per_combination_with_its_own_runs():
    st = expand_study("g", small(grid={"theta_dot0": [0.5, 1.5], "length": [1.0, 2.0]}, params={"gravity": 2.0}))
    keys = [i.key for i in st.instances]  # the Cartesian product, the last key fastest
    assert keys == ["theta_dot0=0.5,length=1.0", "theta_dot0=0.5,length=2.0", "theta_dot0=1.5,length=1.0",
                    "theta_dot0=1.5,length=2.0"]  # fmt: skip
    assert st.instances[1].params == {"gravity": 2.0, "theta_dot0": 0.5, "length": 2.0}
    assert len({i.fingerprint for i in st.instances}) == 4 and len(st.jobs) == 8 and len(st.rows) == 8
    job = st.jobs["hbvm_k1_s1/theta_dot0=0.5,length=2.0/h=0.05"]
    assert job.params == st.instances[1].params and job.problem_fingerprint == st.instances[1].fingerprint
    assert job.store.endswith("runs/hbvm_k1_s1/theta_dot0=0.5,length=2.0/h=0.05.zarr.zip")
    assert st.problem_of(job).q0[1] == -2.0


def test_reference_self_pairs_runs_within_one_combination():
    st = expand_study("g", small(grid={"length": [1.0, 2.0]}, errors={"reference": "self", "norm": "inf"}))
    assert len(st.jobs) == 6  # h = 0.1, 0.05 and the partner 0.025, per combination
    for r in st.rows:
        assert r.partner.startswith(f"hbvm_k1_s1/{r.combo}/") and st.jobs[r.partner].combo == r.combo


def test_without_a_grid_ids_and_stores_are_unchanged():
    st = expand_study("u", small())
    assert [i.key for i in st.instances] == [""] and list(st.jobs) == ["hbvm_k1_s1/h=0.1", "hbvm_k1_s1/h=0.05"]
    assert st.jobs["hbvm_k1_s1/h=0.1"].store.endswith("runs/hbvm_k1_s1/h=0.1.zarr.zip")


@pytest.mark.parametrize(
    "grid,message",
    [
        ({"mass": [1.0]}, r"studies\.g\.grid\.mass: not a keyword of problem 'planar_pendulum' \(its keywords: "),
        ({"gravity": [1.0]}, r"studies\.g\.grid\.gravity: also given in params"),
        ({"length": []}, r"studies\.g\.grid\.length = \[\]: expected a non-empty list"),
        ({"theta_dot0": [3.0]}, r"studies\.g\[theta_dot0=3\.0\]\.problem = 'planar_pendulum': .*separatrix"),
    ],
)
def test_a_bad_grid_is_one_line_naming_it(grid, message):
    with pytest.raises(ConfigError, match=message) as err:
        expand_study("g", small(grid=grid, params={"gravity": 1.0}))
    assert "\n" not in str(err.value)


def test_a_grid_is_for_convergence_and_sweep_studies():
    with pytest.raises(
        ConfigError, match=r"^studies\.g\.grid: a grid is for convergence and sweep studies, not kind long_time$"
    ):
        expand_study("g", small(kind="long_time", grid={"length": [1.0]}))


def test_grid_is_in_the_schema():
    cfg = {"studies": {"g": small(grid={"length": [1.0, 2.0]})}}
    validate_config(copy.deepcopy(cfg), SCHEMA)
    with pytest.raises(ConfigError, match="grid"):
        validate_config({"studies": {"g": small(grid={"length": 1.0})}}, SCHEMA)


def test_the_shipped_sweep_study_and_a_sweep_needs_one_grid_key(published):
    st = published["sweep_amplitude"]
    assert st.study_kind == "sweep" and st.plot == "sweep" and len(st.instances) == 7 and len(st.jobs) == 2 * 7 * 4
    with pytest.raises(ConfigError, match=r"studies\.w: kind sweep needs a grid of exactly one key, got 0"):
        expand_study("w", small(kind="sweep"))


def test_shipped_beyond_studies_run_every_method_on_its_fastest_backend(published):
    """The work-precision studies leave the backend to each method (auto); the long-time ones include IDA."""
    wp = [s for s in published.values() if s.study_kind == "work_precision"]
    lt = [s for s in published.values() if s.study_kind == "long_time"]
    assert wp and lt
    for study in wp:
        assert {job.backend for job in study.jobs.values()} == {"auto"}, study.name
        kinds = {m.entry.get("method", "hbvm") for m in study.methods}
        assert kinds == {"hbvm", "rattle", "dop853", "ida"}, study.name
        poly = [m.entry for m in study.methods if m.entry.get("multiplier") == "polynomial"]
        assert {bool(e.get("projection")) for e in poly} == {True, False}, study.name
    for study in lt:
        ida = [job for job in study.jobs.values() if job.method.get("method") == "ida"]
        assert len(ida) == 1 and ida[0].steps == 10**5, study.name


@pytest.mark.parametrize("key", ["order_s", "constraint", "best_wall_s"])
def test_a_grid_key_cannot_be_a_column_or_a_dimension_of_the_results(key):
    """errors.csv's fitted orders, errors.zarr's constraint dimension, timings.csv's measured columns."""
    cfg = {
        "problem": "conical_pendulum",
        "grid": {key: [1.0, 2.0]},
        "methods": [{"k": 1, "s": 1}],
        "periods": 1,
        "period_divisions": [10],
        "errors": {"reference": "exact", "norm": "inf", "sample": "all"},
    }
    with pytest.raises(ConfigError, match=f"grid.{key}: the name of a column of errors.csv or timings.csv"):
        expand_study("g", cfg)


@pytest.mark.parametrize(
    "ids",
    [
        ["hbvm_k1_s1/n=20", "hbvm_k2_s1/L=0.5/h=0.1"],
        ['a"b/n=1', "c/n=2"],  # a quote
        ["back\\slash/n=1"],
        ["L=\u00e9t\u00e9/n=1", "x"],  # non-ASCII: escaped by json.dumps
        ["tab\there/n=1"],  # a control character
        [],
    ],
)
def test_the_runs_digest_text_is_the_json_of_the_pairs(ids):
    """The text the runs digest hashes is json.dumps of the [id, hash] pairs, whichever way it is written."""
    import json

    from hbvm_workflow.runs import _pairs_json

    hashes = [f"{i:016x}" for i in range(len(ids))]
    assert _pairs_json(ids, hashes) == json.dumps([[i, h] for i, h in zip(ids, hashes)])
