"""Work beside a job's own: a process forked from the job prepares (imports what it will need) while the job
computes, then does its part with what the job hands it; where the platform does not fork, or the job has one
thread, the same two steps run in the job."""

from __future__ import annotations

import contextlib
import gc
import os
import pickle
import threading
from collections.abc import Callable, Iterator
from typing import Any

from hbvm_core.errors import HBVMError


@contextlib.contextmanager
def beside(prepare: Callable[[], None], work: Callable[[Any], None], parallel: bool = True) -> Iterator[Callable]:
    """Fork a process that runs ``prepare()`` at once and ``work(x)`` once the body of the ``with`` has handed it
    ``x`` by ``send(x)`` (the value the block binds; pickled through a pipe); the end of the block waits for it, and
    a failure there is raised here as an HBVMError of its one line. A block that ends without sending (its own
    failure) lets the process go without doing its work. Sequential where ``parallel`` is false or ``os.fork``
    does not exist: ``send(x)`` runs ``prepare()`` and ``work(x)`` in this process."""
    if not parallel or not hasattr(os, "fork"):

        def run_here(x: Any) -> None:
            prepare()
            work(x)

        yield run_here
        return
    from_parent, to_child = os.pipe()  # (read end, write end)
    from_child, to_parent = os.pipe()
    gc.freeze()  # the objects of now: out of the child's garbage collections, which would copy every page they touch
    try:
        pid = os.fork()
    except BaseException:
        gc.unfreeze()
        for fd in (from_parent, to_child, from_child, to_parent):
            os.close(fd)
        raise
    if pid == 0:  # the child: out by os._exit, without the parent's clean-up
        os.close(to_child)
        os.close(from_child)
        os._exit(_child(prepare, work, from_parent, to_parent))
    gc.unfreeze()
    os.close(from_parent)
    os.close(to_parent)
    writer: list[threading.Thread] = []

    def send(x: Any) -> None:  # written by a thread: the block goes on while the child reads
        data = pickle.dumps(x, protocol=pickle.HIGHEST_PROTOCOL)
        writer.append(threading.Thread(target=_write_all, args=(to_child, data), daemon=True))
        writer[0].start()

    try:
        yield send
    finally:
        for t in writer:
            t.join()
        if not writer:
            os.close(to_child)  # nothing sent: the child reads the end and leaves
        with os.fdopen(from_child, "rb") as fh:
            message = fh.read().decode(errors="replace")
        _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise HBVMError(message or f"the forked process ended with status {code}")


def _write_all(fd: int, data: bytes) -> None:
    with os.fdopen(fd, "wb") as fh:
        with contextlib.suppress(BrokenPipeError):  # a child that failed in prepare: its line tells why
            fh.write(data)


def _child(prepare: Callable[[], None], work: Callable[[Any], None], read: int, write: int) -> int:
    """Run the two steps; the exit status, and on failure the one line written to ``write``."""
    try:
        prepare()
        with os.fdopen(read, "rb") as fh:
            data = fh.read()
        if data:
            work(pickle.loads(data))
        return 0
    except BaseException as exc:  # noqa: BLE001 - every failure goes back to the parent as its line
        line = str(exc) if isinstance(exc, HBVMError) else f"{type(exc).__name__}: {exc}"
        os.write(write, (line.splitlines() or [""])[0].encode()[:2000])
        return 1
