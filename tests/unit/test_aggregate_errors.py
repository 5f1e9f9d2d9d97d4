"""The aggregate step (workflow/scripts/aggregate.py): a study that fails in its forked process is reported as
itself, in one line naming the study and the error (never BrokenProcessPool), and the other studies of the
job are aggregated and not reported failed."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from hbvm_core.errors import HBVMError
from hbvm_workflow.storage import StoreError

SCRIPT = Path(__file__).resolve().parents[2] / "workflow" / "scripts" / "aggregate.py"


@pytest.fixture
def script(monkeypatch):
    spec = importlib.util.spec_from_file_location("hbvm_aggregate_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setitem(sys.modules, spec.name, module)  # its functions are pickled by name to the processes
    return module


def job(tmp_path, names):
    out = {key: [str(tmp_path / f"{n}.{key}") for n in names] for key in ("zarr", "csv", "timings", "md", "tex")}
    out |= {key: [str(tmp_path / f"{n}.{key}") for n in names] for key in ("html", "png", "pdf")}
    logs = [str(tmp_path / f"{n}.log") for n in names]
    return SimpleNamespace(
        params=SimpleNamespace(studies=list(names)), output=SimpleNamespace(**out), log=logs, threads=2, config={}
    )


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the studies' processes are forked (Linux)")
def test_a_study_failing_in_its_process_is_reported_as_itself(script, tmp_path, monkeypatch):
    def study(name, config, out, log_path, workers=1):
        if name == "bad":
            raise StoreError("results/bad/runs/m/h=0.1.zarr.zip", "q", "chunk c/0/0 unreadable (CRC-32C)")
        Path(out["csv"]).write_text(f"{name} done\n")

    monkeypatch.setattr(script, "aggregate_study", study)
    with pytest.raises(HBVMError) as err:
        script.aggregate_all(job(tmp_path, ["good", "bad", "also"]))
    assert str(err.value) == (
        "1 of 3 studies failed to aggregate: bad: StoreError: results/bad/runs/m/h=0.1.zarr.zip: array q: "
        "chunk c/0/0 unreadable (CRC-32C)"
    )
    assert (tmp_path / "good.csv").read_text() == "good done\n" and (tmp_path / "also.csv").read_text() == "also done\n"
    assert "Traceback" in (tmp_path / "bad.log").read_text()  # the traceback goes to the study's log only
