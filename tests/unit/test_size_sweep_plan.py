"""The plan of a sweep over a problem's size (the chain over ``links``): each size another structure with no compiled
loop, so its runs are cut into shards of one run (up to ``PER_RUN_SHARDS``) unless ``shard_runs`` says otherwise, the
store is as wide as the largest chain and names its coordinates, and the estimated work grows with the links.
Nothing is integrated or compiled."""

from __future__ import annotations

from hbvm_workflow.runs import work_seconds
from hbvm_workflow.shards import PER_RUN_SHARDS, coordinate_names, run_table
from hbvm_workflow.study import expand_study

SWEEP = {
    "kind": "sweep",
    "problem": "chain",
    "grid": {"links": [3, 5, 8]},
    "methods": [{"k": 2, "s": 2}, {"method": "rattle"}],
    "t_end": 0.1,
    "h": [0.01],
    "errors": {"reference": "none"},
}


def test_a_size_sweep_is_a_shard_per_run_as_wide_as_its_largest_chain(tmp_path):
    study = expand_study("cs", SWEEP, results=str(tmp_path))
    table = run_table(study)
    assert table.runs == 6 and table.shard_runs == 1 and len(table.slots()) == 6 <= PER_RUN_SHARDS
    assert (table.m, table.nu) == (16, 8)  # 8 links: 8 beads in the plane, a rod each
    names = coordinate_names(study, table.m)
    assert names[:4] == ["x0", "y0", "x1", "y1"] and names[-2:] == ["x7", "y7"]
    given = expand_study("cs", SWEEP | {"shard_runs": 4}, results=str(tmp_path))
    assert run_table(given).shard_runs == 4


def test_the_estimated_work_of_a_chain_grows_with_its_links(tmp_path):
    def work(links: int) -> float:
        cfg = SWEEP | {"grid": {"links": [links]}, "t_end": 1.0}  # 100 steps: the steps' cost, not the runs'
        return work_seconds(expand_study("w", cfg, results=str(tmp_path)).jobs)

    # measured through the workflow: HBVM(2,2) 1.2 -> 12.5 ms a step from 10 to 1000 links (benchmarks/README.md)
    assert work(1000) > 10 * work(20) and work(20) >= work(3)
