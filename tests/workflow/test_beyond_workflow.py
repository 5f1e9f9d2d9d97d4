"""End to end: `snakemake beyond` on a tiny work-precision and long-time study (real Snakemake, Dask, Zarr)."""

import csv
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]

CONFIG = {
    "studies": {
        "wp_tiny": {
            "kind": "work_precision",
            "problem": "planar_pendulum",
            "t_end": 2,
            "backend": "numpy",
            "errors": {"reference": "reference", "norm": "inf", "sample": 0.5},
            "accuracy_targets": [1.0e-4, 1.0e-8],
            "methods": [
                {"k": 2, "s": 2, "h0": 0.1, "halvings": 1},
                {"k": 6, "s": 3, "multiplier": "polynomial", "projection": True, "h0": 0.25, "halvings": 1},
                {"method": "rattle", "h0": 0.1, "halvings": 1},
                {"method": "dop853", "rtol": 1.0e-6, "h": [0.5]},
                {"method": "dop853", "rtol": 1.0e-11, "h": [0.5]},
            ],
        },
        "lt_tiny": {
            "kind": "long_time",
            "problem": "planar_pendulum",
            "t_end": 100,
            "h": [0.1],
            "save_every": 5,
            "errors": {"reference": "none"},
            "methods": [
                {"method": "rattle"},
                {"method": "dop853", "rtol": 1.0e-6},
                {"k": 4, "s": 2, "multiplier": "polynomial", "projection": True},
            ],
        },
    }
}


def _snakemake(tmp: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile"), "--directory", str(tmp)]
    cmd += ["--configfile", str(tmp / "config.yaml"), "--cores", "2", *args]
    env = dict(os.environ, MPLBACKEND="Agg")
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)


def _rows(path: Path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("beyond")
    (tmp / "config.yaml").write_text(yaml.safe_dump(CONFIG))
    return tmp


@pytest.mark.slow
def test_beyond_studies_are_opt_in(tiny):
    default = _snakemake(tiny, "-n")
    assert default.returncode == 0, default.stderr[-2000:]
    assert "work_precision" not in default.stdout and "long_time" not in default.stdout
    opted = _snakemake(tiny, "-n", "--config", "beyond=True")
    assert opted.returncode == 0, opted.stderr[-2000:]
    assert "rule work_precision" in opted.stdout and "rule long_time" in opted.stdout
    wp = _snakemake(tiny, "-n", "work_precision")  # just the work_precision studies and the time-to-accuracy CSV
    assert wp.returncode == 0, wp.stderr[-2000:]
    assert "rule time_to_accuracy" in wp.stdout and "rule long_time" not in wp.stdout


@pytest.mark.slow
def test_snakemake_beyond_builds_the_tables_and_figures(tiny):
    run = _snakemake(tiny, "beyond")
    assert run.returncode == 0, run.stderr[-3000:]
    res = tiny / "results"
    for kind, study in (("work_precision", "wp_tiny"), ("long_time", "lt_tiny")):
        for ext in ("png", "pdf", "md", "csv"):
            assert (res / "beyond" / f"{kind}.{ext}").stat().st_size > 0
        for name in (f"{study}.png", f"{study}.pdf", f"{kind}.md", f"{kind}.csv", "errors.csv"):
            assert (res / study / name).stat().st_size > 0

    tta = {(r["family"], float(r["target"])): r for r in _rows(res / "beyond" / "work_precision.csv")}
    assert set(f for f, _ in tta) == {"HBVM(2,2)", "HBVM(6,3)-poly-proj", "RATTLE", "DOP853"}
    # order 6 reaches 1e-8 with h <= 0.25; the second-order methods do not on this grid
    assert tta[("HBVM(6,3)-poly-proj", 1e-8)]["run"].startswith("h=")
    assert tta[("RATTLE", 1e-8)]["run"] == "" and tta[("HBVM(2,2)", 1e-8)]["run"] == ""
    assert tta[("DOP853", 1e-8)]["run"] == "rtol=1e-11, h_out=0.5"
    assert float(tta[("DOP853", 1e-8)]["wall_s"]) > 0
    # the wall times are the measured ones of timings.csv (errors.csv holds none: it is deterministic): the best
    # of the repeated timings (beyond.measure, 5 by default), not the solve step's single one
    timed = _rows(res / "wp_tiny" / "timings.csv")
    timings = {(t["method"], t["h"]): t["best_wall_s"] for t in timed}
    assert len(timings) == 8 and "wall_s" not in _rows(res / "wp_tiny" / "errors.csv")[0]
    assert all(t["repeats"] == "5" and 0 < float(t["best_wall_s"]) < math.inf for t in timed)
    assert tta[("DOP853", 1e-8)]["wall_s"] == timings[("dop853_rtol1e-11", "0.5")]
    assert "not reached" in (res / "beyond" / "work_precision.md").read_text()
    ttac = _rows(res / "beyond" / "time_to_accuracy.csv")
    assert list(ttac[0]) == ["problem", "target", "method", "label", "wall_s", "setting", "e_s"] and len(ttac) == 8
    dop = next(r for r in ttac if r["method"] == "DOP853" and float(r["target"]) == 1e-8)
    assert (
        dop["label"] == "dop853_rtol1e-11"
        and dop["setting"] == "rtol=1e-11"
        and dop["wall_s"] == tta[("DOP853", 1e-8)]["wall_s"]
    )

    drift = {r["method"]: r for r in _rows(res / "beyond" / "long_time.csv")}
    assert set(drift) == {"RATTLE", "DOP853(1e-06)", "HBVM(4,2)-poly-proj"}
    assert all(int(r["steps"]) == 1000 for r in drift.values())
    # RATTLE: constraints at round-off, bounded energy error; the index-reduced ODE drifts off g = 0
    assert float(drift["RATTLE"]["g_max"]) < 1e-14 and float(drift["RATTLE"]["hc_max"]) < 1e-14
    assert abs(float(drift["RATTLE"]["dH_exponent"])) < 0.3
    assert float(drift["DOP853(1e-06)"]["g_exponent"]) > 0.8
    assert float(drift["DOP853(1e-06)"]["g_late"]) > 10 * float(drift["DOP853(1e-06)"]["g_early"])
    # the projected polynomial-multiplier HBVM keeps H, g and the hidden constraint at round-off
    poly = drift["HBVM(4,2)-poly-proj"]
    assert max(float(poly["dH_max"]), float(poly["g_max"]), float(poly["hc_max"])) < 1e-13

    again = _snakemake(tiny, "beyond")  # nothing to do: everything is reused
    assert again.returncode == 0 and "Nothing to be done" in (again.stdout + again.stderr)
