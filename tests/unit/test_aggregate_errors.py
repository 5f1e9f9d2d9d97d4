"""The aggregate step (workflow/scripts/aggregate.py, one job per study): a study whose aggregation fails ends its
own job with one line naming the store and the error (never a traceback on the terminal; the traceback goes to the
study's log); no other study is in that job, so none is reported failed."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from hbvm_workflow.storage import StoreError

SCRIPT = Path(__file__).resolve().parents[2] / "workflow" / "scripts" / "aggregate.py"


@pytest.fixture
def script(monkeypatch):
    module_spec = importlib.util.spec_from_file_location("hbvm_aggregate_script", SCRIPT)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    monkeypatch.setitem(sys.modules, module_spec.name, module)
    return module


def job(tmp_path, name):
    out = SimpleNamespace(**{key: str(tmp_path / f"{name}.{key}") for key in ("zarr", "csv", "timings")})
    return SimpleNamespace(
        wildcards=SimpleNamespace(study=name),
        output=out,
        log=[str(tmp_path / f"{name}.log")],
        threads=1,
        config={"results": str(tmp_path / "results")},
    )


def test_a_failing_study_ends_its_job_with_one_line(script, tmp_path, monkeypatch, capsys):
    def study(name, config, out, log_path, workers=1, numbers=None, marker=None):
        raise StoreError("results/bad/runs/m/h=0.1.zarr.zip", "q", "chunk c/0/0 unreadable (CRC-32C)")

    monkeypatch.setattr(script, "aggregate_study", study)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as info:
        script.main(job(tmp_path, "bad"))
    assert info.value.code == 1
    err = capsys.readouterr().err
    assert err == "hbvm: results/bad/runs/m/h=0.1.zarr.zip: array q: chunk c/0/0 unreadable (CRC-32C)\n", err
    assert "Traceback" in (tmp_path / "bad.log").read_text()  # the traceback goes to the study's log only


def test_a_good_study_is_aggregated(script, tmp_path, monkeypatch):
    def study(name, config, out, log_path, workers=1, numbers=None, marker=None):
        Path(out.csv).write_text(f"{name} done\n")

    monkeypatch.setattr(script, "aggregate_study", study)
    monkeypatch.chdir(tmp_path)
    script.main(job(tmp_path, "good"))
    assert (tmp_path / "good.csv").read_text() == "good done\n"
