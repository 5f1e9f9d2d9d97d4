#!/usr/bin/env bash
# Tear down the lab of .ci/lab_up.sh (.ci/lab.md): cancel its jobs, stop every slurmd, slurmctld and
# munged by the pids in their pid files, kill any process still inside a lab namespace (by pid),
# unmount the namespace files, delete the network namespaces and /run/hbvm-lab (its logs are kept
# in /tmp/hbvm-lab-logs). Safe to run when the lab is (partly) down; exit 1 if something survived.
set -uo pipefail

LAB=/run/hbvm-lab
WAIT_S=${HBVM_LAB_STOP_WAIT_S:-20}
rc=0
log() { echo "[lab_down] $*"; }

pid_alive() { [ -n "$1" ] && kill -0 "$1" 2>/dev/null; }

# stop PID NAME: SIGTERM, wait, SIGKILL
stop() {
    local pid=$1 name=$2
    pid_alive "$pid" || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 $((WAIT_S * 10))); do pid_alive "$pid" || return 0; sleep 0.1; done
    log "$name (pid $pid) ignored SIGTERM for $WAIT_S s: SIGKILL" >&2
    kill -KILL "$pid" 2>/dev/null || true
    sleep 0.2
    pid_alive "$pid" && { log "ERROR: $name (pid $pid) still alive" >&2; rc=1; }
    return 0
}

in_head() { nsenter --net=/run/netns/hbvm-lab-head --uts="$LAB/ns/head" --mount="$LAB/ns/mnt" -- "$@"; }

if [ -s "$LAB/slurmctld.pid" ] && pid_alive "$(cat "$LAB/slurmctld.pid")"; then
    jobs=$(timeout 10 in_head squeue -h -t PENDING,RUNNING,SUSPENDED,COMPLETING,CONFIGURING -o %i 2>/dev/null | tr '\n' ' ')
    if [ -n "${jobs// /}" ]; then
        log "cancelling jobs: $jobs"
        # shellcheck disable=SC2086  # a list of job ids
        timeout 10 in_head scancel $jobs || true
        for _ in $(seq 1 $((WAIT_S * 2))); do
            left=$(timeout 10 in_head squeue -h -t PENDING,RUNNING,SUSPENDED,COMPLETING,CONFIGURING -o %i 2>/dev/null)
            [ -z "$left" ] && break
            sleep 0.5
        done
    fi
fi

for f in "$LAB"/slurmd-*.pid "$LAB/slurmctld.pid" "$LAB/munged.pid"; do
    [ -s "$f" ] || continue
    name=$(basename "$f" .pid)
    pid=$(cat "$f")
    if pid_alive "$pid"; then
        log "stopping $name (pid $pid)"
        stop "$pid" "$name"
    fi
    rm -f "$f"
done
rm -f /run/munge/munged.pid

# anything else still in a lab host's network namespace (job steps, test servers left behind): by pid
for ns in /run/netns/hbvm-lab-*; do
    [ -e "$ns" ] || continue
    for pid in $(ip netns pids "$(basename "$ns")" 2>/dev/null); do
        log "killing pid $pid left in $(basename "$ns"): $(tr '\0' ' ' </proc/"$pid"/cmdline 2>/dev/null | cut -c1-80)"
        stop "$pid" "pid $pid"
    done
done

# the namespace files (the mount namespace, then the UTS ones), their private mount, the network namespaces
for f in "$LAB/ns/mnt" "$LAB"/ns/*; do
    mountpoint -q "$f" 2>/dev/null && { umount "$f" || rc=1; }
done
mountpoint -q "$LAB/ns" 2>/dev/null && { umount "$LAB/ns" || rc=1; }
for ns in /run/netns/hbvm-lab-*; do
    [ -e "$ns" ] && { ip netns delete "$(basename "$ns")" || rc=1; }
done

if [ -d "$LAB" ]; then
    # keep the logs of a failed run for a look; the rest goes
    [ -d "$LAB/log" ] && { rm -rf /tmp/hbvm-lab-logs; cp -r "$LAB/log" /tmp/hbvm-lab-logs; }
    rm -rf "$LAB"
fi
log "lab down"
exit $rc
