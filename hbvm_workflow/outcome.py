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
from dataclasses import dataclass, field

from .layout import manifest_path

#: the exit status of a strict run with failed runs
STRICT_STATUS = 1
#: set when Snakemake reports a failed workflow (its onerror hook): its own error is then the last word
_FAILED = {"workflow": False}


def workflow_failed() -> None:
    """Snakemake's onerror hook: the workflow failed (a job raised), so no line is added after its error."""
    _FAILED["workflow"] = True


@dataclass(frozen=True)
class Failed:
    """The failed runs of one study: how many, the ids of the first ones, and {reason: how many} where known."""

    count: int
    runs: list[str] = field(default_factory=list)
    reasons: dict[str, int] = field(default_factory=dict)


def _failed_of(manifest: dict) -> Failed:
    """A manifest's failed runs: a list of ids (a study of run stores), or a count with the first ids and the
    reasons (a ``save: summary`` study)."""
    failed = manifest.get("failed") or []
    if isinstance(failed, int) and not isinstance(failed, bool):
        runs = [str(r) for r in manifest.get("failed_runs") or []]
        reasons = manifest.get("failed_reasons") or {}
        reasons = {str(k): int(v) for k, v in reasons.items()} if isinstance(reasons, dict) else {}
        return Failed(failed, runs, reasons)
    runs = [str(r) for r in failed]
    return Failed(len(runs), runs)


def failed_runs(results: str, studies) -> dict[str, Failed]:
    """{study: its failed runs} of the studies' manifests (a study not solved yet, or a manifest that cannot be
    read: none)."""
    out = {}
    for name in studies:
        try:
            with open(manifest_path(results, name)) as fh:
                failed = _failed_of(json.load(fh))
        except (OSError, ValueError, AttributeError, TypeError):
            continue
        if failed.count:
            out[name] = failed
    return out


def _named(name: str, f: Failed) -> str:
    """'study: id, id, id, ...' (and the reasons, where the manifest counts them)."""
    shown = f.runs[:3]
    text = f"{name}: {', '.join(shown)}{', ...' if f.count > len(shown) else ''}" if shown else f"{name}: {f.count}"
    if f.reasons:
        text += f" [{', '.join(f'{n} x {why}' for why, n in sorted(f.reasons.items(), key=lambda kv: -kv[1]))}]"
    return text


def last_line(failed: dict[str, Failed], strict: set[str]) -> str:
    """'failed runs: N (...)': by study, the first runs named (and why, for a sharded study); what strict does."""
    total = sum(f.count for f in failed.values())
    if not total:
        return "failed runs: 0"
    line = f"failed runs: {total} ({'; '.join(_named(name, f) for name, f in failed.items())})"
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
