"""The last line of a workflow run: how many runs of the studies it built failed, and ``strict``.

A run that fails (a diverging or stalling iteration, a NaN) is data: its row in errors.csv says ``failed``
and the workflow exits 0 (docs/reliability.md). The main Snakemake process of a run that did not fail
otherwise prints, as the very last line of its output, the count of failed runs of the studies it built
(read from their manifests, ``solve.json``), whether or not anything was done; with ``strict: true`` (the
config's, ``--config strict=true``, or a study's own key) any failed run of such a study makes the exit
status 1.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import sys

from .layout import manifest_path

#: the exit status of a strict run with failed runs
STRICT_STATUS = 1
#: set when Snakemake reports a failed workflow (its onerror hook): its own error is then the last word
_FAILED = {"workflow": False}


def workflow_failed() -> None:
    """Snakemake's onerror hook: the workflow failed (a job raised), so no line is added after its error."""
    _FAILED["workflow"] = True


def failed_runs(results: str, studies) -> dict[str, list[str]]:
    """{study: the ids of its failed runs} of the studies' manifests (a study not solved yet: none)."""
    out = {}
    for name in studies:
        try:
            with open(manifest_path(results, name)) as fh:
                failed = list(json.load(fh).get("failed") or [])
        except (OSError, ValueError, AttributeError):
            failed = []
        if failed:
            out[name] = failed
    return out


def last_line(failed: dict[str, list[str]], strict: set[str]) -> str:
    """'failed runs: N (...)': by study, the first runs named; what strict does with them."""
    total = sum(len(v) for v in failed.values())
    if not total:
        return "failed runs: 0"
    parts = [f"{name}: {', '.join(runs[:3])}{', ...' if len(runs) > 3 else ''}" for name, runs in failed.items()]
    line = f"failed runs: {total} ({'; '.join(parts)})"
    if failed.keys() & strict:
        return f"{line}; strict: exit status {STRICT_STATUS}"
    return f"{line}, reported in errors.csv (strict=true makes them an error)"


def strict_studies(config: dict, studies) -> set[str]:
    """The studies whose failed runs fail the workflow run: all with the config's ``strict``, else those
    with their own ``strict: true``."""
    every = config.get("strict", False) in (True, "true")  # --config strict=true passes the string
    cfgs = config.get("studies") or {}
    return {name for name in studies if every or bool((cfgs.get(name) or {}).get("strict", False))}


def report_at_exit(config: dict, results: str, studies) -> None:
    """Print ``last_line`` when this process exits (after Snakemake's own last words), and with a strict
    study among the failed ones end it with ``STRICT_STATUS``. The main process of a run only."""
    names = list(studies)
    strict = strict_studies(config, names)

    def report() -> None:
        if _FAILED["workflow"]:
            return
        failed = failed_runs(results, names)
        print(last_line(failed, strict), file=sys.stderr, flush=True)
        if failed.keys() & strict:
            logging.shutdown()  # the log files flushed: os._exit runs no further exit handler
            sys.stdout.flush()
            os._exit(STRICT_STATUS)

    atexit.register(report)
