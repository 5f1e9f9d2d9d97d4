"""The sharded store of a save: summary study (hbvm_workflow.shards), written directly (no solve): layout, reading
by grid key, completeness records, damage, reuse per shard and per run; and the errors over its run dimension
(hbvm_workflow.ensemble_errors) against the closed form."""

from __future__ import annotations

import csv
import logging
import math
import os

import numpy as np
import pytest

from hbvm_workflow import shards
from hbvm_workflow.storage import MissingStoreError


def _table(runs: int = 10_000, shard_runs: int = 3000, combos: int = 10) -> shards.RunTable:
    """Two schemes alternating, ``combos`` values of L in blocks, an h per pair of runs."""
    i = np.arange(runs)
    return shards.RunTable(
        hash=(i * 7919 + 11).astype(np.uint64),
        scheme=(i % 2).astype(np.int16),
        combo=(i * combos // runs).astype(np.int32),
        h=1.0 / (20 + (i // 2) % (runs // (2 * combos))),
        n=np.full(runs, -1),
        N=np.full(runs, 20),
        sample_every=np.full(runs, 10),
        schemes=["a", "b"],
        combos=[{"L": float(c)} for c in range(combos)],
        grid=["L"],
        m=2,
        nu=1,
        shard_runs=shard_runs,
    )


def _rows(table: shards.RunTable, a: int, b: int) -> dict[str, np.ndarray]:
    """Rows whose H_error is the run's index (the oracle of what is read back where)."""
    n = b - a
    counts = np.zeros((n, len(shards.COUNTS)), dtype=np.int64)
    counts[:, shards.COUNTS.index("n_saved")] = table.S
    scalars = np.zeros((n, 3))
    scalars[:, 0] = np.arange(a, b)
    return {"counts": counts, "scalars": scalars, "t": np.zeros((n, table.S)), "y": np.zeros((n, table.S, 4))}


def _write_all(path: str, table: shards.RunTable, skip=()) -> None:
    for slot, (a, b) in enumerate(table.slots()):
        if slot not in skip:
            shards.write_shard(path, slot, a, _rows(table, a, b), table.digest(a, b), {})


def test_a_store_of_10000_runs_is_read_by_grid_key_and_holds_few_files(tmp_path):
    table = _table()
    path = str(tmp_path / "runs.zarr")
    shards.create(path, table, "x", str(tmp_path / ".tmp"))
    _write_all(path, table)
    ds = shards.open_shards(path)
    assert ds.sizes["run"] == 10_000 and not ds.H_error.variable._in_memory  # lazily loaded
    block = ds.sel(L=2.0, scheme="b")
    rows = np.flatnonzero((table.combo == 2) & (table.scheme == 1))
    assert block.sizes["h"] == rows.size and np.array_equal(block.H_error.values, rows)
    one = ds.sel(L=7.0, scheme="a", h=table.h[rows[0] + 5000 - 1])
    want = np.flatnonzero((table.combo == 7) & (table.scheme == 0) & (table.h == table.h[rows[0] + 5000 - 1]))
    assert float(one.H_error) == want[0] and str(one.hash.values) == f"{int(table.hash[want[0]]):016x}"
    files = sum(len(f) for _, _, f in os.walk(path))
    # per data array one file per shard (4 shards), a file per coordinate, the metadata, the records' group (its
    # attributes the seal) and the records
    assert files == 4 * len(shards.DATA) + len(shards.COORDS) + 1 + len(shards.DATA) + len(shards.COORDS) + 1 + 4


def test_a_shard_without_its_record_is_not_complete(tmp_path):
    table = _table(runs=2000, shard_runs=500)
    path = str(tmp_path / "runs.zarr")
    shards.create(path, table, "x", str(tmp_path / ".tmp"))
    _write_all(path, table, skip={2})
    assert not shards.complete(path)
    with pytest.raises(MissingStoreError, match="1 of 4 shards not complete .*shard 2"):
        shards.open_shards(path)
    _write_all(path, table)
    assert shards.complete(path)


def test_flipped_bytes_in_a_shard_are_found_and_named(tmp_path):
    table = _table(runs=2000, shard_runs=500)
    path = str(tmp_path / "runs.zarr")
    shards.create(path, table, "x", str(tmp_path / ".tmp"))
    _write_all(path, table)
    assert all(shards.shard_damage(path, s, a, b) is None for s, (a, b) in enumerate(table.slots()))
    f = shards.shard_files(path, 1)["scalars"]
    raw = bytearray(open(f, "rb").read())
    raw[len(raw) // 3] ^= 0xFF
    open(f, "wb").write(bytes(raw))
    array, what = shards.shard_damage(path, 1, 500, 1000)
    assert array == "scalars" and what
    assert shards.shard_damage(path, 0, 0, 500) is None


def test_a_coordinate_is_one_checksummed_chunk_read_back_whole_and_checked(tmp_path):
    """The coordinates, written once when the store is made and only ever read whole: one file and one chunk each
    (the data arrays keep chunks of CHUNK_RUNS), for a number of runs that is no multiple of CHUNK_RUNS too (Zarr
    refused 1500 runs in chunks of 1000: the solve step of such a study failed); read back as written; a flipped
    byte in one is a StoreError naming it."""
    import zarr

    from hbvm_workflow.storage import StoreError

    table = _table(runs=1500, shard_runs=700, combos=5)
    path = str(tmp_path / "runs.zarr")
    shards.create(path, table, "x", str(tmp_path / ".tmp"))
    _write_all(path, table)
    g = zarr.open_group(path, mode="r")
    for name in shards.COORDS:
        assert g[name].chunks == (1500,) and g[name].shards == (1500,), name
        assert os.listdir(os.path.join(path, name, "c")) == ["0"], name  # one file
    assert g["y"].chunks[0] == min(shards.CHUNK_RUNS, 700) and g["y"].shards[0] == 700
    _, arrays = shards.read_all(path)
    for name in shards.COORDS:
        np.testing.assert_array_equal(arrays[name], getattr(table, name))
    f = os.path.join(path, "h", "c", "0")
    raw = bytearray(open(f, "rb").read())
    raw[len(raw) // 2] ^= 0xFF
    open(f, "wb").write(bytes(raw))
    with pytest.raises(StoreError, match="array h"):
        shards.read_all(path)


@pytest.mark.parametrize(("shard_runs", "chunk"), [(700, 700), (3000, 1000), (2500, 625), (1009, 1009)])
def test_a_shard_size_that_is_no_multiple_of_the_chunk_makes_a_store_of_whole_chunks(tmp_path, shard_runs, chunk):
    """shard_runs 2500 (a config's key) was refused by Zarr (a shard of 2.5 chunks of CHUNK_RUNS): its chunks are
    now of 625 runs, a prime 1009's one chunk per shard; sizes that worked keep their chunks; every row reads back."""
    import zarr

    assert shards.inner_chunk(shard_runs) == chunk
    table = _table(runs=5000, shard_runs=shard_runs, combos=5)
    path = str(tmp_path / "runs.zarr")
    shards.create(path, table, "x", str(tmp_path / ".tmp"))
    _write_all(path, table)
    g = zarr.open_group(path, mode="r")
    assert g["scalars"].chunks[0] == chunk and g["scalars"].shards[0] == shard_runs
    _, arrays = shards.read_all(path)
    np.testing.assert_array_equal(arrays["scalars"][:, 0], np.arange(5000))


# --------------------------------------------------------------------------- with a planned study
SWEEP = {
    "kind": "sweep",
    "problem": "planar_pendulum",
    "grid": {"theta_dot0": [0.5, 1.0]},
    "methods": [{"k": 2, "s": 2}],
    "t_end": 1,
    "h": [0.1, 0.05, 0.025],
    "errors": {"reference": "exact", "norm": "inf", "sample": 0.5},
    "shard_runs": 2,
}


def _study(tmp_path, **changes):
    from hbvm_workflow.study import expand_study

    return expand_study("sw", {**SWEEP, **changes}, results=str(tmp_path / "results"))


def _exact_rows(study, table, a, b, delta):
    """Rows of runs [a, b) at the exact solution, run r's state off by delta[r] in its first coordinate at t = 0.5."""
    from hbvm_core.references import reference_solution

    rows = _rows(table, a, b)
    n_saved = shards.saved_points(table.N[a:b], table.sample_every[a:b])
    rows["counts"][:, shards.COUNTS.index("n_saved")] = n_saved
    rows["counts"][:, shards.COUNTS.index("steps")] = table.N[a:b]
    rows["counts"][:, shards.COUNTS.index("iterations")] = 3 * table.N[a:b]
    rows["t"][:] = np.nan
    rows["y"][:] = np.nan
    for i, r in enumerate(range(a, b)):
        inst = study.instances[table.combo[r]]
        t = np.arange(n_saved[i]) * table.sample_every[r] * table.h[r]
        q, p, _ = reference_solution(inst.problem, t, reference_kind="exact")
        rows["t"][i, : t.size] = t
        rows["y"][i, : t.size] = np.concatenate([q, p], axis=1)
        rows["y"][i, 1, 0] += delta[r]
    rows["scalars"][:, 0] = 1e-3 * table.h[a:b]
    return rows


def _exact_store(study, table, fail_slot: int, cuda_slot: int = -1) -> np.ndarray:
    """The study's sharded store with every run at the exact solution but its first coordinate at t = 0.5 off by
    7 h^2 (returned, per run); run 1 of shard ``fail_slot`` failed (diverged at step 13); shard ``cuda_slot``
    recorded as computed by the GPU."""
    path = shards.shard_store(study.results, "sw")
    os.makedirs(study.dir, exist_ok=True)
    shards.create(path, table, "sw", os.path.join(study.dir, ".tmp"))
    delta = 7.0 * table.h**2
    for slot, (a, b) in enumerate(table.slots()):
        rows = _exact_rows(study, table, a, b, delta)
        if slot == fail_slot:
            rows["counts"][1, 0], rows["counts"][1, 1] = 2, 13
        ran = "cuda" if slot == cuda_slot else "numba"
        shards.write_shard(path, slot, a, rows, table.digest(a, b), {"backends": [[ran, b - a]]})
    return delta


def test_the_errors_over_the_run_dimension_match_a_hand_oracle(tmp_path):
    """e_s = the offset put in (max norm at the sample times 0, 0.5, 1), the rates of e_s = C h^2 are 2, e_H is
    H_error, a failed run has no numbers."""
    from hbvm_workflow.ensemble_errors import compute_summary_errors, summary_columns

    study = _study(tmp_path)
    table = shards.run_table(study)
    assert table.runs == 6 and list(table.sample_every) == [5, 10, 20] * 2 and table.S == 3
    delta = _exact_store(study, table, 2, cuda_slot=1)  # the last run fails
    cols = summary_columns(study)
    # the exact solution is evaluated twice the same way: round-off of the state (|y| <= 2) only
    assert np.allclose(cols["e_s"][:5], delta[:5], rtol=0, atol=1e-14)
    assert np.isnan(cols["rate_s"][0]) and np.allclose(cols["rate_s"][1:3], 2.0, atol=1e-9)
    assert np.isnan(cols["rate_s"][3]) and abs(cols["rate_s"][4] - 2.0) < 1e-9  # a new block: no rate across
    assert np.allclose(cols["e_H"][:5], 1e-3 * table.h[:5]) and np.isnan(cols["e_s"][5])
    assert list(cols["status"]) == ["ok"] * 5 + ["failed"] and cols["error"][5] == "step 13: diverged"
    assert np.allclose(cols["mean_iterations"][:5], 3.0) and np.isnan(cols["e_lambda"]).all()
    # e_hc = |G(q)^T M^-1 p| = |2 q.p| (g = |q|^2 - L^2, M = I, by hand): 0 on the exact solution, 2 delta p_x(0.5)
    # where the first coordinate is off by delta (computed for the grid's instances at once, by their Family)
    from hbvm_core.references import reference_solution

    for r in range(5):
        _, p, _ = reference_solution(study.instances[table.combo[r]].problem, np.array([0.5]), reference_kind="exact")
        assert abs(cols["e_hc"][r] - abs(2 * delta[r] * p[0, 0])) <= 1e-14, r  # round-off of |q.p| <= 2
    # timings.csv: the backend of each run, as its shard's record says (the CSV files written by a forked process)
    out = tmp_path / "out"
    out.mkdir()
    compute_summary_errors(study, str(out / "errors.zarr"), str(out / "errors.csv"), str(out / "timings.csv"), 2)
    with open(out / "timings.csv") as fh:
        timings = list(csv.DictReader(fh))
    assert [r["backend"] for r in timings] == ["numba", "numba", "cuda", "cuda", "numba", "numba"]
    # errors.zarr, written by the forked process: each run's e_s where its method, h and grid value put it
    from hbvm_workflow.storage import open_errors_at

    ds = open_errors_at(str(out / "errors.zarr"))
    values = study.grid["theta_dot0"]
    for r in range(6):
        e = float(ds.e_s.sel(scheme="hbvm_k2_s2", h=table.h[r], theta_dot0=values[table.combo[r]]))
        assert math.isnan(e) if r == 5 else abs(e - delta[r]) <= 1e-14, r  # as the columns above


class _Log(logging.Logger):
    def __init__(self):
        super().__init__("test")
        self.lines = []

    def _log(self, level, msg, args, **kw):  # noqa: D401 - keep every line
        self.lines.append(msg)


def test_reuse_is_per_shard_and_a_new_grid_value_computes_only_its_runs(tmp_path):
    study = _study(tmp_path)
    os.makedirs(study.dir, exist_ok=True)
    table, todo, counts = shards.prepare(study, False, _Log())
    assert [s.compute.size for s in todo] == [2, 2, 2] and counts["reused"] == 0
    path = shards.shard_store(study.results, "sw")
    for s in todo:
        shards.write_shard(path, s.slot, s.start, _rows(table, s.start, s.stop), s.digest, {})
    _, todo, counts = shards.prepare(study, False, _Log())
    assert todo == [] and counts["reused"] == 6

    # a task killed after writing its files, before its record: the shard is computed again, the others reused
    os.remove(shards.shard_record(path, 2))
    _, todo, counts = shards.prepare(study, False, _Log())
    assert [(s.slot, s.compute.size) for s in todo] == [(2, 2)] and counts["reused"] == 4
    s = todo[0]
    shards.write_shard(path, s.slot, s.start, _rows(table, s.start, s.stop), s.digest, {})

    # a damaged shard: set aside, named, its runs computed again
    f = shards.shard_files(path, 1)["y"]
    raw = bytearray(open(f, "rb").read())
    raw[5] ^= 0xFF
    open(f, "wb").write(bytes(raw))
    log = _Log()
    _, todo, _ = shards.prepare(study, False, log)
    assert [(s.slot, s.compute.size) for s in todo] == [(1, 2)]
    assert any("damaged shard 1" in line and "array y" in line for line in log.lines)
    s = todo[0]
    shards.write_shard(path, s.slot, s.start, _rows(table, s.start, s.stop), s.digest, {})

    # one more grid value: a new store; the runs of the old values are copied, only the new value's integrated
    bigger = _study(tmp_path, grid={"theta_dot0": [0.5, 0.75, 1.0]})
    table2, todo, counts = shards.prepare(bigger, False, _Log())
    new = {int(x) for x in table2.hash} - {int(x) for x in table.hash}
    computed = {int(table2.hash[s.start + i]) for s in todo for i in s.compute}
    assert computed == new and len(new) == 3 and counts["copied"] == 6
    assert os.path.isdir(shards.previous_shard_store(study.results, "sw"))


def test_the_reference_ode_of_each_grid_value_spread_over_two_workers_gives_the_closed_forms_errors(tmp_path):
    """errors.reference reference with reference_kind ode: each instance's DOP853 solve (milliseconds each; a
    2000-value scan spent 16.4-16.8 s on them in one process) spread over two workers (``forking.forked_map``, whose
    own test checks the processes); e_s is still the offset put in, the pendulum's closed form being the oracle of
    the states."""
    from hbvm_workflow.ensemble_errors import summary_columns

    study = _study(tmp_path, errors={"reference": "reference", "reference_kind": "ode", "norm": "inf", "sample": 0.5})
    table = shards.run_table(study)
    delta = _exact_store(study, table, -1)
    cols = summary_columns(study, workers=2)
    # the reference ODE at rtol 1e-13 (docs/method.md, section 5) on states of size <= 2
    assert np.allclose(cols["e_s"], delta, rtol=0, atol=1e-10) and (cols["status"] == "ok").all()


def test_the_errors_against_the_h2_runs_match_a_hand_oracle(tmp_path):
    """errors.reference self in a summary: the h/2 partners are runs of the store (the last row's is no row's run);
    a row's e_s is the largest difference from its partner at the sample times (hand: the offsets put in at
    t = 0.5 differ by 7 (h^2 - h^2 / 4)), its rate 2; a row whose partner failed has no e_s and says why."""
    from hbvm_workflow.ensemble_errors import compute_summary_errors, row_runs, summary_columns
    from hbvm_workflow.storage import open_errors_at

    study = _study(tmp_path, errors={"reference": "self", "norm": "inf", "sample": 0.5})
    table = shards.run_table(study)
    # per instance: the rows' runs h = 0.1, 0.05, 0.025, then the last row's partner 0.0125
    assert table.runs == 8 and list(table.h[:4]) == [0.1, 0.05, 0.025, 0.0125]
    assert list(table.sample_every[:4]) == [5, 10, 20, 40] and list(table.n) == [-1] * 8
    run, partner = row_runs(study)
    assert list(run) == [0, 1, 2, 4, 5, 6] and list(partner) == [1, 2, 3, 5, 6, 7]
    _exact_store(study, table, 3)  # the second instance's h = 0.0125 run (a partner only) fails
    cols = summary_columns(study)
    want = 5.25 * table.h[run[:5]] ** 2  # |delta(h) - delta(h/2)|
    # the exact solution is evaluated at the same times for both runs: round-off of the state (|y| <= 2) only
    assert np.allclose(cols["e_s"][:5], want, rtol=0, atol=1e-14)
    assert np.allclose(cols["rate_s"][[1, 2, 4]], 2.0, atol=1e-9) and np.isnan(cols["rate_s"][[0, 3]]).all()
    assert list(cols["status"]) == ["ok"] * 5 + ["partner failed"] and np.isnan(cols["e_s"][5])
    assert cols["error"][5] == "h/2 run: step 13: diverged" and np.isclose(cols["e_H"][5], 1e-3 * 0.025)
    out = tmp_path / "out"
    out.mkdir()
    compute_summary_errors(study, str(out / "errors.zarr"), str(out / "errors.csv"), str(out / "timings.csv"))
    with open(out / "timings.csv") as fh:  # one line per run, the partners' too
        timings = list(csv.DictReader(fh))
    assert [r["h"] for r in timings] == ["0.1", "0.05", "0.025", "0.0125"] * 2
    assert [r["status"] for r in timings] == ["ok"] * 7 + ["failed"]
    with open(out / "errors.csv") as fh:
        assert [r["status"] for r in csv.DictReader(fh)] == ["ok"] * 5 + ["partner failed"]
    ds = open_errors_at(str(out / "errors.zarr"))
    assert int(ds.status.sel(scheme="hbvm_k2_s2", h=0.025, theta_dot0=1.0)) == 2  # partner_failed


def test_a_store_of_the_earlier_format_is_computed_anew_and_refused_by_the_readers(tmp_path):
    """A store written before the records became Zarr groups (format hbvm-shards/1: ``shards/<slot>.json`` files
    inside the store, arrays without dimension names) is never read as this format: the readers refuse it in one
    line, the solve step makes a new store and computes every run again (none copied from it)."""
    import json

    study = _study(tmp_path)
    os.makedirs(study.dir, exist_ok=True)
    table, todo, _ = shards.prepare(study, False, _Log())
    path = shards.shard_store(study.results, "sw")
    for s in todo:
        shards.write_shard(path, s.slot, s.start, _rows(table, s.start, s.stop), s.digest, {})
    root = os.path.join(path, "zarr.json")
    meta = json.load(open(root))
    meta["attributes"]["format"] = "hbvm-shards/1"
    json.dump(meta, open(root, "w"))
    for slot, (a, b) in enumerate(table.slots()):  # its records, complete for its runs
        json.dump({"format": "hbvm-shards/1", "digest": table.digest(a, b)}, open(f"{path}/shards/{slot}.json", "w"))
    one_line = r"^\S+runs\.zarr: a sharded store of format hbvm-shards/1, written by an earlier version .*again[^\n]*$"
    for read in (shards.open_shards, shards.read_all):
        with pytest.raises(MissingStoreError, match=one_line):
            read(path)
    assert not shards.complete(path)
    _, todo, counts = shards.prepare(study, False, _Log())
    assert sum(s.compute.size for s in todo) == table.runs and counts == {"reused": 0, "copied": 0, "failed_reused": 0}
    assert shards.read_attrs(path)["format"] == shards.FORMAT


def test_save_is_summary_for_a_sweep_and_refuses_what_a_summary_cannot_hold(tmp_path):
    from hbvm_core.errors import ConfigError

    assert _study(tmp_path).cfg["save"] == "summary"
    assert _study(tmp_path, kind="convergence").cfg["save"] == "trajectory"
    with pytest.raises(ConfigError, match=r"^studies\.sw\.errors\.lambda_sample: save: summary keeps the multiplier"):
        _study(tmp_path, errors={"reference": "exact", "norm": "inf", "sample": 0.5, "lambda_sample": 0.5})
    with pytest.raises(ConfigError, match=r"^studies\.sw\.save = 'summary' runs the compiled ensemble loop"):
        _study(tmp_path, backend="numpy")


# --------------------------------------------------------------------------- the backend key: provenance
def test_backend_cuda_is_valid_for_a_summary_and_refused_for_trajectories_at_parse(tmp_path):
    """The schema takes backend cuda; a save: trajectory study refuses it in one line naming the key (the per-run
    loops have no GPU path); a save: summary study takes it without asking for a GPU (the shard decides)."""
    from hbvm_core.errors import ConfigError
    from hbvm_workflow.schema import validate_config

    validate_config({"studies": {"sw": {**SWEEP, "backend": "cuda"}}})
    with pytest.raises(ConfigError, match=r"^config\.studies\.sw\.backend = 'gpu': 'gpu' is not one of .*'cuda'"):
        validate_config({"studies": {"sw": {**SWEEP, "backend": "gpu"}}})
    assert _study(tmp_path, backend="cuda").cfg["backend"] == "cuda"
    with pytest.raises(ConfigError, match=r"^studies\.sw\.backend = 'cuda': the per-run loops of save: trajectory"):
        _study(tmp_path, kind="convergence", backend="cuda")


def test_changing_backend_reruns_nothing_and_each_run_keeps_the_backend_that_computed_it(tmp_path):
    """A summary study's runs are the same runs whatever its backend (hashes, the solve marker's digest, the
    aggregate's and render's params): a store computed under numba is reused whole under cuda or auto; the
    backend of each run comes back from the shard records (a copied run's from its source)."""
    from hbvm_workflow.study import number_config, shown_config

    studies = {b: _study(tmp_path, backend=b) for b in ("auto", "numba", "cuda")}
    digests = {b: (st.runs_digest(), [h for _, h in st.job_hashes()]) for b, st in studies.items()}
    assert digests["cuda"] == digests["numba"] == digests["auto"]
    assert number_config(studies["cuda"].cfg) == number_config(studies["numba"].cfg)
    assert shown_config(studies["cuda"].cfg) == shown_config(studies["numba"].cfg)
    trajectory = {b: _study(tmp_path, kind="convergence", backend=b) for b in ("numba", "numpy")}
    assert trajectory["numba"].runs_digest() != trajectory["numpy"].runs_digest()  # there the loop is identity

    study = studies["numba"]
    os.makedirs(study.dir, exist_ok=True)
    table, todo, _ = shards.prepare(study, False, _Log())
    path = shards.shard_store(study.results, "sw")
    ran = ["numba", "cuda", "cuda", "cuda", "numba", "numba"]  # by hand: two shards of mixed provenance
    for s in todo:
        pairs = shards.run_lengths(np.array(ran[s.start : s.stop], dtype=object))
        shards.write_shard(path, s.slot, s.start, _rows(table, s.start, s.stop), s.digest, {"backends": pairs})
    for b in ("cuda", "auto"):
        _, todo, counts = shards.prepare(studies[b], False, _Log())
        assert todo == [] and counts == {"reused": 6, "copied": 0, "failed_reused": 0}
    assert shards.row_backends(path, np.arange(6)).tolist() == ran
    assert shards.row_backends(path, np.array([5, 1])).tolist() == ["numba", "cuda"]
    shards.write_shard(path, 0, 0, _rows(table, 0, 2), table.digest(0, 2), {"backend": "numba"})  # an old record
    assert shards.row_backends(path, np.arange(2)).tolist() == ["numba", "numba"]


def test_backend_cuda_without_a_gpu_stops_the_shard_in_one_line_before_touching_the_store(tmp_path):
    """backend cuda where the shard's host has no GPU: one line naming the study, the key and the host (the GPU
    is looked for where the shard runs, not at the parse); the shard's record is left as it was."""
    from hbvm_core.errors import BackendError
    from hbvm_core.kernels.cuda import cuda_available
    from hbvm_workflow.shard_worker import solve_shard

    if cuda_available():
        pytest.skip("a GPU (or numba-cuda's simulator) is present")
    study = _study(tmp_path, backend="cuda")
    os.makedirs(study.dir, exist_ok=True)
    table, todo, _ = shards.prepare(study, False, _Log())
    path = shards.shard_store(study.results, "sw")
    s = todo[0]
    shards.write_shard(path, s.slot, s.start, _rows(table, s.start, s.stop), "other", {})  # an earlier record
    with pytest.raises(BackendError, match=r"^studies\.sw\.backend = 'cuda' on host .+: backend 'cuda': no GPU") as e:
        solve_shard(shards.shard_spec(study, table, s))
    assert "\n" not in str(e.value) and "backend auto" in str(e.value)
    assert shards.read_record(path, s.slot)["digest"] == "other"


@pytest.mark.slow
def test_a_shard_under_auto_runs_its_small_blocks_on_the_cpu_and_records_it(tmp_path):
    """backend auto (the default) with blocks below hbvm_core.ensemble.GPU_MIN_RUNS: the CPU ensemble, the reason
    in the task's note, numba in the record for each run."""
    from hbvm_workflow.shard_worker import solve_shard

    study = _study(tmp_path)
    os.makedirs(study.dir, exist_ok=True)
    table, todo, _ = shards.prepare(study, False, _Log())
    res = solve_shard(shards.shard_spec(study, table, todo[0]))
    assert res["backend"] == "numba" and "fewer than the GPU's least block" in res["note"]
    path = shards.shard_store(study.results, "sw")
    assert shards.read_record(path, 0)["backends"] == [["numba", 2]]
    assert shards.row_backends(path, np.arange(2)).tolist() == ["numba", "numba"]


@pytest.mark.slow
def test_an_ensemble_loop_in_the_disk_cache_is_warm_though_its_scalar_loop_never_ran(tmp_path):
    """shard_worker.block_cached reads the ensemble loops' own cache entries: a structure that only ever ran as an
    ensemble (no scalar marker, ``uncached_loop`` still names it) is warm, so no solve job warms it again; while
    its lockstep block (kernels/lanes.py: a call of MIN_GROUP runs or more compiles it) is not compiled, it is not;
    and one that only ever ran in lockstep (its per-run block never compiled, as in a sweep) is warm."""
    import json
    import subprocess
    import sys

    code = """
import json
from hbvm_core import get_problem, integrate_ensemble
from hbvm_core.kernels import uncached_loop
from hbvm_core.kernels.lanes import MIN_GROUP
from hbvm_core.methods import method_from_entry
from hbvm_workflow.shard_worker import block_cached
p = get_problem("planar_pendulum", theta_dot0=0.75)
m = method_from_entry({"method": "hbvm", "solver": "fixed-point", "k": 2, "s": 1})
before = block_cached(m, p)
integrate_ensemble([p], m, 0.1, 1, backend="numba")
one = block_cached(m, p)
integrate_ensemble([p], m, [0.1] * MIN_GROUP, 1, backend="numba")
lockstep_only = method_from_entry({"method": "rattle"})  # another template: its per-run block never compiled
integrate_ensemble([p], lockstep_only, [0.1] * MIN_GROUP, 1, backend="numba")
print(json.dumps([before, one, block_cached(m, p), uncached_loop(m, p) is not None, block_cached(lockstep_only, p)]))
"""
    env = dict(os.environ, HBVM_KERNEL_CACHE=str(tmp_path / "kernels"))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.splitlines()[-1]) == [False, False, True, True, True]


def _edit_attrs(path: str, change) -> None:
    """Change the root attributes of a store in its zarr.json, as a tool or a person would."""
    import json

    doc_path = os.path.join(path, "zarr.json")
    with open(doc_path) as fh:
        doc = json.load(fh)
    change(doc["attributes"])
    with open(doc_path, "w") as fh:
        json.dump(doc, fh)


def _rewrite_h(path: str, factor: float) -> None:
    """Rewrite the h coordinate through zarr (valid checksums: only the seal can tell)."""
    import zarr

    a = zarr.open_group(path, mode="r+")["h"]
    a[:] = np.asarray(a[:]) * factor


@pytest.mark.parametrize("edit", ["grid value", "h coordinate"])
def test_an_edited_grid_value_or_h_is_refused_by_readers_and_the_solve_step_makes_the_store_again(tmp_path, edit):
    from hbvm_workflow.storage import StoreError

    study = _study(tmp_path)
    os.makedirs(study.dir, exist_ok=True)
    table, todo, _ = shards.prepare(study, False, _Log())
    path = shards.shard_store(study.results, "sw")
    for s in todo:
        shards.write_shard(path, s.slot, s.start, _rows(table, s.start, s.stop), s.digest, {})
    clean = shards.open_shards(path)
    key = table.grid[0]
    if edit == "grid value":
        _edit_attrs(path, lambda a: a["combos"][0].update({key: 99.0}))
        where = r"runs\.zarr: zarr\.json: edited after the store was created"
    else:
        _rewrite_h(path, 2.0)
        where = r"runs\.zarr: array h: c/0: edited after the store was created"
    assert not shards.complete(path)
    for read in (shards.open_shards, shards.read_all):
        with pytest.raises(StoreError, match=where) as err:
            read(path)
        assert "\n" not in str(err.value)
    log = _Log()
    _, todo, counts = shards.prepare(study, False, log)
    assert any(line.startswith(f"store {path}: ") and "made again" in line for line in log.lines), log.lines
    assert sum(s.compute.size for s in todo) == 0 and counts["copied"] == table.runs  # every row copied, none run
    for s in todo:  # what the shard task does with rows it copies (shard_worker.solve_shard)
        rows = {name: shards.read_rows(s.sources[0]["store"], name, s.sources[0]["src"]) for name in shards.DATA}
        shards.write_shard(path, s.slot, s.start, rows, s.digest, {})
    shards.finish(study)
    again = shards.open_shards(path)  # the plan's labels and step sizes, as before the edit
    assert np.array_equal(again.indexes["run"].get_level_values(key), clean.indexes["run"].get_level_values(key))
    np.testing.assert_array_equal(again["h"].values, table.h)
    np.testing.assert_array_equal(again.H_error.values, np.arange(table.runs))


def test_a_deleted_shard_file_is_refused_naming_the_shard_and_file_never_read_as_nan(tmp_path):
    from hbvm_workflow.storage import StoreError
    from hbvm_workflow.verify import check_store

    table = _table(runs=2000, shard_runs=500)
    path = str(tmp_path / "runs.zarr")
    shards.create(path, table, "x", str(tmp_path / ".tmp"))
    _write_all(path, table)
    f = shards.shard_files(path, 1)["y"]
    os.remove(f)
    rel = os.path.relpath(f, path)
    for read in (shards.open_shards, shards.read_all):
        with pytest.raises(StoreError, match=f"array y: shard 1 \\({rel}\\): shard file missing"):
            read(path)
    assert not shards.complete(path)
    assert check_store(path) == ("y", f"shard 1 ({rel}): shard file missing")


def test_a_damaged_shard_read_raises_one_line_naming_the_store_shard_and_file(tmp_path):
    from hbvm_workflow.storage import StoreError
    from hbvm_workflow.verify import check_store

    table = _table(runs=2000, shard_runs=500)
    path = str(tmp_path / "runs.zarr")
    shards.create(path, table, "x", str(tmp_path / ".tmp"))
    _write_all(path, table)
    f = shards.shard_files(path, 2)["scalars"]
    raw = bytearray(open(f, "rb").read())
    raw[len(raw) // 3] ^= 0xFF  # same size: only reading (or the record's digest) can tell
    open(f, "wb").write(bytes(raw))
    rel = os.path.relpath(f, path)
    ds = shards.open_shards(path)
    with pytest.raises(StoreError) as err:
        ds.H_error.load()
    msg = str(err.value)
    assert msg.startswith(f"{path}: array scalars: shard 2 ({rel}): unreadable (") and "\n" not in msg, msg
    np.testing.assert_array_equal(ds.H_error[:1000].values, np.arange(1000))  # the intact shards still read
    assert check_store(path) == (
        "scalars",
        f"shard 2 ({rel}): shard file changed after the shard was written (its digest differs)",
    )


@pytest.mark.parametrize("save_every, expected", [(1, [1, 1, 1]), (4, [4, 4, 4])])
def test_sample_all_keeps_every_saved_step_as_a_trajectory_does(tmp_path, save_every, expected):
    """errors.sample all: the states at every save_every-th step (h = 0.1, 0.05, 0.025 over t_end 1: 10, 20, 40
    steps; saved points N // save_every + 1, and the last where save_every does not divide N)."""
    study = _study(tmp_path, errors={"reference": "exact", "norm": "inf", "sample": "all"}, save_every=save_every)
    table = shards.run_table(study)
    assert list(table.sample_every[:3]) == expected
    N = np.array([10, 20, 40])
    assert table.S == max(N // save_every + 1 + (N % save_every != 0))
