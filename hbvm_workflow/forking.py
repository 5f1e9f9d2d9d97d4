"""Work beside a job's own: a function run in a process forked from the job (it inherits the job's arrays, nothing
is pickled), while the job goes on; where the platform does not fork, the function runs first, in the job."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator

from hbvm_core.errors import HBVMError


@contextlib.contextmanager
def beside(fn: Callable[[], None], parallel: bool = True) -> Iterator[None]:
    """Run ``fn()`` in a forked process while the body of the ``with`` runs, and wait for it at the end: an
    exception in ``fn`` is raised here (an HBVMError, with the child's one line) once the body is done. Sequential
    (``fn`` first) where ``parallel`` is false (a job given one thread) or ``os.fork`` does not exist."""
    if not parallel or not hasattr(os, "fork"):
        fn()
        yield
        return
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: fn, its one line on failure, and out without the parent's clean-up
        os.close(read)
        code = 0
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - every failure goes back to the parent as its line
            line = str(exc) if isinstance(exc, HBVMError) else f"{type(exc).__name__}: {exc}"
            os.write(write, (line.splitlines() or [""])[0].encode()[:2000])
            code = 1
        os._exit(code)
    os.close(write)
    try:
        yield
    finally:
        with os.fdopen(read, "rb") as fh:
            message = fh.read().decode(errors="replace")
        _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise HBVMError(message or f"the forked process ended with status {os.waitstatus_to_exitcode(status)}")
