#!/usr/bin/env bash
# Start a single-node SLURM cluster (munged + slurmctld + slurmd) on this host,
# for CI and tests. Idempotent: safe to run again while the cluster is up.
#
# Everything talks over 127.0.0.1. No systemd, no cgroups, no slurmdbd.
# Must run as root (it installs packages and writes /etc/slurm/slurm.conf).
#
# Environment knobs (all optional):
#   HBVM_SLURM_CPUS        CPUs declared for the node (default: max(nproc, 8);
#                          more than the real core count lets a handful of
#                          1-CPU test jobs run concurrently on a 2-core box)
#   HBVM_SLURM_MEM_MB      RealMemory of the node (default: 90% of MemAvailable)
#   HBVM_SLURM_WAIT_S      how long to wait for the node to become idle (60)
#   HBVM_SLURM_NO_SMOKE=1  skip the srun/sbatch smoke test
set -euo pipefail

RUN_DIR=/run/hbvm-slurm
LOG_DIR=/var/log/slurm
CONF=/etc/slurm/slurm.conf
WAIT_S=${HBVM_SLURM_WAIT_S:-60}

T0=$(date +%s.%N)
log() { printf "[slurm_up +%5.1fs] %s\n" "$(awk -v t0="$T0" -v t1="$(date +%s.%N)" "BEGIN{print t1-t0}")" "$*"; }

dump_logs() {
    echo "----- tail of slurm/munge logs -----" >&2
    for f in "$LOG_DIR"/slurmctld.log "$LOG_DIR"/slurmd.log /var/log/munge/munged.log; do
        if [ -f "$f" ]; then
            echo "=== $f ===" >&2
            tail -n 40 "$f" >&2 || true
        fi
    done
    echo "=== sinfo ===" >&2
    timeout 10 sinfo -N -l >&2 2>&1 || true
}

die() {
    echo "[slurm_up] ERROR: $*" >&2
    dump_logs
    exit 1
}

# pid_alive PIDFILE -> 0 if the pid in PIDFILE is a live process
pid_alive() {
    local f=$1 pid
    [ -s "$f" ] || return 1
    pid=$(cat "$f" 2>/dev/null) || return 1
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null
}

[ "$(id -u)" -eq 0 ] || die "must run as root"

# ---------------------------------------------------------------- packages
if ! command -v slurmctld >/dev/null 2>&1 || ! command -v munged >/dev/null 2>&1; then
    log "installing slurm-wlm and munge via apt-get"
    t0=$(date +%s)
    export DEBIAN_FRONTEND=noninteractive
    # The packages' maintainer scripts try to start services; there is no
    # init system here, so forbid that (we start the daemons ourselves).
    policy=/usr/sbin/policy-rc.d
    had_policy=0
    [ -e "$policy" ] && had_policy=1
    if [ $had_policy -eq 0 ]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy"
        chmod +x "$policy"
    fi
    timeout 300 apt-get update -qq || die "apt-get update failed"
    timeout 900 apt-get install -y -qq --no-install-recommends \
        slurm-wlm munge >/tmp/hbvm-slurm-apt.log 2>&1 ||
        { tail -n 30 /tmp/hbvm-slurm-apt.log >&2; [ $had_policy -eq 0 ] && rm -f "$policy"; die "apt-get install failed"; }
    [ $had_policy -eq 0 ] && rm -f "$policy"
    log "packages installed in $(( $(date +%s) - t0 )) s"
fi
command -v slurmctld >/dev/null 2>&1 || die "slurmctld still missing after install"

# ---------------------------------------------------------------- directories
install -d -m 0755 "$RUN_DIR" "$LOG_DIR" /etc/slurm \
    /var/spool/slurmctld /var/spool/slurmd
getent passwd munge >/dev/null || die "user munge missing (munge package broken?)"
install -d -o munge -g munge -m 0700 /etc/munge /var/lib/munge /var/log/munge
install -d -o munge -g munge -m 0755 /run/munge

# ---------------------------------------------------------------- munge
if [ ! -s /etc/munge/munge.key ]; then
    log "creating munge key"
    if command -v mungekey >/dev/null 2>&1; then
        mungekey --create --keyfile=/etc/munge/munge.key --force
    else
        dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
    fi
fi
chown munge:munge /etc/munge/munge.key
chmod 0400 /etc/munge/munge.key

if pid_alive "$RUN_DIR/munged.pid" && timeout 10 munge -n </dev/null | timeout 10 unmunge >/dev/null 2>&1; then
    log "munged already running (pid $(cat "$RUN_DIR/munged.pid"))"
else
    rm -f "$RUN_DIR/munged.pid" /run/munge/munged.pid
    log "starting munged"
    # munged daemonizes itself and writes its pid file; run as the munge user.
    timeout 30 runuser -u munge -- /usr/sbin/munged --force \
        --pid-file=/run/munge/munged.pid ||
        die "munged failed to start"
    for _ in $(seq 1 50); do [ -s /run/munge/munged.pid ] && break; sleep 0.1; done
    cp /run/munge/munged.pid "$RUN_DIR/munged.pid" || die "munged wrote no pid file"
    timeout 10 munge -n </dev/null | timeout 10 unmunge >/dev/null ||
        die "munge credential round-trip failed"
fi

# ---------------------------------------------------------------- slurm.conf
HOST=$(hostname -s)
NPROC=$(nproc)
CPUS=${HBVM_SLURM_CPUS:-$(( NPROC > 8 ? NPROC : 8 ))}
if [ -n "${HBVM_SLURM_MEM_MB:-}" ]; then
    MEM=$HBVM_SLURM_MEM_MB
else
    avail_kb=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)
    MEM=$(( avail_kb * 9 / 10240 ))
fi
[ "$MEM" -gt 500 ] || die "too little memory for a slurm node ($MEM MB)"

new_conf=$(mktemp)
cat >"$new_conf" <<EOF
# Written by .ci/slurm_up.sh -- single-node test cluster on 127.0.0.1.
ClusterName=hbvm
SlurmctldHost=${HOST}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
MailProg=/bin/true
SwitchType=switch/none
# container without systemd/cgroups
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobContainerType=job_container/none
# no slurmdbd: no accounting (sacct does not work; use squeue)
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
ReturnToService=2
SlurmctldPort=6817
SlurmdPort=6818
SlurmctldPidFile=${RUN_DIR}/slurmctld.pid
SlurmdPidFile=${RUN_DIR}/slurmd.pid
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldLogFile=${LOG_DIR}/slurmctld.log
SlurmdLogFile=${LOG_DIR}/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# the node declares more CPUs than the box has: trust the config
SlurmdParameters=config_overrides
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=256
SchedulerParameters=sched_interval=2
# keep finished jobs visible to squeue for a while (status via squeue)
MinJobAge=300
KillWait=5
InactiveLimit=0
Waittime=0
SlurmctldTimeout=30
SlurmdTimeout=60
NodeName=${HOST} NodeAddr=127.0.0.1 NodeHostname=${HOST} CPUs=${CPUS} Sockets=1 CoresPerSocket=${CPUS} ThreadsPerCore=1 RealMemory=${MEM} State=UNKNOWN
PartitionName=debug Nodes=${HOST} Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF

conf_changed=1
if [ -f "$CONF" ] && cmp -s "$new_conf" "$CONF"; then
    conf_changed=0
fi

running=0
if pid_alive "$RUN_DIR/slurmctld.pid" && pid_alive "$RUN_DIR/slurmd.pid"; then
    running=1
fi

if [ $conf_changed -eq 1 ]; then
    # RealMemory tracks MemAvailable; only rewrite a running cluster's config
    # when something other than RealMemory changed.
    if [ $running -eq 1 ] && [ -f "$CONF" ] &&
        cmp -s <(grep -v '^NodeName=' "$new_conf") <(grep -v '^NodeName=' "$CONF") &&
        [ "$(grep '^NodeName=' "$new_conf" | sed 's/RealMemory=[0-9]*//')" = \
          "$(grep '^NodeName=' "$CONF" | sed 's/RealMemory=[0-9]*//')" ]; then
        conf_changed=0
    else
        install -m 0644 "$new_conf" "$CONF"
        log "wrote $CONF (node ${HOST}: CPUs=${CPUS} RealMemory=${MEM})"
    fi
fi
rm -f "$new_conf"

if [ $running -eq 1 ] && [ $conf_changed -eq 1 ]; then
    log "config changed: restarting slurm daemons"
    for d in slurmd slurmctld; do
        if pid_alive "$RUN_DIR/$d.pid"; then
            pid=$(cat "$RUN_DIR/$d.pid")
            kill -TERM "$pid" 2>/dev/null || true
            for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
            kill -KILL "$pid" 2>/dev/null || true
        fi
        rm -f "$RUN_DIR/$d.pid"
    done
    running=0
fi

# ---------------------------------------------------------------- daemons
if pid_alive "$RUN_DIR/slurmctld.pid"; then
    log "slurmctld already running (pid $(cat "$RUN_DIR/slurmctld.pid"))"
else
    rm -f "$RUN_DIR/slurmctld.pid"
    log "starting slurmctld"
    timeout 60 /usr/sbin/slurmctld -f "$CONF" || die "slurmctld failed to start"
fi
for _ in $(seq 1 100); do pid_alive "$RUN_DIR/slurmctld.pid" && break; sleep 0.1; done
pid_alive "$RUN_DIR/slurmctld.pid" || die "slurmctld is not running"

if pid_alive "$RUN_DIR/slurmd.pid"; then
    log "slurmd already running (pid $(cat "$RUN_DIR/slurmd.pid"))"
else
    rm -f "$RUN_DIR/slurmd.pid"
    log "starting slurmd"
    timeout 60 /usr/sbin/slurmd -f "$CONF" || die "slurmd failed to start"
fi
for _ in $(seq 1 100); do pid_alive "$RUN_DIR/slurmd.pid" && break; sleep 0.1; done
pid_alive "$RUN_DIR/slurmd.pid" || die "slurmd is not running"

# ---------------------------------------------------------------- wait for node
log "waiting (max ${WAIT_S} s) for node ${HOST} to be ready"
deadline=$(( $(date +%s) + WAIT_S ))
state=""
while :; do
    state=$(timeout 10 sinfo -h -n "$HOST" -o %T 2>/dev/null | head -n 1 || true)
    case "$state" in
        idle|mixed|allocated|completing) break ;;
        drain*|down*|inval*|fail*)
            # e.g. left over from an earlier run: put it back into service
            timeout 10 scontrol update NodeName="$HOST" State=RESUME >/dev/null 2>&1 || true ;;
    esac
    [ "$(date +%s)" -lt "$deadline" ] ||
        die "node ${HOST} not ready after ${WAIT_S} s (state: '${state:-none}')"
    sleep 1
done
log "node ${HOST} is ${state}"

# ---------------------------------------------------------------- smoke test
if [ "${HBVM_SLURM_NO_SMOKE:-0}" != 1 ]; then
    out=$(timeout 60 srun -N1 -n1 -c1 --mem=50 -t 1 -J hbvm-smoke hostname 2>&1) ||
        die "smoke srun failed: $out"
    [ "$out" = "$HOST" ] || die "smoke srun printed '$out', expected '$HOST'"
    smoke_out=$(mktemp /tmp/hbvm-slurm-smoke.XXXXXX)
    jid=$(timeout 30 sbatch --parsable -c1 --mem=50 -t 1 -J hbvm-smoke \
        -o "$smoke_out" --wrap 'echo sbatch-ok' 2>&1) || die "smoke sbatch failed: $jid"
    # poll ourselves: 'sbatch --wait' backs off and costs ~10 s
    jstate=""
    for _ in $(seq 1 180); do
        jstate=$(timeout 10 scontrol show job -o "$jid" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
        case "$jstate" in
            COMPLETED) break ;;
            FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE|PREEMPTED)
                die "smoke sbatch job $jid ended $jstate: $(cat "$smoke_out" 2>/dev/null)" ;;
        esac
        sleep 0.5
    done
    [ "$jstate" = COMPLETED ] || die "smoke sbatch job $jid not done after 90 s (state '$jstate')"
    grep -qx sbatch-ok "$smoke_out" || die "smoke sbatch job $jid wrote: $(cat "$smoke_out")"
    rm -f "$smoke_out"
    log "smoke test ok (srun + sbatch job $jid)"
fi
log "cluster up: $(timeout 10 sinfo -h -o '%P %a %D %T %c CPUs %m MB')"
