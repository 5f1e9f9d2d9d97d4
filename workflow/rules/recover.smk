# Resume after a kill with the same command (hbvm_workflow/recover.py). Included first, so
# that it runs at parse time, before Snakemake checks its lock and incomplete markers:
#
# - here, in the main process of a run that executes the workflow (not a job subprocess of an
#   executor, not --nolock / --touch / --unlock or another non-executing action): if the lock in
#   .snakemake/locks is the one a dead Snakemake recorded as its own, delete the outputs it left
#   half-written, their incomplete markers, the lock and the record, one warning line each; a dry
#   run only says what a run would remove;
# - onstart (Snakemake calls it once it holds the lock and has jobs to run; not in dry runs or with
#   --no-hooks): record this process as the owner of its lock files in .snakemake/hbvm-owner.json;
# - onsuccess / onerror: remove that record again.
#
# Snakemake keeps one handler of each kind: a later onstart/onsuccess/onerror replaces these
# (call hbvm_workflow.recover.record_owner / release_owner from it then).
import os

from snakemake.logging import logger

from hbvm_workflow import recover as hbvm_recover

_args = hbvm_recover.cli_args()
HBVM_RECOVER_MODE = hbvm_recover.mode(_args, workflow.is_main_process)
if HBVM_RECOVER_MODE is not None:
    for _line in hbvm_recover.recover(
        os.path.abspath(".snakemake"),
        dry_run=HBVM_RECOVER_MODE == "dry-run",
        outputs=not getattr(_args, "ignore_incomplete", False),
    ):
        logger.warning(_line)


onstart:
    if HBVM_RECOVER_MODE == "run":
        try:
            hbvm_recover.record_owner(str(workflow.persistence.path), hbvm_recover.workflow_locks(workflow))
        except OSError as exc:
            logger.warning(f"could not record this run as the owner of its lock ({exc}): resume with --unlock")


onsuccess:
    hbvm_recover.release_owner(str(workflow.persistence.path))


onerror:
    hbvm_recover.release_owner(str(workflow.persistence.path))
