"""Rule time_to_accuracy: results/beyond/time_to_accuracy.csv over all work_precision studies."""

import logging
import sys
import time


def main(smk) -> None:
    from hbvm_workflow.layout import BEYOND
    from hbvm_workflow.script_support import job_locks, one_line_errors

    # the run lock, and the lock of the folder it writes (results/beyond/)
    with one_line_errors(smk.log), job_locks(smk.config, [BEYOND]):
        write(smk)


def write(smk) -> None:
    from hbvm_workflow import beyond
    from hbvm_workflow.plan import planned_studies

    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s [beyond/time_to_accuracy] %(message)s",
        datefmt="%H:%M:%S",
        handlers=[logging.FileHandler(smk.log[0], mode="w"), logging.StreamHandler(sys.stderr)],
    )
    t0 = time.perf_counter()
    studies = list(planned_studies(smk.config, list(smk.params.studies)).values())
    n = beyond.write_time_to_accuracy(studies, smk.output.csv)
    logging.info(f"time to accuracy: {n} rows from {len(studies)} studies in {time.perf_counter() - t0:.2f} s")


if __name__ == "__main__":
    main(snakemake)  # noqa: F821
