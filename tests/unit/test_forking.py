"""forking.beside: a forked process prepares while the job computes, then works on what the job hands it (the
aggregation's errors.zarr beside its CSV files): its work is done when the block ends, its failure is the job's one
line, a block that fails first lets it go, and one thread runs both steps in the job. forking.forked_map: items over
forked processes, in order, a callable that cannot be pickled included; one worker keeps them in the job."""

from __future__ import annotations

import os

import numpy as np
import pytest

from hbvm_core.errors import ConfigError, HBVMError
from hbvm_workflow.forking import beside, forked_map


def test_the_work_runs_in_another_process_on_what_was_sent_and_is_done_at_the_end(tmp_path):
    out = tmp_path / "child.npy"
    seen = []

    def prepare():
        seen.append(os.getpid())  # in the child's copy of this list: not seen here

    def work(x):
        np.save(out, x["a"] * 2 + len(seen) * (os.getpid() != x["parent"]))

    a = np.arange(300_000, dtype=float)  # larger than a pipe's buffer
    with beside(prepare, work) as send:
        send({"a": a, "parent": os.getpid()})
    assert seen == [] and np.array_equal(np.load(out), a * 2 + 1)  # prepared and worked once, elsewhere


def test_a_failure_in_the_forked_process_is_raised_as_its_one_line():
    def fail(_):
        raise ConfigError("studies.x.h: bad\nsecond line")

    with pytest.raises(HBVMError, match=r"^studies\.x\.h: bad$"):
        with beside(lambda: None, fail) as send:
            send(1)

    def crash():
        raise OSError(28, "No space left on device")

    with pytest.raises(HBVMError, match=r"^OSError: \[Errno 28\] No space left on device$"):
        with beside(crash, lambda x: None) as send:
            send(np.zeros(200_000))  # the child is gone before it reads: the job is told, not stuck


def test_a_block_that_fails_before_sending_lets_the_process_go_without_its_work(tmp_path):
    out = tmp_path / "child.txt"
    with pytest.raises(ValueError, match="body"):
        with beside(lambda: None, lambda x: out.write_text("worked")):
            raise ValueError("body")
    assert not out.exists()


def test_one_thread_runs_both_steps_in_this_process_when_sent():
    steps = []
    with beside(lambda: steps.append("prepare"), lambda x: steps.append((x, os.getpid())), parallel=False) as send:
        assert steps == []
        send(5)
        assert steps == ["prepare", (5, os.getpid())]


def test_the_value_goes_through_a_temporary_file_where_memfd_is_refused(tmp_path, monkeypatch):
    """A sandbox that refuses memfd_create: the value is handed through an unnamed temporary file instead."""

    def refused(*args):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "memfd_create", refused, raising=False)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    out = tmp_path / "child.npy"
    a = np.arange(100_000, dtype=float)
    with beside(lambda: None, lambda x: np.save(out, x * 3)) as send:
        send(a)
    assert np.array_equal(np.load(out), a * 3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["child.npy"]  # the temporary file is gone


def test_forked_map_computes_the_items_in_other_processes_and_returns_them_in_order():
    here = os.getpid()
    unpicklable = lambda i: (i * i, os.getpid())  # noqa: E731 - a lambda: pickle refuses it, the fork inherits it
    out = forked_map(unpicklable, 40, 2)
    assert [v for v, _ in out] == [i * i for i in range(40)]
    assert here not in {pid for _, pid in out}  # every item computed elsewhere
    assert {pid for _, pid in forked_map(unpicklable, 5, 1)} == {here}  # one worker: in this process
    with pytest.raises(ZeroDivisionError):  # a failing item is the caller's exception
        forked_map(lambda i: 1 // (i - 3), 6, 2)
