# The study's figure: a log-log convergence plot with reference slopes, or the
# published fig1 / fig2 / fig3 (the study's `plot` key), as PNG and PDF.


rule plot:
    input:
        manifest=f"{RESULTS}/{{study}}/solve.json",
        zarr=f"{RESULTS}/{{study}}/errors.zarr",
    output:
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
        mem_mb=2000,
        runtime=30,
    log:
        "logs/{study}/plot.log",
    script:
        "../scripts/plot.py"
