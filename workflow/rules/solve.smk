# The solve step. It fans the (problem, k, s, h) runs of studies out on one Dask
# cluster and writes each run as its own Zarr store under results/<study>/runs/.
# Runs whose store is complete (same parameter hash) are reused, so adding one h
# to a study computes exactly one new run and an unchanged rerun computes
# nothing. Each study's manifest results/<study>/solve.json lists its runs.
#
# - rule solve: one job for all the studies of the default target (the published
#   study: seven studies, 103 runs, one Python start-up and one cluster: the
#   fastest on one machine);
# - rule solve_study: one job for each other study asked for by name, and for
#   every study with `solve_per_study: true` (the SLURM profile sets it: each
#   study is then its own batch job, and the scheduler spreads them over nodes).
#
# What reruns: a job's params are recorded for all its outputs, so rule solve (which builds several studies)
# has none that lists them; each study's set of runs is recorded by a marker output instead
# (hbvm_workflow.layout.runs_marker, named by the digest of its runs): a changed study has a marker that
# does not exist yet, and choosing other studies with `select:` reruns nothing that is up to date.
#
# - rule solve_summary: one job for each study with `save: summary` (one sharded store, its runs in shards of one
#   Dask task each), in the default target or not: it solves the study and aggregates it in the same process right
#   after the shards (hbvm_workflow.summary_job), so its errors.zarr, errors.csv and timings.csv are this job's
#   outputs, not rule aggregate's; its params (the runs' digest, the keys that define the numbers) rerun it, and a
#   rerun reuses every complete shard (no Dask cluster when none is left to compute).
#
# Paths: hbvm_workflow.layout; the functions (solve_outputs, studies_of, study_runs): rules/common.smk.
from hbvm_workflow.cluster import rule_resources  # config resources.<rule>

DEFAULT_STUDIES = default_studies()
SOLVED_TOGETHER = solved_together()
SUMMARY_STUDIES = summary_studies()


if SOLVED_TOGETHER:

    rule solve:
        output:
            **solve_outputs(SOLVED_TOGETHER),
        params:
            studies=studies_of,
        threads: solve_threads(SOLVED_TOGETHER)
        resources:
            **rule_resources(config, "solve", mem_mb=2000, runtime=60),
        log:
            [layout.log_path(name, "solve") for name in SOLVED_TOGETHER],
        conda:
            HBVM_ENV
        script:
            "../scripts/solve.py"


rule solve_study:
    output:
        manifest=layout.manifest_path(RESULTS, "{study}"),
    wildcard_constraints:
        study=study_regex([n for n in STUDIES if n not in SOLVED_TOGETHER and n not in SUMMARY_STUDIES]),
    params:
        studies=studies_of,
        runs=study_runs,
    threads: study_solve_threads
    resources:
        **rule_resources(config, "solve", mem_mb=2000, runtime=60),
    log:
        layout.log_path("{study}", "solve"),
    conda:
        HBVM_ENV
    script:
        "../scripts/solve.py"


rule solve_summary:
    output:
        manifest=layout.manifest_path(RESULTS, "{study}"),
        zarr=directory(layout.errors_zarr(RESULTS, "{study}")),
        csv=shown(layout.errors_csv(RESULTS, "{study}"), "../report/errors.rst", layout.ERRORS_CSV),
        timings=layout.timings_csv(RESULTS, "{study}"),
    wildcard_constraints:
        study=study_regex(SUMMARY_STUDIES),
    params:
        studies=studies_of,
        runs=study_runs,
        numbers=number_params,
    threads: study_solve_threads
    resources:
        **rule_resources(config, "solve", mem_mb=2000, runtime=60),
    log:
        solve=layout.log_path("{study}", "solve"),
        aggregate=layout.log_path("{study}", "aggregate"),
    conda:
        HBVM_ENV
    script:
        "../scripts/solve.py"
