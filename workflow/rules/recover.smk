# Resume after a kill with the same command (hbvm_workflow/recover.py). It runs at parse time, before
# Snakemake checks its lock (after common.smk's config checks): in the main process of a run that executes
# the workflow, Snakemake's lock is broken (as --unlock does) only when no process of the run that
# took it is alive -- the kernel tells, by the run lock .snakemake/hbvm-run.lock that each of them
# holds; a dry run only says what a run would do. The outputs a killed run left half-written are
# recomputed by Snakemake (rerun-incomplete in the default workflow profile, profiles/default).
# The run first holds results/<study>/.snakemake.lock of each study it builds (hbvm_workflow.locks.hold_studies).
import os

from snakemake.logging import logger

from hbvm_workflow import layout as hbvm_layout
from hbvm_workflow import locks as hbvm_locks
from hbvm_workflow import recover as hbvm_recover
from hbvm_workflow import storage as hbvm_storage

HBVM_RECOVER_MODE = hbvm_recover.mode(hbvm_recover.cli_args(), workflow.is_main_process)
# One run at a time builds a study, from any working directory: another one would delete the outputs of
# the jobs it reruns while this one writes them. The studies this run may build (its targets; any other rule:
# every study of the config) are held before anything else: a run still building one of them makes this one
# wait up to lock_timeout seconds, saying for whom (pid, host, since when), then stop changing nothing; a job
# of a killed run still writing one (an orphan) is waited for the same way. A run of other studies in the same
# working directory is not held up, and told nothing.
if HBVM_RECOVER_MODE is not None:
    _every = [n for n in STUDIES if os.path.isdir(hbvm_layout.study_dir(RESULTS, n)) or n in SELECTED]
    _default = default_studies()
    _guarded = hbvm_recover.targeted_studies(hbvm_recover.cli_args(), RESULTS, _default, _every)
    try:
        if HBVM_RECOVER_MODE == "run":
            _timeout = float(config.get("lock_timeout", hbvm_locks.LOCK_TIMEOUT))
            hbvm_locks.hold_studies(RESULTS, _guarded, _timeout)
            hbvm_locks.wait_for_writers(RESULTS, _guarded, _timeout)
        _lines = hbvm_recover.recover(
            ".snakemake", dry_run=HBVM_RECOVER_MODE == "dry-run", results=RESULTS, studies=_guarded
        )
    except (hbvm_locks.Busy, hbvm_recover.Held) as exc:
        raise WorkflowError(str(exc)) from None
    for _line in _lines:
        logger.warning(_line)
# A manifest that lists a run as done whose store is damaged, changed or gone is no longer true, nor are the
# tables built from it: a run removes the manifest and errors.csv (holding the study's lock, above), so
# that Snakemake reruns the solve step, which recomputes those runs and reuses the rest, and the
# aggregation; a dry run only says so.
for _name in _guarded if HBVM_RECOVER_MODE is not None else ():
    _found = damaged_runs(_name)
    _broken = [f"{r} ({'changed' if what == 'changed' else 'damaged'})" for r, _, what in _found]
    _broken += [f"{r} (no store)" for r in lost_runs(_name)]
    if _broken:
        _manifest = hbvm_layout.manifest_path(RESULTS, _name)
        _what = f"study {_name}: {len(_broken)} run(s) of {_manifest} are not intact: {', '.join(_broken[:3])}"
        _what += ", ..." if len(_broken) > 3 else ""
        if HBVM_RECOVER_MODE == "run":
            for _run, _store, _damage in _found:
                if _damage != "changed":  # a damaged store is set aside: the solve step recomputes the run
                    _aside = hbvm_storage.set_aside(_store)
                    _where = f"; set aside as {_aside}" if _aside else ""
                    logger.warning(f"damaged store {_store}: {_damage}{_where}")
            for _path in (_manifest, hbvm_layout.errors_csv(RESULTS, _name)):
                if os.path.exists(_path):
                    os.remove(_path)
            logger.warning(f"{_what}; the solve step recomputes them")
        else:
            for _run, _store, _damage in _found:
                if _damage != "changed":
                    logger.warning(f"damaged store {_store}: {_damage}")
            logger.warning(f"{_what}; a run would recompute them")
# The very last line of a run (hbvm_workflow/outcome.py): the count of failed runs of the studies it builds,
# whether or not anything was done; with strict (config or study key) a failed run makes the exit status 1.
# A workflow that failed otherwise (a job raised: onerror) keeps Snakemake's error as its last words.
from hbvm_workflow.outcome import report_at_exit as hbvm_report_at_exit
from hbvm_workflow.outcome import workflow_failed as hbvm_workflow_failed

if HBVM_RECOVER_MODE == "run":
    hbvm_report_at_exit(config, RESULTS, _guarded)


onerror:
    hbvm_workflow_failed()
