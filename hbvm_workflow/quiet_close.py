"""A worker's own closing is not reported as an error on the terminal.

distributed's ``Worker.close`` stops the heartbeat timer but not a heartbeat already
in flight, then closes its connections: that heartbeat fails and is logged with a
traceback at ERROR, after a run that went well. ``QuietClose``, a worker plugin
registered on the clusters the solve step starts, drops that one record while its
worker is closing; a heartbeat failing at any other time (a scheduler lost mid-run)
is still logged.
"""

from __future__ import annotations

import logging

from distributed import Status, Worker
from distributed.diagnostics.plugin import WorkerPlugin

#: what ``Worker.heartbeat`` logs when the call to the scheduler fails
HEARTBEAT_FAILED = "Failed to communicate with scheduler during heartbeat."
CLOSING = (Status.closing, Status.closing_gracefully, Status.closed)


class HeartbeatCutByClose(logging.Filter):
    """Drops the heartbeat failure of ``worker`` while it is closing; every other record passes."""

    def __init__(self, worker: Worker) -> None:
        super().__init__()
        self.worker = worker

    def filter(self, record: logging.LogRecord) -> bool:
        return not (self.worker.status in CLOSING and record.getMessage() == HEARTBEAT_FAILED)


class QuietClose(WorkerPlugin):
    """Installs ``HeartbeatCutByClose`` for the worker it is set up on."""

    name = "hbvm-quiet-close"

    def setup(self, worker: Worker) -> None:
        logging.getLogger("distributed.worker").addFilter(HeartbeatCutByClose(worker))
