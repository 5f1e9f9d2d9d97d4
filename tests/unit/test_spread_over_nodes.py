"""The sizing of a summary study spread over SLURM worker jobs (``hbvm_workflow.cluster``: ``spreads``,
``spread_plan``, ``nodes_of``, ``slurm_mem``), without SLURM: every expected number is worked out by hand."""

from __future__ import annotations

import pytest

from hbvm_core.errors import ConfigError, HBVMError
from hbvm_workflow.cluster import Nodes, nodes_of, slurm_mem, slurm_options, spread_plan, spreads

#: 50 nodes of 32 CPUs and 128000 MB (SLURM's MB are MiB)
BIG = Nodes("batch", 50, 32, 128000)
#: the lab: 2 nodes of 4 CPUs
LAB = Nodes("lab", 2, 4, 6000)


def test_a_study_spreads_only_with_spread_on_no_cluster_chosen_several_shards_and_work_above_the_threshold():
    on = {"spread": True}
    assert spreads(on, 3601, 2) and not spreads(on, 3600, 2)  # default dask.spread_after: 3600 core-seconds
    assert not spreads(on, 1e9, 1)  # one shard: one task, nothing to spread
    assert not spreads({}, 1e9, 100) and not spreads({"spread": False}, 1e9, 100)  # off without the profile
    assert spreads(on | {"dask": {"spread_after": 10}}, 11, 2) and not spreads(
        on | {"dask": {"spread_after": 10}}, 9, 2
    )
    # a cluster the user chose wins: SLURM, a scheduler, local workers fixed
    for dask in ({"cluster": "slurm"}, {"address": "tls://10.0.0.1:8786"}, {"scheduler_file": "s.json"}):
        assert not spreads(on | {"dask": dask}, 1e9, 100), dask
    assert not spreads(on | {"dask": {"n_workers": 4}}, 1e9, 100)
    assert spreads(on | {"dask": {"cluster": "local"}}, 1e9, 100)  # the schema's default


def test_worker_jobs_of_half_a_node_one_per_task_up_to_the_cores_and_what_fits_beside_the_solve_job():
    # 10^6 runs in 100 shards of 10^4, 10^5 s of work: 100 workers (one per task; 2*10^4 by work, 1600 cores),
    # 16 cores a job: ceil(100 / 16) = 7 jobs of 64000 MiB (128000 * 16 / 32)
    cfg, why = spread_plan({}, 100, 1e5, BIG)
    assert (cfg["cluster"], cfg["cores"], cfg["processes"], cfg["jobs"]) == ("slurm", 16, 16, 7)
    assert slurm_mem(cfg["memory"]) == "64000M" and cfg["queue"] == "batch"
    assert "7 worker jobs of 16 cores" in why and "100 workers wanted" in why and "\n" not in why
    # 10^8 runs in 10^5 shards: every core, 1600 workers = 100 jobs; but 50 nodes hold 2 each, one taken by the
    # solve job: 99
    cfg, _ = spread_plan({}, 10**5, 1e8, BIG)
    assert cfg["jobs"] == 99
    # little work: one worker per 5 s of it (12 s -> 3 workers -> 1 job of 16)
    assert spread_plan({}, 100, 12.0, BIG)[0]["jobs"] == 1
    # the lab: 2 cores a job; 20 tasks want 8 workers (every CPU), 4 jobs; 3 fit beside the solve job
    assert spread_plan({}, 20, 1e4, LAB)[0]["jobs"] == 3
    assert spread_plan({}, 4, 1e4, LAB)[0]["jobs"] == 2  # 4 tasks: 4 workers, 2 jobs
    # an odd number of CPUs: the left-over CPU holds the solve job, every node holds 2 jobs of 3 cores
    assert spread_plan({}, 1000, 1e6, Nodes("p", 3, 7, 7000))[0]["jobs"] == 6


def test_what_the_user_fixes_stays():
    cfg, why = spread_plan({"cores": 8, "memory": "10GB", "jobs": 3, "queue": "long"}, 100, 1e5, BIG)
    assert (cfg["cores"], cfg["processes"], cfg["jobs"], cfg["memory"], cfg["queue"]) == (8, 8, 3, "10GB", "long")
    assert "fixed by the config: dask.cores, dask.memory, dask.jobs" in why
    assert spread_plan({"cores": 8, "processes": 2}, 100, 1e5, BIG)[0]["jobs"] == 50  # 100 workers / 2 a job
    with pytest.raises(ConfigError, match="dask.cores = 64: the nodes of partition batch have 32 CPUs"):
        spread_plan({"cores": 64}, 100, 1e5, BIG)
    # nodes without configured memory (RealMemory=1): ask for dask.memory, one line
    with pytest.raises(ConfigError, match=r"partition p: its nodes report 1 MB .*give dask.memory$"):
        spread_plan({}, 10, 1e5, Nodes("p", 2, 4, 1))
    assert spread_plan({"memory": "1GB"}, 10, 1e5, Nodes("p", 2, 4, 1))[0]["memory"] == "1GB"


def test_memory_requests_are_whole_mib_rounded_down_never_above_what_was_asked():
    # dask-jobqueue's own rounding gave --mem=2G for 1500MB (ceil to GiB from 1 GiB on)
    assert slurm_mem("1500MB") == "1430M"  # 1.5e9 / 2**20 = 1430.51
    assert slurm_mem("500MB") == "476M"  # 476.84
    assert slurm_mem("64000MiB") == "64000M" and slurm_mem("2GiB") == "2048M"
    assert slurm_options({"cluster": "slurm", "memory": "1500MB"})["job_mem"] == "1430M"
    assert slurm_options({"cluster": "slurm"})["job_mem"] == "953M"  # the default 1GB: 10^9 / 2**20 = 953.67


def test_the_nodes_of_a_partition_from_sinfo_rows():
    rows = [line.split() for line in ("lab* node1 4 6000", "lab* node2 8 5000", "big node9 64+ 256000")]
    assert nodes_of(rows, None) == Nodes("lab", 2, 4, 5000)  # the default partition (*): its smallest node
    assert nodes_of(rows, "lab") == Nodes("lab", 2, 4, 5000)
    assert nodes_of(rows, "big") == Nodes("big", 1, 64, 256000)
    with pytest.raises(HBVMError, match="sinfo lists no node of partition gpu"):
        nodes_of(rows, "gpu")


def test_the_solve_step_chooses_the_cluster_of_a_summary_study_and_says_why(tmp_path, monkeypatch, caplog):
    """The solve step's ``choose_cluster`` (hbvm_workflow.dispatch): the config's dask section below
    dask.spread_after (one line saying so), a SLURMCluster on this node's interface above it (sinfo, the interface
    and the time left faked)."""
    import logging

    from hbvm_workflow import cluster
    from hbvm_workflow import dispatch as solve
    from hbvm_workflow.loading import load_studies
    from hbvm_workflow.runs import work_seconds

    sweep = {"kind": "sweep", "problem": "planar_pendulum", "grid": {"theta_dot0": [1.0, 1.5]}, "t_end": 1}
    sweep |= {"methods": [{"k": 1, "s": 1}], "h": [0.1, 0.05], "errors": {"reference": "exact"}, "shard_runs": 1}
    study = load_studies({"results": str(tmp_path), "studies": {"sw": sweep}, "select": ["sw"]})["sw"]
    work = work_seconds(study.jobs)
    specs = [{"study": "sw", "start": i, "stop": i + 1} for i in range(4)]
    log = logging.getLogger("hbvm.test.spread")
    caplog.set_level(logging.INFO, logger=log.name)

    below = {"spread": True, "dask": {"spread_after": 2 * work}}
    assert solve.choose_cluster(below, {"sw": study}, specs, [], {"sw": log}) == below["dask"]
    assert [r.getMessage().split(":")[0] for r in caplog.records] == ["one job"]
    assert "4 shard tasks" in caplog.records[0].getMessage()
    caplog.clear()
    assert solve.choose_cluster({"dask": {}}, {"sw": study}, specs, [], {"sw": log}) == {}  # spread off: no line
    fixed = {"spread": True, "dask": {"spread_after": 0.001, "n_workers": 2}}  # the user's cluster: no line
    assert solve.choose_cluster(fixed, {"sw": study}, specs, [], {"sw": log}) == fixed["dask"]
    assert not caplog.records

    monkeypatch.setattr(cluster, "partition_nodes", lambda queue: LAB)
    monkeypatch.setattr(cluster, "node_interface", lambda: "lab0")
    monkeypatch.setattr(cluster, "job_time_left", lambda: "6:30")
    above = {"spread": True, "dask": {"spread_after": work / 2}}
    cfg = solve.choose_cluster(above, {"sw": study}, specs, [], {"sw": log})
    # work of a few ms: one worker wanted, one job of half a lab node (2 cores, 3000 MiB), ending with this job
    assert (cfg["cluster"], cfg["jobs"], cfg["cores"], cfg["memory"]) == ("slurm", 1, 2, "3000MiB")
    assert (cfg["interface"], cfg["walltime"], cfg["queue"], cfg["spread_after"]) == ("lab0", "6:30", "lab", work / 2)
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.startswith("spread over SLURM: 4 shard tasks") and line.endswith("; scheduler on lab0")
