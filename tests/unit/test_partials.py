"""Per-shard partial results (hbvm_workflow.partials): the aggregation takes e_s, e_hc and the scale of a shard's
runs from the Zarr array its task wrote beside it, and never trusts one that disagrees with its shard: an edited
partial, a shard rewritten under an old partial, a changed error convention are each found and the columns computed
again from the states. The store is written directly (no solve, nothing compiled), its runs at the planar
pendulum's closed form with the first coordinate at t = 0.5 off by a known delta: the oracle of e_s."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import zarr
from test_shards import _exact_rows, _study

from hbvm_workflow import partials, shards
from hbvm_workflow.ensemble_errors import summary_columns
from hbvm_workflow.state_errors import local, partial_columns

#: the states are of size <= 2 and the closed form is evaluated twice the same way: round-off of the state only
TOL = 1e-14


def _store(study, delta_scale: float = 7.0) -> tuple[shards.RunTable, np.ndarray, str]:
    """The study's store, each shard written with the partial results its task would compute (the same code,
    ``state_errors.partial_columns``); run r's first coordinate at t = 0.5 off by delta_scale h^2 (returned)."""
    table = shards.run_table(study)
    path = shards.shard_store(study.results, study.name)
    os.makedirs(study.dir, exist_ok=True)
    shards.create(path, table, study.name, os.path.join(study.dir, ".tmp"))
    delta = delta_scale * table.h**2
    for slot, (a, b) in enumerate(table.slots()):
        _write(study, table, path, slot, a, b, _exact_rows(study, table, a, b, delta))
    return table, delta, path


def _write(study, table, path, slot, a, b, rows, with_partial: bool = True) -> None:
    combos, at = local(table.combo[a:b])
    errors = partials.errors_spec(study)
    values = partial_columns(
        errors, [study.instances[c] for c in combos], at, table.N[a:b], table.sample_every[a:b],
        rows["counts"], rows["t"], rows["y"], table.m,
    )  # fmt: skip
    part = (values, errors, partials.study_problems(study, table.combo[a:b])) if with_partial else None
    shards.write_shard(path, slot, a, rows, table.digest(a, b), {}, part)


def _columns(study):
    lines: list[str] = []
    cols = summary_columns(study, tell=lines.append)
    return cols, lines


def test_the_aggregation_takes_each_shards_partial_and_reads_no_states(tmp_path):
    """Every shard with its partial: no shard computed again (no line), and e_s is the offset put in, e_hc the
    hidden constraint by hand |2 q.p| on the exact states off by delta; the same as from the states."""
    study = _study(tmp_path)
    table, delta, path = _store(study)
    for slot in range(len(table.slots())):
        assert os.path.isfile(os.path.join(path, "shards", str(slot), "partial", "zarr.json"))  # a Zarr array there
        assert set(shards.read_record(path, slot)["partial"]) == {"key", "stats", "sha256"}
    cols, lines = _columns(study)
    assert lines == []
    assert np.allclose(cols["e_s"], delta, rtol=0, atol=TOL)
    old = summary_columns(study, use_partials=False)
    for c in ("e_s", "e_hc", "rate_s", "e_H"):
        assert np.allclose(cols[c], old[c], rtol=0, atol=TOL, equal_nan=True), c


def test_an_edited_partial_is_found_and_computed_again_from_its_shard(tmp_path):
    """A partial whose values were changed (e_s of shard 1 set to 1.0): its digest differs from its record's; the
    aggregation says so for that shard alone and takes the states' e_s, the offset put in."""
    study = _study(tmp_path)
    table, delta, path = _store(study)
    a = zarr.open_array(os.path.join(path, "shards", "1", "partial"), mode="r+")
    a[:, 0] = 1.0
    cols, lines = _columns(study)
    assert len(lines) == 1 and lines[0].startswith("shard 1: ") and "digest differs" in lines[0]
    assert np.allclose(cols["e_s"], delta, rtol=0, atol=TOL)  # not the 1.0 put in the partial


def test_a_shard_rewritten_under_an_old_partial_is_computed_again(tmp_path):
    """Shard 0 written again with other states (offset 3 h^2), its old partial and its record's entry for it put
    back (as a copy or a tool might leave them): the key names the old files, so the states' e_s is taken."""
    study = _study(tmp_path)
    table, _, path = _store(study)
    folder = os.path.join(path, "shards", "0", "partial")
    saved = {
        f: open(os.path.join(folder, f), "rb").read()
        for f in os.listdir(folder)
        if os.path.isfile(os.path.join(folder, f))
    }
    old = shards.read_record(path, 0)["partial"]
    delta = 3.0 * table.h**2
    a, b = table.slots()[0]
    _write(study, table, path, 0, a, b, _exact_rows(study, table, a, b, delta), with_partial=False)
    assert not os.path.exists(folder)  # a rewritten shard drops its partial
    os.makedirs(folder)
    for f, raw in saved.items():
        with open(os.path.join(folder, f), "wb") as fh:
            fh.write(raw)
    record_file = shards.shard_record(path, 0)
    doc = json.load(open(record_file))
    doc["attributes"]["partial"] = old
    with open(record_file, "w") as fh:
        json.dump(doc, fh)
    cols, lines = _columns(study)
    assert [line.split(":")[0] for line in lines] == ["shard 0"] and "another shard" in lines[0]
    assert np.allclose(cols["e_s"][a:b], delta[a:b], rtol=0, atol=TOL)


def test_a_changed_error_convention_or_a_missing_partial_is_computed_again(tmp_path):
    """The same store read by a study with errors.norm 1 (the key names the convention): every shard computed again,
    e_s the offset (one coordinate off: every norm gives it); a shard written without a partial likewise."""
    study = _study(tmp_path)
    table, delta, path = _store(study)
    other = _study(tmp_path, errors={"reference": "exact", "norm": 1, "sample": 0.5})
    cols, lines = _columns(other)
    assert len(lines) == len(table.slots()) and all("another shard, problem or error convention" in x for x in lines)
    assert np.allclose(cols["e_s"], delta, rtol=0, atol=TOL)
    a, b = table.slots()[2]
    _write(study, table, path, 2, a, b, _exact_rows(study, table, a, b, delta), with_partial=False)
    cols, lines = _columns(study)
    assert lines == ["shard 2: no partial results; its errors computed again from its states"]
    assert np.allclose(cols["e_s"], delta, rtol=0, atol=TOL)


@pytest.mark.parametrize("reference", ["self"])
def test_reference_self_has_no_partial(tmp_path, reference):
    """With reference: self a row's h/2 partner may be in another shard: the task writes no partial."""
    from hbvm_workflow.shard_worker import _partial

    study = _study(tmp_path, errors={"reference": reference, "norm": "inf", "sample": 0.5})
    assert partials.errors_spec(study)["reference"] == "self"
    spec = {"errors": partials.errors_spec(study)}
    assert _partial(spec, None, None, None) is None


def test_a_summary_study_without_a_grid_aggregates_from_its_partials(tmp_path):
    """No grid (one instance): the partials taken, e_s the offset put in, errors.zarr's reference_accuracy a scalar
    (NaN: the closed form)."""
    from test_shards import SWEEP

    from hbvm_workflow.ensemble_errors import compute_summary_errors
    from hbvm_workflow.storage import open_errors_at
    from hbvm_workflow.study import expand_study

    cfg = {k: v for k, v in SWEEP.items() if k not in ("grid", "kind")}
    study = expand_study("one", {**cfg, "save": "summary", "backend": "auto"}, results=str(tmp_path / "results"))
    assert not study.grid
    table, delta, _ = _store(study)
    cols, lines = _columns(study)
    assert lines == [] and np.allclose(cols["e_s"], delta, rtol=0, atol=TOL)
    out = tmp_path / "out"
    out.mkdir()
    compute_summary_errors(study, str(out / "e.zarr"), str(out / "e.csv"), str(out / "t.csv"))
    ds = open_errors_at(str(out / "e.zarr"))
    assert ds["reference_accuracy"].dims == () and np.isnan(ds["reference_accuracy"].item())


def test_the_aggregation_of_a_planned_study_builds_no_instance_problem(tmp_path):
    """A job's study read from the plan builds its instances' problems lazily: taking the shards' partials (their
    key: the planned params and structure) must build none of them, nor compute their probes (which build them:
    some 2 ms each, 20 s of a 10^4-value sweep's aggregation)."""
    from hbvm_workflow import plan
    from hbvm_workflow.loading import load_studies

    config = {"results": str(tmp_path / "results"), "studies": {"sw": _study(tmp_path).cfg}}
    expanded = load_studies(config)
    table, delta, _ = _store(expanded["sw"])
    plan.write_plan(config, expanded)
    study = plan.planned_studies(config)["sw"]
    assert all(inst.built is None and inst.probe_pending for inst in study.instances)  # the plan's lazy road
    cols, lines = _columns(study)
    assert lines == []  # every shard's partial taken
    assert np.allclose(cols["e_s"], delta, rtol=0, atol=TOL)
    assert all(inst.built is None and inst.probe_pending for inst in study.instances)
