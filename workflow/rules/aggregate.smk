# Errors and rates of solved studies, and their tables and figures, in two rules per study:
#
# - rule aggregate (the numbers; those of a `save: summary` study are its solve job's, rules/solve.smk):
#   results/<study>/errors.zarr (xarray over scheme, h), errors.csv (only
#   what the runs determine: bit-identical however the study ran) and timings.csv (what was measured:
#   each run's wall time, backend and Dask worker), from the study's runs (its manifest solve.json);
#   its params are the study's keys that define numbers (``number_params``);
# - rule render (the layout): table.md / table.tex / table.html and <study>.png / <study>.pdf (a
#   log-log convergence plot with reference slopes, or the published fig1 / fig2 / fig3, by the study's
#   `plot` key) from the numbers; its params are the whole study entry.
#
# One job per study and rule, so that each study's outputs depend on its own entry only: a change of
# `title`, `plot` or `expected_rates` reruns only render (the errors are not recomputed), and choosing
# other studies with `select:` reruns nothing that is up to date (docs/workflow.md, "What reruns").
#
# Paths: hbvm_workflow.layout (the files of errors_outputs and render_outputs; rule render names its inputs by
# layout too, not by rules.aggregate.output, whose flags -- directory, report -- belong to the outputs); the
# functions: rules/common.smk.
from hbvm_workflow.cluster import rule_resources  # config resources.<rule>


rule aggregate:
    input:
        manifest=layout.manifest_path(RESULTS, "{study}"),
        runs=runs_of,
    wildcard_constraints:
        study=study_regex([n for n in STUDIES if n not in SUMMARY_STUDIES]),  # a summary study: its solve job
    output:
        zarr=directory(layout.errors_zarr(RESULTS, "{study}")),
        csv=shown(layout.errors_csv(RESULTS, "{study}"), "../report/errors.rst", layout.ERRORS_CSV),
        timings=layout.timings_csv(RESULTS, "{study}"),
    params:
        numbers=number_params,
    threads: lambda wc: aggregate_threads(wc.study)
    resources:
        **rule_resources(config, "aggregate", mem_mb=2000, runtime=30),
    log:
        layout.log_path("{study}", "aggregate"),
    conda:
        HBVM_ENV
    script:
        "../scripts/aggregate.py"


rule render:
    input:
        manifest=layout.manifest_path(RESULTS, "{study}"),
        zarr=layout.errors_zarr(RESULTS, "{study}"),
        csv=layout.errors_csv(RESULTS, "{study}"),
    output:
        md=layout.table_path(RESULTS, "{study}", "md"),
        tex=layout.table_path(RESULTS, "{study}", "tex"),
        html=shown(layout.table_path(RESULTS, "{study}", "html"), "../report/table.rst", "table"),
        png=shown(layout.figure_path(RESULTS, "{study}", "png"), "../report/plot.rst", "figure"),
        pdf=layout.figure_path(RESULTS, "{study}", "pdf"),
    params:
        study=study_params,
    resources:
        **rule_resources(config, "aggregate", mem_mb=2000, runtime=30),
    log:
        layout.log_path("{study}", "render"),
    conda:
        HBVM_ENV
    script:
        "../scripts/render.py"
