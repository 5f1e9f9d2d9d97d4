# hbvm convergence-study workflow: `snakemake --cores N` builds every study of
# config/config.yaml into results/<study>/ (README.md). Rules: workflow/rules/.
from snakemake.utils import min_version

min_version("9.0")

# The shipped config, unless the command line gave one with studies (--configfile).
if "studies" not in config:

    configfile: os.path.join(workflow.basedir, "config", "config.yaml")


include: "workflow/rules/common.smk"
# After the config checks (a bad config writes nothing), before Snakemake takes its lock.
include: "workflow/rules/recover.smk"
# Hook for further study kinds (work_precision, long_time); before the solve and aggregate
# rules, which build the default target's studies (with these kinds' targets registered) together.
if os.path.exists(os.path.join(workflow.basedir, "workflow", "rules", "beyond.smk")):

    include: "workflow/rules/beyond.smk"


include: "workflow/rules/sweep.smk"


include: "workflow/rules/solve.smk"
include: "workflow/rules/aggregate.smk"


report: "workflow/report/workflow.rst"


rule all:
    default_target: True
    input:
        all_targets(),
