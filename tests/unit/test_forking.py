"""forking.beside: a function run in a forked process while the job goes on (the aggregation's CSV files beside its
errors.zarr): its work is done when the block ends, its failure is the job's one line, and one thread runs it first."""

from __future__ import annotations

import os

import pytest

from hbvm_core.errors import ConfigError, HBVMError
from hbvm_workflow.forking import beside


def test_the_function_runs_in_another_process_and_is_done_at_the_end(tmp_path):
    marker = tmp_path / "child.txt"
    with beside(lambda: marker.write_text(str(os.getpid()))):
        pass
    assert int(marker.read_text()) != os.getpid()  # another process wrote it, before the block ended


def test_a_failure_in_the_forked_process_is_raised_as_its_one_line():
    def fail():
        raise ConfigError("studies.x.h: bad\nsecond line")

    with pytest.raises(HBVMError, match=r"^studies\.x\.h: bad$"):
        with beside(fail):
            pass

    def crash():
        raise OSError(28, "No space left on device")

    with pytest.raises(HBVMError, match=r"^OSError: \[Errno 28\] No space left on device$"):
        with beside(crash):
            pass


def test_the_block_s_own_failure_comes_first_and_the_child_is_waited_for(tmp_path):
    marker = tmp_path / "child.txt"
    with pytest.raises(ValueError, match="body"):
        with beside(lambda: marker.write_text("done")):
            raise ValueError("body")
    assert marker.read_text() == "done"


def test_one_thread_runs_the_function_first_in_this_process():
    seen = []
    with beside(lambda: seen.append(os.getpid()), parallel=False):
        assert seen == [os.getpid()]
