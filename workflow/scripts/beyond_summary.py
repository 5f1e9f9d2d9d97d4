"""Rule beyond_summary: the work-precision or long-time figure and table over all such studies."""

import logging
import sys
import time


def main(smk) -> None:
    from hbvm_workflow.layout import BEYOND
    from hbvm_workflow.script_support import job_locks, one_line_errors

    # the run lock, and the lock of the folder it writes (results/<study>/ or results/beyond/)
    with one_line_errors(smk.log), job_locks(smk.config, [BEYOND]):
        write(smk)


def write(smk) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from hbvm_workflow import beyond
    from hbvm_workflow.plan import planned_studies

    study_kind = smk.wildcards.kind
    logging.basicConfig(
        level=logging.INFO,
        format=f"%(asctime)s [beyond/{study_kind}] %(message)s",
        datefmt="%H:%M:%S",
        handlers=[logging.FileHandler(smk.log[0], mode="w"), logging.StreamHandler(sys.stderr)],
    )
    t0 = time.perf_counter()
    studies = list(planned_studies(smk.config, list(smk.params.studies)).values())
    out = smk.output
    beyond.write_summary(study_kind, studies, out.png, out.pdf, out.md, out.csv)
    logging.info(f"{study_kind} summary of {len(studies)} studies in {time.perf_counter() - t0:.2f} s")


if __name__ == "__main__":
    main(snakemake)  # noqa: F821
