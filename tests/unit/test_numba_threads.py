"""A shard task in a worker whose numba threads were launched at another count than its environment now says (an
earlier task, or the process a local worker was forked from): it runs, on the launched count, and compiles."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import os
    os.environ["NUMBA_NUM_THREADS"] = "{launched}"
    import numba
    import numpy as np

    @numba.njit(parallel=True)
    def total(x):
        acc = 0.0
        for i in numba.prange(x.size):
            acc += x[i]
        return acc

    total(np.ones(8))  # numba's threads launched
    os.environ["NUMBA_NUM_THREADS"] = "{env}"  # a worker's env, as Dask sets it, changed since
    from hbvm_workflow.shard_worker import numba_threads

    used = numba_threads(2)

    @numba.njit
    def twice(x):  # a compile after the change: numba reads NUMBA_NUM_THREADS again here
        return 2.0 * x

    print(used, os.environ["NUMBA_NUM_THREADS"], twice(1.5))
    """
)


@pytest.mark.parametrize(("launched", "env"), [(1, 2), (2, 1)])
def test_a_launched_thread_pool_keeps_its_count_and_the_next_compile_runs(launched, env):
    script = SCRIPT.replace("{launched}", str(launched)).replace("{env}", str(env))
    clean = {k: v for k, v in os.environ.items() if k != "NUMBA_NUM_THREADS"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=clean, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    # by hand: the launched count, the environment set back to it, 2 x 1.5
    assert out.stdout.split() == [str(launched), str(launched), "3.0"]
