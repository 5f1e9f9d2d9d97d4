# The solve step: one Snakemake job per study. It fans the study's (problem, k,
# s, h) runs out on one Dask cluster and writes each run as its own Zarr store
# under results/<study>/runs/. Runs whose store is complete (same parameter
# hash) are reused, so adding one h to a study computes exactly one new run and
# an unchanged rerun computes nothing. The manifest solve.json lists every run.
from hbvm_core.cluster import rule_resources  # config resources.<rule> (issue 7)


rule solve:
    output:
        manifest=f"{RESULTS}/{{study}}/solve.json",
    params:
        # (id, hash) of every run: a changed study (new h, method, interval) reruns this step
        jobs=lambda wc: STUDIES[wc.study].job_hashes(),
    threads: solve_threads
    resources:
        **rule_resources(config, "solve", mem_mb=2000, runtime=60),
    log:
        "logs/{study}/solve.log",
    script:
        "../scripts/solve.py"
