# Errors and rates per (scheme, h) of solved studies, and their figures:
# results/<study>/errors.zarr (xarray over scheme, h), errors.csv (only what the
# runs determine: bit-identical however the study ran), timings.csv (what was
# measured: each run's wall time, backend and Dask worker), table.md / table.tex
# / table.html, and <study>.png / <study>.pdf (a log-log convergence plot with
# reference slopes, or the published fig1 / fig2 / fig3, by the study's `plot` key).
#
# - rule aggregate: one job for all the studies of the default target (their
#   imports paid once; the studies aggregated side by side in forked processes);
# - rule aggregate_study: one job for each other study asked for by name.
from hbvm_workflow.cluster import rule_resources  # config resources.<rule>


def aggregate_threads(names):
    """One per study, and for a large study one per 500 runs (its runs are read in that many processes);
    Snakemake caps it at --cores."""
    runs = sum(len(STUDIES[n].jobs) for n in names)
    return max(len(names), -(-runs // 500))


def aggregate_outputs(names):
    """The outputs of the studies ``names`` (names, or the wildcard "{study}"), a list per kind of output."""

    def shown(path, caption, name, output):
        return report(path, caption=caption, category=name, labels={"study": name, "output": output})

    out = {
        "zarr": [directory(f"{RESULTS}/{n}/errors.zarr") for n in names],
        "csv": [shown(f"{RESULTS}/{n}/errors.csv", "../report/errors.rst", n, "errors.csv") for n in names],
        "timings": [f"{RESULTS}/{n}/timings.csv" for n in names],
        "md": [f"{RESULTS}/{n}/table.md" for n in names],
        "tex": [f"{RESULTS}/{n}/table.tex" for n in names],
        "html": [shown(f"{RESULTS}/{n}/table.html", "../report/table.rst", n, "table") for n in names],
        "png": [shown(f"{RESULTS}/{n}/{n}.png", "../report/plot.rst", n, "figure") for n in names],
        "pdf": [f"{RESULTS}/{n}/{n}.pdf" for n in names],
    }
    return out


if DEFAULT_STUDIES:

    rule aggregate:
        input:
            manifest=[f"{RESULTS}/{name}/solve.json" for name in DEFAULT_STUDIES],
        output:
            **aggregate_outputs(DEFAULT_STUDIES),
        params:
            studies=DEFAULT_STUDIES,
            # everything that defines the studies' tables and plots: a change reruns them
            cfg={name: STUDIES[name].cfg for name in DEFAULT_STUDIES},
        threads: aggregate_threads(DEFAULT_STUDIES)
        resources:
            **rule_resources(config, "aggregate", mem_mb=2000, runtime=30),
        log:
            [f"logs/{name}/aggregate.log" for name in DEFAULT_STUDIES],
        script:
            "../scripts/aggregate.py"


rule aggregate_study:
    input:
        manifest=f"{RESULTS}/{{study}}/solve.json",
    output:
        **aggregate_outputs(["{study}"]),
    wildcard_constraints:
        study=study_regex([n for n in STUDIES if n not in DEFAULT_STUDIES]),
    params:
        studies=lambda wc: [wc.study],
        cfg=lambda wc: {wc.study: STUDIES[wc.study].cfg},
    threads: lambda wc: aggregate_threads([wc.study])
    resources:
        **rule_resources(config, "aggregate", mem_mb=2000, runtime=30),
    log:
        "logs/{study}/aggregate.log",
    script:
        "../scripts/aggregate.py"
