# Errors and rates per (method, h) of a solved study, and its figure, in one job
# per study (one Python start-up instead of two): errors.zarr (xarray over
# method, h), errors.csv (only what the runs determine: bit-identical however the
# study ran), timings.csv (what was measured: each run's wall time, backend and
# Dask worker), table.md / table.tex / table.html, and <study>.png / <study>.pdf
# (a log-log convergence plot with reference slopes, or the published fig1 /
# fig2 / fig3, by the study's `plot` key).
from hbvm_core.cluster import rule_resources  # config resources.<rule> (issue 7)


rule aggregate:
    input:
        manifest=f"{RESULTS}/{{study}}/solve.json",
    output:
        zarr=directory(f"{RESULTS}/{{study}}/errors.zarr"),
        csv=report(
            f"{RESULTS}/{{study}}/errors.csv",
            caption="../report/errors.rst",
            category="{study}",
            labels={"study": "{study}", "output": "errors.csv"},
        ),
        timings=f"{RESULTS}/{{study}}/timings.csv",
        md=f"{RESULTS}/{{study}}/table.md",
        tex=f"{RESULTS}/{{study}}/table.tex",
        html=report(
            f"{RESULTS}/{{study}}/table.html",
            caption="../report/table.rst",
            category="{study}",
            labels={"study": "{study}", "output": "table"},
        ),
        png=report(
            f"{RESULTS}/{{study}}/{{study}}.png",
            caption="../report/plot.rst",
            category="{study}",
            labels={"study": "{study}", "output": "figure"},
        ),
        pdf=f"{RESULTS}/{{study}}/{{study}}.pdf",
    params:
        study=study_params,
    resources:
        **rule_resources(config, "aggregate", mem_mb=2000, runtime=30),
    log:
        "logs/{study}/aggregate.log",
    script:
        "../scripts/aggregate.py"
