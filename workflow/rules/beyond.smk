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
BEYOND_KINDS = tuple(name for name, kind in STUDY_KINDS.items() if kind.opt_in == "beyond")


def beyond_names(kind):
    return [n for n, s in STUDIES.items() if s.kind == kind]


def beyond_summary_targets():
    out = [f"{RESULTS}/beyond/{kind}.{ext}" for kind in BEYOND_KINDS if beyond_names(kind) for ext in ("png", "pdf", "md", "csv")]
    return out + time_to_accuracy_targets()


def time_to_accuracy_targets():
    return [f"{RESULTS}/beyond/time_to_accuracy.csv"] if beyond_names("work_precision") else []


def beyond_default_summaries():
    """The summaries, in the default target with config beyond: true (the studies' own files: their kind's entry)."""
    selected = any(STUDIES[n].kind in BEYOND_KINDS for n in SELECTED)
    return beyond_summary_targets() if config.get("beyond", False) and selected else []


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
        manifest=f"{RESULTS}/{{study}}/solve.json",
        csv=f"{RESULTS}/{{study}}/errors.csv",
    output:
        md=f"{RESULTS}/{{study}}/work_precision.md",
        csv=f"{RESULTS}/{{study}}/work_precision.csv",
    params:
        study=study_params,
    resources:
        mem_mb=2000,
        runtime=30,
    log:
        "logs/{study}/work_precision.log",
    script:
        "../scripts/beyond_study.py"


rule long_time:
    input:
        manifest=f"{RESULTS}/{{study}}/solve.json",
        csv=f"{RESULTS}/{{study}}/errors.csv",
    output:
        md=f"{RESULTS}/{{study}}/long_time.md",
        csv=f"{RESULTS}/{{study}}/long_time.csv",
    params:
        study=study_params,
    resources:
        mem_mb=2000,
        runtime=30,
    log:
        "logs/{study}/long_time.log",
    script:
        "../scripts/beyond_study.py"


rule time_to_accuracy:
    input:
        [f"{RESULTS}/{n}/work_precision.csv" for n in beyond_names("work_precision")],
        [f"{RESULTS}/{n}/errors.csv" for n in beyond_names("work_precision")],
    output:
        csv=f"{RESULTS}/beyond/time_to_accuracy.csv",
    params:
        studies={n: STUDIES[n].cfg for n in beyond_names("work_precision")},
    resources:
        mem_mb=2000,
        runtime=30,
    log:
        "logs/beyond/time_to_accuracy.log",
    script:
        "../scripts/time_to_accuracy.py"


rule beyond_summary:
    input:
        lambda wc: [f"{RESULTS}/{n}/{wc.kind}.csv" for n in beyond_names(wc.kind)],
        lambda wc: [f"{RESULTS}/{n}/errors.csv" for n in beyond_names(wc.kind)],
    output:
        png=f"{RESULTS}/beyond/{{kind}}.png",
        pdf=f"{RESULTS}/beyond/{{kind}}.pdf",
        md=f"{RESULTS}/beyond/{{kind}}.md",
        csv=f"{RESULTS}/beyond/{{kind}}.csv",
    wildcard_constraints:
        kind="work_precision|long_time",
    params:
        studies=lambda wc: {n: STUDIES[n].cfg for n in beyond_names(wc.kind)},
    resources:
        mem_mb=2000,
        runtime=30,
    log:
        "logs/beyond/{kind}.log",
    script:
        "../scripts/beyond_summary.py"
