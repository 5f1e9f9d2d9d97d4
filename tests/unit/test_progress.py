"""The solve step's progress display and the per-run lines that go to the log file only."""

from __future__ import annotations

import io
import logging

from hbvm_workflow.script_support import FILE_ONLY, Progress, study_logger


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_plain_progress_lines_each_tenth_and_at_the_end():
    out = io.StringIO()
    with Progress(20, stream=out, plain_every=3600) as p:
        for i in range(20):
            p.update(failed=i == 0)
    lines = out.getvalue().splitlines()
    assert len(lines) == 10 and lines[-1].startswith("solve: 20/20 runs, 1 failed, 0:00:0")
    assert "left" in lines[0] and "left" not in lines[-1]


def test_a_terminal_gets_one_redrawn_line():
    out = _Terminal()
    with Progress(3, stream=out) as p:
        for _ in range(3):
            p.update()
    text = out.getvalue()
    assert text.count("\n") == 1 and text.endswith("3/3 runs, 0:00:00 elapsed\x1b[K\n") and "\r" in text


def test_per_run_lines_go_to_the_log_file_only(tmp_path, capsys):
    log = study_logger("solve", "t", str(tmp_path / "solve.log"))
    log.info("10 runs: 0 reused")
    log.info("1/10 m/h=0.1: ok", extra=FILE_ONLY)
    for h in log.handlers:
        h.flush()
    assert "1/10 m/h=0.1: ok" in (tmp_path / "solve.log").read_text()
    err = capsys.readouterr().err
    assert "10 runs: 0 reused" in err and "1/10" not in err
    for h in list(log.handlers):
        log.removeHandler(h)
        h.close()
    logging.getLogger("hbvm.solve.t").handlers.clear()
