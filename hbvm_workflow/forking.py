"""Work beside a job's own: a process forked from the job prepares (imports what it will need) while the job
computes, then does its part with what the job hands it (``beside``); items of one computation spread over processes
forked from the job (``forked_map``). Where the platform does not fork, or the job has one thread, the same work
runs in the job."""

from __future__ import annotations

import contextlib
import gc
import os
import pickle
from collections.abc import Callable, Iterator
from typing import Any

from hbvm_core.errors import HBVMError


@contextlib.contextmanager
def beside(prepare: Callable[[], None], work: Callable[[Any], None], parallel: bool = True) -> Iterator[Callable]:
    """Fork a process that runs ``prepare()`` at once and ``work(x)`` once the body of the ``with`` has handed it
    ``x`` by ``send(x)`` (the value the block binds; pickled into a file in memory that both share, a pipe tells the
    child it is there); the end of the block waits for it, and a failure there is raised here as an HBVMError of
    its one line. A block that ends without sending (its own failure) lets the process go without doing its work.
    Sequential where ``parallel`` is false or ``os.fork`` does not exist: ``send(x)`` runs ``prepare()`` and
    ``work(x)`` in this process."""
    if not parallel or not hasattr(os, "fork"):

        def run_here(x: Any) -> None:
            prepare()
            work(x)

        yield run_here
        return
    from_parent, to_child = os.pipe()  # (read end, write end): the parent's signal that the value is written
    from_child, to_parent = os.pipe()
    data = _shared_file()  # the value, pickled: written by the parent, read by the child (same open file)
    gc.freeze()  # the objects of now: out of the child's garbage collections, which would copy every page they touch
    try:
        pid = os.fork()
    except BaseException:
        gc.unfreeze()
        for fd in (from_parent, to_child, from_child, to_parent):
            os.close(fd)
        data.close()
        raise
    if pid == 0:  # the child: out by os._exit, without the parent's clean-up
        os.close(to_child)
        os.close(from_child)
        os._exit(_child(prepare, work, from_parent, to_parent, data))
    gc.unfreeze()
    os.close(from_parent)
    os.close(to_parent)

    def send(x: Any) -> None:
        # into the shared file, then one byte down the pipe: the block goes on at once, whatever the child is at (a
        # pipe fed by a thread waited for this thread's GIL at every 64 kB: a 10^5-run sweep's errors.zarr process
        # had built its Dataset 0.45 s after the columns were sent, against 0.1 s to build it)
        pickle.dump(x, data, protocol=pickle.HIGHEST_PROTOCOL)
        data.flush()
        with contextlib.suppress(BrokenPipeError):  # a child that failed in prepare: its line tells why
            os.write(to_child, b"1")

    try:
        yield send
    finally:
        os.close(to_child)  # the child's end of input: nothing sent, it reads no signal and leaves
        with os.fdopen(from_child, "rb") as fh:
            message = fh.read().decode(errors="replace")
        _, status = os.waitpid(pid, 0)
        data.close()
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise HBVMError(message or f"the forked process ended with status {code}")


#: the callable that forked_map's processes call: inherited by the fork, never pickled (it may hold problems, which
#: hold compiled callables)
_FORKED: Callable[[int], Any] | None = None


def forked_map(fn: Callable[[int], Any], n: int, workers: int) -> list:
    """[fn(0), ..., fn(n - 1)], computed by up to ``workers`` processes forked from this one (``fn`` and all it
    reads inherited, its results pickled back), in order; in this process where ``workers`` or ``n`` is under 2 or
    the platform does not fork."""
    import multiprocessing

    if workers < 2 or n < 2 or "fork" not in multiprocessing.get_all_start_methods():
        return [fn(i) for i in range(n)]
    from concurrent.futures import ProcessPoolExecutor

    global _FORKED
    _FORKED = fn
    try:
        ctx = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=min(workers, n), mp_context=ctx) as pool:
            return list(pool.map(_call_forked, range(n), chunksize=max(1, n // (4 * workers))))
    finally:
        _FORKED = None


def _call_forked(i: int) -> Any:
    return _FORKED(i)


def _shared_file():
    """An unnamed file in memory (Linux's memfd; elsewhere a temporary file, removed as it is closed): nothing
    of it is left behind, however the processes end."""
    if hasattr(os, "memfd_create"):
        with contextlib.suppress(OSError):  # a sandbox may refuse it: then a temporary file
            return os.fdopen(os.memfd_create("hbvm-beside", os.MFD_CLOEXEC), "w+b")
    import tempfile

    return tempfile.TemporaryFile()


def _child(prepare: Callable[[], None], work: Callable[[Any], None], read: int, write: int, data) -> int:
    """Run the two steps; the exit status, and on failure the one line written to ``write``."""
    try:
        prepare()
        with os.fdopen(read, "rb") as fh:
            signal = fh.read(1)
        if signal:
            work(pickle.loads(os.pread(data.fileno(), os.fstat(data.fileno()).st_size, 0)))
        return 0
    except BaseException as exc:  # noqa: BLE001 - every failure goes back to the parent as its line
        line = str(exc) if isinstance(exc, HBVMError) else f"{type(exc).__name__}: {exc}"
        os.write(write, (line.splitlines() or [""])[0].encode()[:2000])
        return 1
