"""QuietClose drops the heartbeat failure a worker logs when its own closing cuts the heartbeat short, and nothing else.

The race is made to happen, with a real in-process scheduler and worker on loopback: the
scheduler holds its answer to a heartbeat (its ``heartbeat_worker`` handler waits) while the
worker closes, so the worker's closing shuts the connection under the call. distributed logs
the failure itself: without the plugin the record is there, with its text, which also checks
that ``HEARTBEAT_FAILED`` is still what distributed writes.
"""

from __future__ import annotations

import asyncio
import logging

import pytest
from distributed import Scheduler, Worker

from hbvm_workflow.cluster import dask_client
from hbvm_workflow.quiet_close import HEARTBEAT_FAILED, HeartbeatCutByClose, QuietClose

LOG = logging.getLogger("distributed.worker")


class Kept(logging.Handler):
    """Keeps the messages of the records that pass the logger's filters."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture
def kept():
    handler, filters = Kept(), list(LOG.filters)
    LOG.addHandler(handler)
    yield handler
    LOG.removeHandler(handler)
    LOG.filters[:] = filters  # the plugin's filter outlives the in-process worker


async def close_during_heartbeat(quiet: bool, also_running: bool = False) -> None:
    async with Scheduler(host="127.0.0.1", port=0, dashboard_address=None) as scheduler:
        answer = scheduler.handlers["heartbeat_worker"]
        release = asyncio.Event()

        async def held(*args, **kwargs):
            await release.wait()
            return answer(*args, **kwargs)

        async with Worker(scheduler.address, host="127.0.0.1", dashboard=False, nthreads=1) as worker:
            if quiet:
                await worker.plugin_add(QuietClose())
            if also_running:
                LOG.error(HEARTBEAT_FAILED)  # as when the scheduler is lost mid-run
            scheduler.handlers["heartbeat_worker"] = held
            beat = asyncio.create_task(worker.heartbeat())
            await asyncio.sleep(0.2)  # the heartbeat is waiting for its answer
            await worker.close()
            await beat
            release.set()


@pytest.mark.parametrize("quiet", [False, True], ids=["without", "with"])
def test_a_heartbeat_cut_short_by_the_workers_closing_is_dropped(kept, quiet):
    asyncio.run(close_during_heartbeat(quiet))
    assert [m for m in kept.messages if m == HEARTBEAT_FAILED] == ([] if quiet else [HEARTBEAT_FAILED])


def test_a_heartbeat_failing_while_the_worker_runs_is_still_logged(kept):
    asyncio.run(close_during_heartbeat(quiet=True, also_running=True))
    assert [m for m in kept.messages if m == HEARTBEAT_FAILED] == [HEARTBEAT_FAILED]


@pytest.mark.slow
def test_the_local_cluster_workers_have_the_filter():
    """dask_client registers the plugin: each forked worker process has the filter on its logger."""
    with dask_client({"n_workers": 2}) as client:
        found = client.run(lambda: [type(f).__name__ for f in logging.getLogger("distributed.worker").filters])
    assert list(found.values()) == [[HeartbeatCutByClose.__name__]] * 2
