#!/usr/bin/env bash
# Stop the single-node SLURM cluster started by .ci/slurm_up.sh:
# slurmd, slurmctld, munged -- by the PIDs in /run/hbvm-slurm/*.pid.
# Idempotent: daemons that are not running are skipped.
set -uo pipefail

RUN_DIR=/run/hbvm-slurm
WAIT_S=${HBVM_SLURM_STOP_WAIT_S:-30}
rc=0

stop_pid_file() {
    local name=$1 f="$RUN_DIR/$1.pid" pid i
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
    for i in $(seq 1 $(( WAIT_S * 5 ))); do
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

stop_pid_file slurmd
stop_pid_file slurmctld
stop_pid_file munged
rm -f /run/munge/munged.pid
exit $rc
