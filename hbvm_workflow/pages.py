"""Transparent huge pages off for the workflow's processes (``small_pages``).

A solve writes its arrays once, from start to end: trajectories, a shard's states, the kernels' outputs. With
transparent huge pages (``/sys/kernel/mm/transparent_hugepage/enabled``: always), each first touch of fresh memory
is a 2 MB page fault; on virtual machines such faults cost far more than the 4 kB ones (measured on the benchmark
machine: 48 MB of fresh memory written in 0.37-0.45 s with them, 0.02 s without, and a 10^4-run sweep end to end
22.1 s against 15.6 s). Nothing reads those arrays often enough for the fewer TLB misses of huge pages to count.

``prctl(PR_SET_THP_DISABLE)`` (Linux 3.15) applies to the calling process and is inherited by its children, forked
or executed: Snakemake's parse sets it for its jobs and their Dask workers, a shard or batch task for a worker that
another program started (a SLURM worker job). ``HBVM_HUGE_PAGES=1`` leaves the pages as the system has them.
"""

from __future__ import annotations

import ctypes
import os
import sys

#: prctl option (linux/prctl.h)
PR_SET_THP_DISABLE = 41
_done = False


def small_pages() -> bool:
    """Turn transparent huge pages off for this process and its children (once); True where that took effect.
    Nothing on other systems, with HBVM_HUGE_PAGES=1, or where the call fails (an old kernel, a sandbox)."""
    global _done
    if _done or not sys.platform.startswith("linux") or os.environ.get("HBVM_HUGE_PAGES") == "1":
        return _done
    try:
        _done = ctypes.CDLL(None, use_errno=True).prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        _done = False
    return _done
