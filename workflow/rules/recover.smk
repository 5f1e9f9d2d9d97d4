# Resume after a kill with the same command (hbvm_workflow/recover.py). It runs at parse time, before
# Snakemake checks its lock (after common.smk's config checks): in the main process of a run that executes
# the workflow, Snakemake's lock is broken (as --unlock does) only when no process of the run that
# took it is alive -- the kernel tells, by the run lock .snakemake/hbvm-run.lock that each of them
# holds; a dry run only says what a run would do. The outputs a killed run left half-written are
# recomputed by Snakemake (rerun-incomplete in the default workflow profile, profiles/default).
# The run then holds results/<study>/.snakemake.lock of each study (hbvm_workflow.locks.hold_studies).
import os

from snakemake.logging import logger

from hbvm_workflow import layout as hbvm_layout
from hbvm_workflow import locks as hbvm_locks
from hbvm_workflow import recover as hbvm_recover
from hbvm_workflow import storage as hbvm_storage

HBVM_RECOVER_MODE = hbvm_recover.mode(hbvm_recover.cli_args(), workflow.is_main_process)
if HBVM_RECOVER_MODE is not None:
    for _line in hbvm_recover.recover(".snakemake", dry_run=HBVM_RECOVER_MODE == "dry-run"):
        logger.warning(_line)
# One run at a time builds a study, from any working directory: another one would delete the outputs of
# the jobs it reruns while this one writes them. The default target's studies and those already on disk
# (a study asked for by name on a fresh results folder is guarded by its jobs' locks only). Not while
# Snakemake's lock is kept (this run is refused).
if HBVM_RECOVER_MODE == "run" and not hbvm_recover.locked(".snakemake"):
    _guarded = [
        n
        for n, s in STUDIES.items()
        if os.path.isdir(os.path.join(RESULTS, n)) or (n in SELECTED and STUDY_TARGETS.get(s.kind, lambda n: [])(n))
    ]
    try:
        hbvm_locks.hold_studies(RESULTS, _guarded, config.get("lock_timeout", hbvm_locks.LOCK_TIMEOUT))
    except hbvm_locks.Busy as exc:
        raise WorkflowError(str(exc)) from None
# A manifest that lists a run as done whose store is damaged, changed or gone is no longer true, nor are the
# tables built from it: a run removes the manifest and errors.csv (holding the study's lock, above), so
# that Snakemake reruns the solve step, which recomputes those runs and reuses the rest, and the
# aggregation; a dry run only says so.
for _name in SELECTED if HBVM_RECOVER_MODE is not None else ():
    _found = damaged_runs(_name)
    _broken = [f"{r} ({'changed' if what == 'changed' else 'damaged'})" for r, _, what in _found]
    _broken += [f"{r} (no store)" for r in lost_runs(_name)]
    if _broken:
        _manifest = hbvm_layout.manifest_path(RESULTS, _name)
        _what = f"study {_name}: {len(_broken)} run(s) of {_manifest} are not intact: {', '.join(_broken[:3])}"
        _what += ", ..." if len(_broken) > 3 else ""
        if HBVM_RECOVER_MODE == "run" and not hbvm_recover.locked(".snakemake"):
            for _run, _store, _damage in _found:
                if _damage != "changed":  # a damaged store is set aside: the solve step recomputes the run
                    _aside = hbvm_storage.set_aside(_store)
                    _where = f"; set aside as {_aside}" if _aside else ""
                    logger.warning(f"damaged store {_store}: {_damage}{_where}")
            for _path in (_manifest, hbvm_layout.aggregate_outputs(RESULTS, _name)["csv"]):
                if os.path.exists(_path):
                    os.remove(_path)
            logger.warning(f"{_what}; the solve step recomputes them")
        else:
            for _run, _store, _damage in _found:
                if _damage != "changed":
                    logger.warning(f"damaged store {_store}: {_damage}")
            logger.warning(f"{_what}; a run would recompute them")
