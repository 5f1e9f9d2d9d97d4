"""Rules work_precision_tables and long_time: one study's tables (hbvm_workflow.beyond; figure: aggregate)."""

import logging
import sys
import time


def main(smk) -> None:
    from hbvm_workflow.script_support import job_locks, one_line_errors

    # the run lock, and the lock of the folder it writes (results/<study>/ or results/beyond/)
    with one_line_errors(smk.log), job_locks(smk.config, [smk.wildcards.study]):
        write(smk)


def write(smk) -> None:
    from hbvm_workflow import beyond
    from hbvm_workflow.plan import planned_studies

    config = smk.config
    name = smk.wildcards.study
    logging.basicConfig(
        level=logging.INFO,
        format=f"%(asctime)s [{name}] %(message)s",
        datefmt="%H:%M:%S",
        handlers=[logging.FileHandler(smk.log[0], mode="w"), logging.StreamHandler(sys.stderr)],
    )
    t0 = time.perf_counter()
    study = planned_studies(config, [name])[name]
    out = smk.output
    n = beyond.write_study(study, smk.input.csv, out.md, out.csv)
    logging.info(f"{study.study_kind}: {n} runs in the figure and tables, {time.perf_counter() - t0:.2f} s")


if __name__ == "__main__":
    main(snakemake)  # noqa: F821
