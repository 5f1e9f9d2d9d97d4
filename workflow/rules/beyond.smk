# Beyond the paper: work-precision and long-time studies.
#
# A study with `kind: work_precision` or `kind: long_time` is solved by the same
# `solve` rule (Dask, one Zarr store per run) and aggregated by the same
# `aggregate` rule (errors.csv, and the figure results/<study>/<study>.png from
# hbvm_workflow.beyond.study_figure) as a convergence study; the rules below write
# its tables results/<study>/work_precision.{md,csv} or long_time.{md,csv}, and
# `rule beyond` adds the figures and tables over all such studies in
# results/beyond/{work_precision,long_time}.{png,pdf,md,csv} and the machine-readable
# results/beyond/time_to_accuracy.csv (rule time_to_accuracy); `rule work_precision`
# builds just the work_precision studies and that CSV.
#
# They cost minutes, so they are opt-in:  snakemake --cores 2 beyond
# (or `beyond: true` in the config / `--config beyond=True`, or naming them in `select:`, to put them
# in the default target).
#
# Paths: hbvm_workflow.layout (beyond_table, beyond_summary, time_to_accuracy_csv; the Snakefile includes
# this file before rules/aggregate.smk, so its inputs name errors.csv by layout.errors_csv, not by
# rules.aggregate); the functions (beyond_names, beyond_summary_targets, ...): rules/common.smk.
EXTRA_DEFAULT_TARGETS.append(beyond_default_summaries)


rule beyond:
    input:
        [t for kind in BEYOND_KINDS for n in beyond_names(kind) for t in study_targets(n)],
        beyond_summary_targets(),


# snakemake --cores 2 work_precision: just the work_precision studies and the time-to-accuracy CSV.
rule work_precision:
    input:
        [t for n in beyond_names("work_precision") for t in study_targets(n)],
        time_to_accuracy_targets(),


rule work_precision_tables:
    input:
        manifest=layout.manifest_path(RESULTS, "{study}"),
        csv=layout.errors_csv(RESULTS, "{study}"),
    output:
        md=layout.beyond_table(RESULTS, "{study}", "work_precision", "md"),
        csv=layout.beyond_table(RESULTS, "{study}", "work_precision", "csv"),
    params:
        study=study_params,
    resources:
        mem_mb=2000,
        runtime=30,
    log:
        layout.log_path("{study}", "work_precision"),
    conda:
        HBVM_ENV
    script:
        "../scripts/beyond_study.py"


rule long_time:
    input:
        manifest=layout.manifest_path(RESULTS, "{study}"),
        csv=layout.errors_csv(RESULTS, "{study}"),
    output:
        md=layout.beyond_table(RESULTS, "{study}", "long_time", "md"),
        csv=layout.beyond_table(RESULTS, "{study}", "long_time", "csv"),
    params:
        study=study_params,
    resources:
        mem_mb=2000,
        runtime=30,
    log:
        layout.log_path("{study}", "long_time"),
    conda:
        HBVM_ENV
    script:
        "../scripts/beyond_study.py"


rule time_to_accuracy:
    input:
        [layout.beyond_table(RESULTS, n, "work_precision", "csv") for n in beyond_names("work_precision")],
        [layout.errors_csv(RESULTS, n) for n in beyond_names("work_precision")],
    output:
        csv=layout.time_to_accuracy_csv(RESULTS),
    params:
        studies={n: STUDIES[n].cfg for n in beyond_names("work_precision")},
    resources:
        mem_mb=2000,
        runtime=30,
    log:
        layout.log_path(layout.BEYOND, layout.TIME_TO_ACCURACY),
    conda:
        HBVM_ENV
    script:
        "../scripts/time_to_accuracy.py"


rule beyond_summary:
    input:
        lambda wc: [layout.beyond_table(RESULTS, n, wc.kind, "csv") for n in beyond_names(wc.kind)],
        lambda wc: [layout.errors_csv(RESULTS, n) for n in beyond_names(wc.kind)],
    output:
        png=layout.beyond_summary(RESULTS, "{kind}", "png"),
        pdf=layout.beyond_summary(RESULTS, "{kind}", "pdf"),
        md=layout.beyond_summary(RESULTS, "{kind}", "md"),
        csv=layout.beyond_summary(RESULTS, "{kind}", "csv"),
    wildcard_constraints:
        kind="work_precision|long_time",
    params:
        studies=lambda wc: {n: STUDIES[n].cfg for n in beyond_names(wc.kind)},
    resources:
        mem_mb=2000,
        runtime=30,
    log:
        layout.log_path(layout.BEYOND, "{kind}"),
    conda:
        HBVM_ENV
    script:
        "../scripts/beyond_summary.py"
