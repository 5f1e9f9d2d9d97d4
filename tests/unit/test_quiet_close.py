"""QuietClose drops the heartbeat failure a worker logs while it closes, and nothing else.

A real in-process scheduler and worker (loopback): while the worker runs, the heartbeat
failure is logged; once it has closed, that record is dropped and any other still passes.
"""

from __future__ import annotations

import asyncio
import logging

from distributed import Scheduler, Worker

from hbvm_workflow.quiet_close import HEARTBEAT_FAILED, QuietClose


class Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_the_heartbeat_failure_is_dropped_only_while_the_worker_closes():
    log = logging.getLogger("distributed.worker")
    kept = Kept()
    log.addHandler(kept)
    before = list(log.filters)

    async def lifetime() -> None:
        async with Scheduler(host="127.0.0.1", port=0, dashboard_address=None) as scheduler:
            worker = Worker(scheduler.address, host="127.0.0.1", dashboard=False, nthreads=1)
            async with worker:
                QuietClose().setup(worker)
                log.error(HEARTBEAT_FAILED)  # a running worker: a lost scheduler, reported
                log.error("another error")
            log.error(HEARTBEAT_FAILED)  # the worker has closed: its own closing, dropped
            log.error("another error")

    try:
        asyncio.run(lifetime())
    finally:
        log.removeHandler(kept)
        log.filters[:] = before
    assert [m for m in kept.messages if m in (HEARTBEAT_FAILED, "another error")] == [
        HEARTBEAT_FAILED,
        "another error",
        "another error",
    ]
