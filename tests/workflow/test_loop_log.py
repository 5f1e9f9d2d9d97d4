"""The solve log names each loop that the solve step compiled or loaded, with its seconds."""

from __future__ import annotations

import re

import pytest
from test_workflow import ok, snakemake, write_config

pytestmark = pytest.mark.slow


def test_the_solve_log_has_a_line_per_loop_with_its_seconds(tmp_path):
    study = {
        "problem": "planar_pendulum",
        "methods": [{"k": 2, "s": 2}, {"method": "rattle"}],
        "t_end": 0.4,
        "h": [0.1, 0.05],
        "errors": {"reference": "exact", "norm": "inf", "sample": "all"},
    }
    write_config(tmp_path, {"loops": study})
    ok(snakemake(tmp_path, "--cores", "2"))
    log = (tmp_path / "logs" / "loops" / "solve.log").read_text()
    how = "(compiled|loaded from the kernel cache)"
    loop = rf"kernel: planar_pendulum, (\w+): per-run loop of (\w+?)_\w+: {how} in ([\d.]+) s"
    found = {m.group(1): (m.group(2), float(m.group(4))) for m in re.finditer(loop, log)}
    assert {label: template for label, (template, _) in found.items()} == {"hbvm_k2_s2": "hbvm", "rattle": "rattle"}
    ready = re.search(r"kernels of 2 \(problem, method\) pairs ready in ([\d.]+) s", log)
    assert ready, log
    # each loop's seconds are part of the warm-up's, timed by the solve step's own clock (0.1 s rounding each)
    assert sum(s for _, s in found.values()) <= float(ready.group(1)) + 0.2, log
