"""How a solve spreads its tasks over the rule's cores (cluster.spread): every core busy, none oversubscribed."""

import pytest

from hbvm_workflow.cluster import spread


@pytest.mark.parametrize(
    ("cfg", "threads", "tasks", "expected"),
    [
        ({}, 2, 1, (1, 2)),  # one shard on two cores: one worker with both as numba threads
        ({}, 2, 3, (2, 1)),  # more tasks than cores: a single-threaded worker per core
        ({}, 8, 3, (3, 2)),  # 8 cores, 3 tasks: 3 workers of 8 // 3 = 2 threads (6 cores, none oversubscribed)
        ({}, 1, 5, (1, 1)),
        ({"n_workers": 4}, 8, 1, (4, 2)),  # the user's n_workers share the threads
        ({"cluster": "slurm"}, 8, 1, (1, 1)),  # worker jobs: one thread per process, as their environment says
        ({"address": "tcp://127.0.0.1:1"}, 8, 1, (1, 1)),
    ],
)
def test_spread(cfg, threads, tasks, expected):
    workers, per_task = spread(cfg, threads, tasks)
    assert (workers, per_task) == expected
    assert workers * per_task <= max(threads, workers)  # no more threads than the rule was given
