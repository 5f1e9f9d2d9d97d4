# Errors and rates per (method, h) of a solved study: errors.zarr (xarray over
# method, h), errors.csv, and the tables table.md / table.tex.


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
        md=f"{RESULTS}/{{study}}/table.md",
        tex=f"{RESULTS}/{{study}}/table.tex",
        html=report(
            f"{RESULTS}/{{study}}/table.html",
            caption="../report/table.rst",
            category="{study}",
            labels={"study": "{study}", "output": "table"},
        ),
    params:
        study=study_params,
    resources:
        mem_mb=2000,
        runtime=30,
    log:
        "logs/{study}/aggregate.log",
    script:
        "../scripts/aggregate.py"
