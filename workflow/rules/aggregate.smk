# Errors and rates of solved studies, and their tables and figures, in two rules per study:
#
# - rule aggregate (the numbers): results/<study>/errors.zarr (xarray over scheme, h), errors.csv (only
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
from hbvm_workflow.cluster import rule_resources  # config resources.<rule>
from hbvm_workflow.study import number_config


def aggregate_threads(name):
    """One, and for a large study one per 500 runs (its runs are read in that many processes); Snakemake
    caps it at --cores."""
    return max(1, -(-len(STUDIES[name].jobs) // 500))


def number_params(wildcards):
    """The study's keys that define its numbers (everything but the presentation keys): a change reruns
    rule aggregate."""
    return number_config(STUDIES[wildcards.study].cfg)


def shown(path, caption, output):
    return report(path, caption=caption, category="{study}", labels={"study": "{study}", "output": output})


def runs_of(wildcards):
    """The marker of the study's current set of runs where the shared solve job builds it: a new set of runs
    (a changed job hash: another identity, a changed param) is a missing input, so that solve reruns and this
    study is aggregated again. A study of solve_study reruns by that rule's param instead."""
    from hbvm_workflow.layout import runs_marker

    name = wildcards.study
    return [runs_marker(RESULTS, name, STUDIES[name].runs_digest())] if name in SOLVED_TOGETHER else []


rule aggregate:
    input:
        manifest=f"{RESULTS}/{{study}}/solve.json",
        runs=runs_of,
    output:
        zarr=directory(f"{RESULTS}/{{study}}/errors.zarr"),
        csv=shown(f"{RESULTS}/{{study}}/errors.csv", "../report/errors.rst", "errors.csv"),
        timings=f"{RESULTS}/{{study}}/timings.csv",
    params:
        numbers=number_params,
    threads: lambda wc: aggregate_threads(wc.study)
    resources:
        **rule_resources(config, "aggregate", mem_mb=2000, runtime=30),
    log:
        "logs/{study}/aggregate.log",
    script:
        "../scripts/aggregate.py"


rule render:
    input:
        manifest=f"{RESULTS}/{{study}}/solve.json",
        zarr=f"{RESULTS}/{{study}}/errors.zarr",
        csv=f"{RESULTS}/{{study}}/errors.csv",
    output:
        md=f"{RESULTS}/{{study}}/table.md",
        tex=f"{RESULTS}/{{study}}/table.tex",
        html=shown(f"{RESULTS}/{{study}}/table.html", "../report/table.rst", "table"),
        png=shown(f"{RESULTS}/{{study}}/{{study}}.png", "../report/plot.rst", "figure"),
        pdf=f"{RESULTS}/{{study}}/{{study}}.pdf",
    params:
        study=study_params,
    resources:
        **rule_resources(config, "aggregate", mem_mb=2000, runtime=30),
    log:
        "logs/{study}/render.log",
    script:
        "../scripts/render.py"
