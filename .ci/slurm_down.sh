#!/usr/bin/env bash
# Stop the single-node SLURM cluster started by .ci/slurm_up.sh:
# slurmd, slurmctld, munged -- by the PIDs in /run/hbvm-slurm/*.pid -- and
# remove the slurm.conf it wrote.
# Idempotent: daemons that are not running are skipped.
# Jobs still queued/running are cancelled first (so no slurmstepd/job
# processes outlive the cluster); set HBVM_SLURM_KEEP_JOBS=1 to skip that.
set -uo pipefail

RUN_DIR=/run/hbvm-slurm
WAIT_S=${HBVM_SLURM_STOP_WAIT_S:-30}
rc=0

stop_pid_file() {
    local name=$1 f="$RUN_DIR/$1.pid" pid
    if [ ! -s "$f" ]; then
        echo "[slurm_down] $name: no pid file"
        return 0
    fi
    pid=$(cat "$f")
    if ! kill -0 "$pid" 2>/dev/null; then
        echo "[slurm_down] $name: pid $pid not running"
        rm -f "$f"
        return 0
    fi
    echo "[slurm_down] stopping $name (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 $(( WAIT_S * 5 ))); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.2
    done
    if kill -0 "$pid" 2>/dev/null; then
        echo "[slurm_down] $name (pid $pid) ignored SIGTERM for ${WAIT_S} s, sending SIGKILL" >&2
        kill -KILL "$pid" 2>/dev/null || true
        sleep 0.5
        if kill -0 "$pid" 2>/dev/null; then
            echo "[slurm_down] ERROR: $name (pid $pid) still alive" >&2
            rc=1
            return 1
        fi
    fi
    rm -f "$f"
}

pid_alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

if [ "${HBVM_SLURM_KEEP_JOBS:-0}" != 1 ] && pid_alive "$RUN_DIR/slurmctld.pid"; then
    jobs=$(timeout 10 squeue -h -t PENDING,RUNNING,SUSPENDED,COMPLETING,CONFIGURING -o %i 2>/dev/null | tr '\n' ' ')
    if [ -n "${jobs// /}" ]; then
        echo "[slurm_down] cancelling jobs: $jobs"
        left=""
        # shellcheck disable=SC2086  # word-split the job id list on purpose
        timeout 10 scancel $jobs || true
        for _ in $(seq 1 $(( WAIT_S * 2 ))); do
            left=$(timeout 10 squeue -h -t PENDING,RUNNING,SUSPENDED,COMPLETING,CONFIGURING -o %i 2>/dev/null)
            [ -z "$left" ] && break
            sleep 0.5
        done
        if [ -n "$left" ]; then
            echo "[slurm_down] warning: jobs still listed: ${left//$'\n'/ }" >&2
        fi
    fi
fi

stop_pid_file slurmd
stop_pid_file slurmctld
stop_pid_file munged
rm -f /run/munge/munged.pid
# Take our slurm.conf away with the daemons: with a config and no controller,
# every `scontrol`/`sbatch` (and so every Snakemake start, whose SLURM executor
# plugin asks `scontrol show config` at import) waits ~9 s for the controller.
CONF=/etc/slurm/slurm.conf
if [ -f "$CONF" ] && head -n 1 "$CONF" | grep -q '^# Written by .ci/slurm_up.sh'; then
    rm -f "$CONF"
    echo "[slurm_down] removed $CONF"
fi
if command -v pgrep >/dev/null 2>&1; then
    stray=$(pgrep -x slurmstepd | tr '\n' ' ')
    [ -n "$stray" ] && echo "[slurm_down] warning: slurmstepd still running: $stray" >&2
fi
exit $rc
