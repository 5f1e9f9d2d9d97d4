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
from hbvm_workflow.cluster import rule_resources  # config resources.<rule>

DEFAULT_STUDIES = default_studies()
SOLVED_TOGETHER = solved_together()


def solve_jobs(names):
    """{study: [[id, hash], ...]}: a Snakemake param, so a changed study reruns the solve step."""
    return {name: STUDIES[name].job_hashes() for name in names}


if SOLVED_TOGETHER:

    rule solve:
        output:
            manifest=[f"{RESULTS}/{name}/solve.json" for name in SOLVED_TOGETHER],
        params:
            studies=SOLVED_TOGETHER,
            jobs=solve_jobs(SOLVED_TOGETHER),
        threads: solve_threads(SOLVED_TOGETHER)
        resources:
            **rule_resources(config, "solve", mem_mb=2000, runtime=60),
        log:
            [f"logs/{name}/solve.log" for name in SOLVED_TOGETHER],
        script:
            "../scripts/solve.py"


rule solve_study:
    output:
        manifest=f"{RESULTS}/{{study}}/solve.json",
    wildcard_constraints:
        study=study_regex([n for n in STUDIES if n not in SOLVED_TOGETHER]),
    params:
        studies=lambda wc: [wc.study],
        jobs=lambda wc: solve_jobs([wc.study]),
    threads: study_solve_threads
    resources:
        **rule_resources(config, "solve", mem_mb=2000, runtime=60),
    log:
        "logs/{study}/solve.log",
    script:
        "../scripts/solve.py"
