# The solve step. It fans the (problem, k, s, h) runs of studies out on one Dask
# cluster and writes each run as its own Zarr store under results/<study>/runs/.
# Runs whose store is complete (same parameter hash) are reused, so adding one h
# to a study computes exactly one new run and an unchanged rerun computes
# nothing. Each study's manifest results/<study>/solve.json lists its runs.
#
# - rule solve: one job for all the studies of the default target (the published
#   study: seven studies, 103 runs, one Python start-up and one cluster);
# - rule solve_study: one job for each other study asked for by name.
#
# What reruns: a job's params are recorded for all its outputs, so rule solve (which builds several studies)
# has none that lists them; each study's set of runs is recorded by a marker output instead
# (hbvm_workflow.layout.runs_marker, named by the digest of its runs): a changed study has a marker that
# does not exist yet, and choosing other studies with `select:` reruns nothing that is up to date.
from hbvm_workflow.cluster import rule_resources  # config resources.<rule>

DEFAULT_STUDIES = default_studies()


def solve_outputs(names):
    """Per study its manifest and the marker of its set of runs (hbvm_workflow.layout.runs_marker). (A study
    built by solve_study and later by solve reruns nothing; one built by solve and later by solve_study is
    solved once more, every run reused.)"""
    from hbvm_workflow.layout import runs_marker

    return {
        "manifest": [f"{RESULTS}/{name}/solve.json" for name in names],
        "runs": [runs_marker(RESULTS, name, STUDIES[name].runs_digest()) for name in names],
    }


def studies_of(wildcards, output):
    """The studies of a solve job, from its outputs (a param derived from the outputs: Snakemake does not
    compare it with the last run's, as it does a plain param)."""
    paths = [output.manifest] if isinstance(output.manifest, str) else list(output.manifest)
    return [os.path.basename(os.path.dirname(path)) for path in paths]


def study_runs(wildcards):
    """The digest of one study's runs: a change reruns solve_study (a param of a job of one study, which no
    other study's choice changes)."""
    return STUDIES[wildcards.study].runs_digest()


if DEFAULT_STUDIES:

    rule solve:
        output:
            **solve_outputs(DEFAULT_STUDIES),
        params:
            studies=studies_of,
        threads: solve_threads(DEFAULT_STUDIES)
        resources:
            **rule_resources(config, "solve", mem_mb=2000, runtime=60),
        log:
            [f"logs/{name}/solve.log" for name in DEFAULT_STUDIES],
        script:
            "../scripts/solve.py"


rule solve_study:
    output:
        manifest=f"{RESULTS}/{{study}}/solve.json",
    wildcard_constraints:
        study=study_regex([n for n in STUDIES if n not in DEFAULT_STUDIES]),
    params:
        studies=studies_of,
        runs=study_runs,
    threads: study_solve_threads
    resources:
        **rule_resources(config, "solve", mem_mb=2000, runtime=60),
    log:
        "logs/{study}/solve.log",
    script:
        "../scripts/solve.py"
