"""Rule render: the tables (table.md, .tex, .html) and the figure (<study>.png, .pdf) of one study, from the
numbers rule aggregate wrote (errors.csv, errors.zarr; the published figures read the runs too). A change of the
study's title, plot or expected_rates reruns only this step.
"""

import time


def render_study(name: str, config: dict, inp, out, log_path: str, entry=None) -> None:
    """``entry``: the rule's param (the study's entry), checked against the plan."""
    import matplotlib

    matplotlib.use("Agg")
    from hbvm_workflow.plan import check_planned, planned_studies
    from hbvm_workflow.plot_dispatch import study_plot
    from hbvm_workflow.script_support import plural, study_logger
    from hbvm_workflow.study import shown_config
    from hbvm_workflow.tables import rows_from_outputs, write_tables

    log = study_logger("render", name, log_path)
    t0 = time.perf_counter()
    study = planned_studies(config, [name])[name]  # the parse's expansion (hbvm_workflow.plan)
    if entry is not None:
        check_planned(study, "its entry", entry, shown_config(study.cfg))
    rows = rows_from_outputs(study, inp.csv, inp.zarr)
    write_tables(study, rows, out.md, out.tex, out.html)
    t1 = time.perf_counter()
    log.info(f"tables of {plural(len(rows), 'row')} written in {t1 - t0:.2f} s")
    study_plot(study, inp.zarr, out.png, out.pdf)
    log.info(f"{study.plot} plot written in {time.perf_counter() - t1:.2f} s")


def main(smk) -> None:
    from hbvm_workflow.script_support import job_locks, one_line_errors

    name = smk.wildcards.study
    with one_line_errors(smk.log), job_locks(smk.config, [name]):
        entry = getattr(getattr(smk, "params", None), "study", None)  # the rule's param (none when called by hand)
        render_study(name, smk.config, smk.input, smk.output, smk.log[0], entry)


if __name__ == "__main__":
    main(snakemake)  # noqa: F821
