#!/usr/bin/env bash
# A stand-in for sbatch/qsub for Snakemake's generic cluster executor: runs the
# job script that Snakemake passes as the last argument detached on this
# machine and prints a job id. Snakemake then waits for the job's
# finished/failed marker files. Every submission is logged to
# $HBVM_SUBMIT_LOG_DIR (default .snakemake/local_submit)/submitted.txt.
#
#   snakemake --profile workflow/profiles/local-submit
set -euo pipefail
jobscript="${!#}"
log_dir="${HBVM_SUBMIT_LOG_DIR:-.snakemake/local_submit}"
mkdir -p "$log_dir"
id="local-$(date +%s%N)-$$"
printf '%s %s\n' "$id" "$jobscript" >>"$log_dir/submitted.txt"
nohup bash "$jobscript" >"$log_dir/$id.out" 2>&1 </dev/null &
echo "$id"
