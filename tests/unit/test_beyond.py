"""Work-precision and long-time tables (hbvm_workflow.beyond): time to accuracy, drift exponents, families."""

import math
import os
from types import SimpleNamespace

import numpy as np
import pytest

from hbvm_workflow import beyond


def _row(family, e_s, wall_s, h=0.1, rtol=math.nan, status="ok"):
    return {
        "problem": "p",
        "family": family,
        "name": family,
        "h": h,
        "rtol": rtol,
        "e_s": e_s,
        "wall_s": wall_s,
        "status": status,
    }


def test_time_to_accuracy_takes_the_cheapest_run_that_reaches_the_target():
    rows = [
        _row("A", 1e-4, 0.1, h=0.1),
        _row("A", 5e-7, 0.9, h=0.05),
        _row("A", 1e-7, 0.5, h=0.025),  # cheaper and more accurate (timing noise): it wins
        _row("A", 1e-11, 5.0, h=0.0125, status="failed"),  # a failed run never counts
        _row("DOP853", 1e-5, 0.05, h=0.5, rtol=1e-6),
        _row("DOP853", 1e-11, 0.2, h=0.5, rtol=1e-12),
    ]
    table = beyond.time_to_accuracy(rows, (1e-6, 1e-10))
    got = {(r["family"], r["target"]): r for r in table}
    assert got[("A", 1e-6)]["wall_s"] == 0.5 and got[("A", 1e-6)]["run"] == "h=0.025"
    assert math.isnan(got[("A", 1e-10)]["wall_s"]) and got[("A", 1e-10)]["run"] == ""
    assert got[("DOP853", 1e-10)]["run"] == "rtol=1e-12, h_out=0.5"
    assert got[("A", 1e-6)]["best_e_s"] == 1e-7
    md = beyond.time_to_accuracy_markdown(table, (1e-6, 1e-10))
    assert "not reached" in md and "| p | A | 0.5 | h=0.025 |" in md


def test_dop853_runs_form_one_family_per_projection():
    assert beyond.family({"method": "dop853", "rtol": 1e-8}, "DOP853(1e-08)") == "DOP853"
    assert beyond.family({"method": "dop853", "rtol": 1e-8, "projection": True}, "DOP853(1e-08)-proj") == "DOP853-proj"
    assert beyond.family({"k": 6, "s": 2}, "HBVM(6,2)") == "HBVM(6,2)"


@pytest.mark.parametrize("power", [0.0, 0.5, 1.0, 2.0])
def test_growth_exponent_measures_the_drift(power):
    t = np.linspace(0.0, 1e4, 100001)
    rng = np.random.default_rng(1)
    y = (t + 1.0) ** power * 1e-12 * (1.0 + 0.5 * np.sin(7.0 * t)) + 1e-16 * rng.random(t.size)
    assert abs(beyond.growth_exponent(t, y) - power) < 0.1


def test_growth_exponent_of_exact_zeros_is_zero():
    t = np.linspace(0.0, 100.0, 1001)
    assert beyond.growth_exponent(t, np.zeros_like(t)) == 0.0


def test_drift_stats_windows():
    t = np.linspace(0.0, 1e4, 10001)
    series = {"t": t, "dH": 1e-10 * t, "g": np.full_like(t, 1e-16), "hc": np.zeros_like(t)}
    st = beyond.drift_stats(series)
    assert st["t_early"] == 10.0 and st["t_end"] == 1e4
    assert st["dH_early"] == pytest.approx(1e-9) and st["dH_late"] == pytest.approx(1e-6)
    assert st["dH_exponent"] == pytest.approx(1.0, abs=0.02) and math.isnan(st["g_exponent"])


def test_series_at_roundoff_get_no_exponent():
    t = np.linspace(0.0, 1e3, 1001)
    st = beyond.drift_stats({"t": t, "dH": 1e-15 * np.sqrt(t), "g": 1e-9 * t, "hc": np.zeros_like(t)})
    assert math.isnan(st["dH_exponent"]) and st["g_exponent"] == pytest.approx(1.0, abs=0.02)
    md = beyond.long_time_markdown([{"problem": "p", "method": "M", "h": 0.1, "steps": 10000, **st}])
    assert md.count("round-off") >= 2 and "| 1.00 |" in md


def test_work_precision_rows_take_the_measured_wall_time_from_timings_csv(tmp_path):
    """errors.csv holds no timing (it is bit-identical however the study ran); wall_s comes from timings.csv."""
    from hbvm_workflow import tables
    from hbvm_workflow.study import expand_study

    cfg = {
        "kind": "work_precision",
        "problem": "planar_pendulum",
        "t_end": 1,
        "h": [0.1, 0.05],
        "methods": [{"k": 2, "s": 2}, {"k": 1, "s": 1}],
        "errors": {"reference": "exact", "norm": 1, "sample": "all"},
    }
    study = expand_study("wp", cfg, results=str(tmp_path))
    errors = [
        {"method": m.label, "name": m.name, "h": r.h, "e_s": 10.0 ** -(i + 4), "steps": round(1 / r.h), "status": "ok"}
        for m in study.methods
        for i, r in enumerate(m.rows)
    ]
    timings = [{"method": e["method"], "h": e["h"], "wall_s": 0.25 * (i + 1)} for i, e in enumerate(errors)]
    os.makedirs(study.dir)
    csv_path = os.path.join(study.dir, "errors.csv")
    tables.write_csv(errors, csv_path)
    tables.write_csv(timings, os.path.join(study.dir, "timings.csv"), tables.TIMINGS)
    assert "wall_s" not in open(csv_path).readline().split(",")
    rows = beyond.work_precision_rows(study, csv_path)
    assert [(r["label"], r["h"], r["e_s"], r["wall_s"]) for r in rows] == [
        (e["method"], e["h"], e["e_s"], t["wall_s"]) for e, t in zip(errors, timings)
    ]
    tables.write_csv(timings[:-1], os.path.join(study.dir, "timings.csv"), tables.TIMINGS)
    with pytest.raises(ValueError, match="run hbvm_k1_s1/h=0.05 has no row in its timings.csv"):
        beyond.work_precision_rows(study, csv_path)


def test_time_to_accuracy_csv_has_one_row_per_problem_target_and_method(tmp_path):
    """results/beyond/time_to_accuracy.csv: the cheapest run per target, its label and setting (h or rtol)."""
    import csv

    from hbvm_workflow import tables
    from hbvm_workflow.study import expand_study

    cfg = {
        "kind": "work_precision",
        "problem": "planar_pendulum",
        "t_end": 1,
        "h": [0.1, 0.05],
        "methods": [
            {"k": 2, "s": 2},
            {"method": "ida", "rtol": 1e-6, "h": [0.5]},
            {"method": "ida", "rtol": 1e-9, "h": [0.5]},
        ],
        "errors": {"reference": "exact", "norm": 1, "sample": "all"},
    }
    study = expand_study("wp", cfg, results=str(tmp_path))
    e_s = {
        ("hbvm_k2_s2", 0.1): 1e-5,
        ("hbvm_k2_s2", 0.05): 1e-7,
        ("ida_rtol1e-06", 0.5): 1e-5,
        ("ida_rtol1e-09", 0.5): 1e-8,
    }
    errors = [
        {"method": m.label, "name": m.name, "h": r.h, "e_s": e_s[(m.label, r.h)], "steps": 10, "status": "ok"}
        for m in study.methods
        for r in m.rows
    ]
    os.makedirs(study.dir)
    tables.write_csv(errors, os.path.join(study.dir, "errors.csv"))
    timings = [{"method": e["method"], "h": e["h"], "wall_s": 0.5} for e in errors]
    tables.write_csv(timings, os.path.join(study.dir, "timings.csv"), tables.TIMINGS)
    out = str(tmp_path / "time_to_accuracy.csv")
    assert beyond.write_time_to_accuracy([study], out) == 4
    with open(out) as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == ["problem", "target", "method", "label", "wall_s", "setting", "e_s"]
    got = [(r["target"], r["method"], r["label"], r["setting"], r["wall_s"]) for r in rows]
    assert got == [
        ("1e-06", "HBVM(2,2)", "hbvm_k2_s2", "h=0.05", "0.5"),
        ("1e-06", "IDA", "ida_rtol1e-09", "rtol=1e-09", "0.5"),
        ("1e-10", "HBVM(2,2)", "", "", ""),
        ("1e-10", "IDA", "", "", ""),
    ]
    assert {r["problem"] for r in rows} == {"planar_pendulum"}


def test_work_precision_times_are_the_best_of_repeats_after_a_warm_up(tmp_path, monkeypatch):
    """beyond.measure: per run one untimed step first (where the compiled loop compiles), then timing_repeats
    timed integrations over the whole interval, of which the best; timings.csv gets it as best_wall_s (with the
    repeats) and the figure and tables use it. The integrations are made up: the warm-up takes 10 s (a compile),
    the repeats 0.3, 0.2, 0.25 s (noise), so the oracle is 0.2 s by construction."""
    import csv
    import importlib

    from hbvm_workflow import tables
    from hbvm_workflow.study import expand_study
    from hbvm_workflow.worker import solve_job

    cfg = {
        "kind": "work_precision",
        "problem": "planar_pendulum",
        "backend": "numpy",
        "t_end": 0.2,
        "h": [0.1, 0.05],
        "methods": [{"k": 2, "s": 2}],
        "errors": {"reference": "exact", "norm": 1, "sample": "all"},
        "timing_repeats": 3,
    }
    study = expand_study("wp", cfg, results=str(tmp_path))
    for job in study.jobs.values():
        assert solve_job(job)["status"] == "ok"
    calls = []

    def made_up(problem, method, h, t_end, **kw):
        calls.append((h, t_end))
        timed = sum(1 for c in calls if c[1] != c[0]) - 1
        wall = 10.0 if t_end == h else (0.3, 0.2, 0.25)[timed % 3]
        return SimpleNamespace(attrs={"wall_s": wall})

    monkeypatch.setattr(importlib.import_module("hbvm_core.integrate"), "integrate", made_up)  # the module
    assert beyond.measure(study) == {"hbvm_k2_s2/h=0.1": 0.2, "hbvm_k2_s2/h=0.05": 0.2}
    assert calls == [(0.1, 0.1)] + [(0.1, 0.2)] * 3 + [(0.05, 0.05)] + [(0.05, 0.2)] * 3  # warm-up, then 3 timed
    d = os.path.join(str(tmp_path), "wp")
    tables.compute_errors(study, os.path.join(d, "errors.zarr"), os.path.join(d, "errors.csv"))
    with open(os.path.join(d, "timings.csv")) as fh:
        timings = list(csv.DictReader(fh))
    assert [(t["best_wall_s"], t["repeats"]) for t in timings] == [("0.2", "3")] * 2
    assert all(float(t["wall_s"]) != 0.2 for t in timings)  # the stores' own single timings, kept beside
    rows = beyond.work_precision_rows(study, os.path.join(d, "errors.csv"))
    assert [r["wall_s"] for r in rows] == [0.2, 0.2]
    fig = beyond.work_precision_plot([("wp", rows)], str(tmp_path / "f.png"), str(tmp_path / "f.pdf"), repeats=3)
    assert fig.axes[0].get_ylabel() == "wall time per run [s]"
    assert "the best of 3 repeats of the time loop, compile time excluded" in fig.get_suptitle().replace("\n", " ")
    assert "best of 3 timed repeats" in beyond._convention_note(study)
