"""Transparent huge pages off for the workflow's processes (hbvm_workflow.pages): the kernel's own word for it,
/proc/<pid>/status THP_enabled, in a child process (the setting is per process, and inherited)."""

import os
import subprocess
import sys

import pytest

STATUS = "/proc/self/status"
pytestmark = pytest.mark.skipif(
    not os.path.exists(STATUS) or "THP_enabled" not in open(STATUS).read(),
    reason="no THP_enabled in /proc (not Linux 5.0+)",
)

CHILD = """
import subprocess, sys
from hbvm_workflow.pages import small_pages
print(small_pages())
status = lambda text: [l.split()[1] for l in text.splitlines() if l.startswith("THP_enabled")][0]
print(status(open("/proc/self/status").read()))
print(status(subprocess.run(["cat", "/proc/self/status"], capture_output=True, text=True).stdout))
"""


def _child(env: dict) -> list[str]:
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=env, check=True)
    return out.stdout.split()


def test_small_pages_turns_them_off_for_the_process_and_its_children():
    env = {k: v for k, v in os.environ.items() if k != "HBVM_HUGE_PAGES"}
    assert _child(env) == ["True", "0", "0"]  # set here, and inherited across fork + exec (cat)


def test_hbvm_huge_pages_1_leaves_them_as_the_system_has_them():
    # as this process has them (1, unless a Snakemake run in this process turned them off for itself)
    mine = [line.split()[1] for line in open(STATUS).read().splitlines() if line.startswith("THP_enabled")][0]
    assert _child(dict(os.environ, HBVM_HUGE_PAGES="1")) == ["False", mine, mine]
