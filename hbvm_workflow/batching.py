"""Batches of runs for the solve step: one Dask task for many small runs, one for each large one.

A task costs some milliseconds of scheduling and transfer, as much as a whole run of a
few dozen steps; a sweep of thousands of such runs would pay mostly for that. Runs are
packed into batches by their estimated work (``Job.estimated_seconds``): a batch holds
about ``target_s`` of work, but a study's runs are cut into at least ``per_worker``
batches per worker so that the workers stay balanced; a run estimated at more than a
batch is a batch of its own. Batches come largest first.
"""

from __future__ import annotations

from collections.abc import Sequence

#: the work of one batch (seconds, estimated): its task overhead is then about 1 % of it
TARGET_S = 0.5
#: the least batches per worker (when there are runs enough), for balance
PER_WORKER = 4


def batches(jobs: Sequence, workers: int, target_s: float = TARGET_S, per_worker: int = PER_WORKER) -> list[list]:
    """``jobs`` cut into batches of about ``min(target_s, total / (workers * per_worker))`` estimated seconds."""
    jobs = sorted(jobs, key=lambda j: -j.estimated_seconds())
    if not jobs:
        return []
    total = sum(j.estimated_seconds() for j in jobs)
    size = min(target_s, total / (max(1, workers) * per_worker))
    out: list[list] = []
    current: list = []
    work = 0.0
    for job in jobs:
        current.append(job)
        work += job.estimated_seconds()
        if work >= size:
            out.append(current)
            current, work = [], 0.0
    if current:
        out.append(current)
    return out
