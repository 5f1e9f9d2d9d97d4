"""Where each run of a save: summary sweep was computed: timings.csv's host and worker and errors.zarr's host are
its shard's record (the record the shard task wrote, read here as JSON), through Snakemake and Dask; a run copied
into a new store (a grid value added) keeps the worker that computed it, not the one that copied it."""

from __future__ import annotations

import json

import pytest
from test_workflow import ok, read_csv, snakemake, write_config

from hbvm_workflow.storage import open_errors_at

pytestmark = pytest.mark.slow

SWEEP = {
    "kind": "sweep",
    "problem": "planar_pendulum",
    "grid": {"theta_dot0": [1.0, 1.9]},
    "methods": [{"k": 1, "s": 1}],
    "t_end": 1,
    "h": [0.1, 0.05],
    "errors": {"reference": "exact", "norm": 1, "sample": "all"},
    "shard_runs": 3,
}


def _records(res) -> list[dict]:
    """Each shard's record, read as JSON: the attributes of its group ``shards/<slot>/zarr.json``."""
    folder = res / "sw" / "runs.zarr" / "shards"
    slots = sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit())
    return [json.loads((folder / str(slot) / "zarr.json").read_text())["attributes"] for slot in slots]


def _where(res) -> dict[tuple[str, str], tuple[str, str]]:
    """(theta_dot0, h) -> (host, worker) of timings.csv, each checked against errors.zarr's host."""
    ds = open_errors_at(str(res / "sw" / "errors.zarr"))
    out = {}
    for r in read_csv(res / "sw" / "timings.csv"):
        out[r["theta_dot0"], r["h"]] = r["host"], r["worker"]
        at = ds.host.sel(scheme="hbvm_k1_s1", h=float(r["h"]), theta_dot0=float(r["theta_dot0"]))
        assert str(at.values) == r["host"], r
    return out


def test_each_run_of_a_sweep_names_the_host_and_worker_of_its_shards_record(tmp_path):
    write_config(tmp_path, {"sw": SWEEP}, select=["sw"], dask={"n_workers": 2})
    ok(snakemake(tmp_path, "--cores", "2"))
    res = tmp_path / "results"
    records = _records(res)
    assert len(records) == 2  # 4 runs in shards of 3
    timings = read_csv(res / "sw" / "timings.csv")
    assert len(timings) == 4
    for r, row in enumerate(timings):  # plan order: run r is in shard r // 3
        rec = records[r // 3]
        assert row["host"] and row["host"] == rec["host"], (row, rec)
        assert row["worker"].startswith(("tcp://", "tls://")) and row["worker"] == rec["worker"], (row, rec)
    before = _where(res)
    # the solve step's last line: how many workers computed the shards, and on which host
    done = [line for line in (tmp_path / "logs" / "sw" / "solve.log").read_text().splitlines() if " done in " in line]
    workers = {rec["worker"] for rec in records}
    host = records[0]["host"]
    count = f"{len(workers)} Dask worker{'s' if len(workers) > 1 else ''}"
    assert done[-1].endswith(f"; {count} took part, on 1 host: {host} ({len(workers)})"), done

    # a grid value added: a new store, the four runs copied into it by workers of a new cluster
    write_config(tmp_path, {"sw": SWEEP | {"grid": {"theta_dot0": [1.0, 1.5, 1.9]}}}, select=["sw"])
    ok(snakemake(tmp_path, "--cores", "2"))
    manifest = json.loads((res / "sw" / "solve.json").read_text())
    assert (manifest["computed"], manifest["copied"]) == (2, 4)
    after = _where(res)
    assert {key: after[key] for key in before} == before  # the copied runs: where they were computed
    records = _records(res)
    new = [after["1.5", h] for h in ("0.1", "0.05")]  # runs 2 and 3: shard 0's and shard 1's computed runs
    assert new == [(records[0]["host"], records[0]["worker"]), (records[1]["host"], records[1]["worker"])]
    assert not {w for _, w in new} & {w for _, w in before.values()}  # another cluster: other addresses
