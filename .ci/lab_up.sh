#!/usr/bin/env bash
# Bring up the multi-host lab (.ci/lab.md): a head host and HBVM_LAB_NODES compute hosts, each a
# Linux network namespace with a UTS namespace of its own (its own hostname), on a private bridge
# that lives in a namespace of its own (no route to or from the root namespace, no default route
# anywhere: traffic cannot leave the lab); one munged (root namespace: its socket is a path every
# host sees), slurmctld on the head, one slurmd per compute host. Must run as root.
#
# Everything lives in /run/hbvm-lab (lab.env: what the tests read; log/: the daemons' logs). The lab's
# slurm.conf is mounted on /etc/slurm (a fixed path) in a mount namespace that only the lab's processes
# enter: the root namespace keeps no SLURM config. Not idempotent: run .ci/lab_down.sh first; on any
# failure it tears down what it started.
#
# Knobs: HBVM_LAB_NODES (2), HBVM_LAB_CPUS (CPUs each compute host declares, 4),
#        HBVM_LAB_MEM_MB (RealMemory of each compute host, default 30% of MemAvailable),
#        HBVM_LAB_WAIT_S (60), HBVM_LAB_NO_SMOKE=1 (skip the srun smoke test).
set -euo pipefail
cd "$(dirname "$0")/.."

LAB=/run/hbvm-lab
CONF=/etc/slurm/slurm.conf  # as the lab processes see it
NET=10.213.0                      # the lab's subnet, inside its namespaces only
NODES=${HBVM_LAB_NODES:-2}
CPUS=${HBVM_LAB_CPUS:-4}
WAIT_S=${HBVM_LAB_WAIT_S:-60}
HOSTS=(head $(seq -f 'node%g' 1 "$NODES"))

T0=$(date +%s.%N)
log() { printf "[lab_up +%5.2fs] %s\n" "$(awk -v t0="$T0" -v t1="$(date +%s.%N)" 'BEGIN{print t1-t0}')" "$*"; }
dump_logs() {
    for f in "$LAB"/log/*.log; do
        [ -f "$f" ] && { echo "=== $f ===" >&2; tail -n 30 "$f" >&2; }
    done
}
fail() {
    echo "[lab_up] ERROR: $*" >&2
    dump_logs
    exit 1
}

[ "$(id -u)" -eq 0 ] || fail "must run as root"
[ ! -e "$LAB" ] || fail "$LAB exists: the lab is up (or was not torn down); run .ci/lab_down.sh first"
for h in "${HOSTS[@]}" net; do
    [ ! -e "/run/netns/hbvm-lab-$h" ] || fail "namespace hbvm-lab-$h exists; run .ci/lab_down.sh first"
done

# from here on a failure tears down what was started (not before: a lab already up stays up)
trap 'rc=$?; if [ $rc -ne 0 ]; then echo "[lab_up] failed: tearing down" >&2; bash .ci/lab_down.sh >&2 || true; fi' EXIT

# ---------------------------------------------------------------- packages (Debian's)
if ! command -v slurmctld >/dev/null 2>&1 || ! command -v munged >/dev/null 2>&1; then
    log "installing slurm-wlm and munge via apt-get"
    export DEBIAN_FRONTEND=noninteractive
    policy=/usr/sbin/policy-rc.d had_policy=0
    [ -e "$policy" ] && had_policy=1
    # the packages' scripts would start the services: no init system here, the lab starts them
    [ $had_policy -eq 1 ] || { printf '#!/bin/sh\nexit 101\n' >"$policy"; chmod +x "$policy"; }
    ok=1
    timeout 300 apt-get update -qq && timeout 900 apt-get install -y -qq --no-install-recommends \
        slurm-wlm munge >/tmp/hbvm-lab-apt.log 2>&1 || ok=0
    [ $had_policy -eq 1 ] || rm -f "$policy"
    [ $ok -eq 1 ] || { tail -n 30 /tmp/hbvm-lab-apt.log >&2; fail "apt-get install failed"; }
    log "packages installed"
fi

install -d -m 0755 "$LAB" "$LAB/log" "$LAB/spool" "$LAB/etc-slurm" /etc/slurm
log "hosts: ${HOSTS[*]} on $NET.0/24"

# ---------------------------------------------------------------- namespaces
# $LAB/ns: a private mount that holds the namespace files (bind mounts) of the UTS namespaces and of
# the lab's one mount namespace, in which the lab's config is mounted on /etc/slurm. Only lab
# processes see /etc/slurm/slurm.conf: in the root namespace a SLURM client has no config and stops
# at once (the root namespace routes 10.213.0.0/24 to its default gateway: a client there must never
# try the lab's addresses).
install -d -m 0755 "$LAB/ns"
mount --bind "$LAB/ns" "$LAB/ns"
mount --make-private "$LAB/ns"
cp -a /etc/slurm/. "$LAB/etc-slurm/"  # plugstack.conf and the like, as packaged
touch "$LAB/ns/mnt"
unshare --mount="$LAB/ns/mnt" --propagation private mount --bind "$LAB/etc-slurm" /etc/slurm

# in_host SECONDS HOST CMD...: run CMD on HOST (its network and UTS namespaces, the lab's mount
# namespace, this working directory) under a timeout; nsenter execs CMD: the pid is CMD's
in_host() {
    local t=$1 h=$2
    shift 2
    timeout "$t" nsenter --net="/run/netns/hbvm-lab-$h" --uts="$LAB/ns/$h" --mount="$LAB/ns/mnt" --wd="$PWD" -- "$@"
}

ip netns add hbvm-lab-net
ip -n hbvm-lab-net link add br0 type bridge
ip -n hbvm-lab-net link set br0 up
i=0
for h in "${HOSTS[@]}"; do
    i=$((i + 1))
    ip netns add "hbvm-lab-$h"
    touch "$LAB/ns/$h"
    unshare --uts="$LAB/ns/$h" hostname "$h"  # a UTS namespace kept by its bind mount on $LAB/ns/$h
    ip -n "hbvm-lab-$h" link set lo up
    # every host's lab interface is called lab0 (dask: {interface: lab0} works on every host)
    ip link add lab0 netns "hbvm-lab-$h" type veth peer name "$h" netns hbvm-lab-net
    ip -n "hbvm-lab-$h" addr add "$NET.$i/24" dev lab0
    ip -n "hbvm-lab-$h" link set lab0 up
    ip -n hbvm-lab-net link set "$h" master br0 up
    echo "$h $NET.$i" >>"$LAB/hosts"
done
log "namespaces up"

# ---------------------------------------------------------------- munge (one daemon, its socket a path)
getent passwd munge >/dev/null || fail "user munge missing (munge package broken?)"
install -d -o munge -g munge -m 0700 /etc/munge /var/lib/munge /var/log/munge
install -d -o munge -g munge -m 0755 /run/munge
[ -s /etc/munge/munge.key ] || mungekey --create --keyfile=/etc/munge/munge.key --force
chown munge:munge /etc/munge/munge.key
chmod 0400 /etc/munge/munge.key
rm -f /run/munge/munged.pid
timeout 30 runuser -u munge -- /usr/sbin/munged --force --pid-file=/run/munge/munged.pid ||
    fail "munged failed to start (another munged running?)"
for _ in $(seq 1 50); do [ -s /run/munge/munged.pid ] && break; sleep 0.1; done
cp /run/munge/munged.pid "$LAB/munged.pid" || fail "munged wrote no pid file"
timeout 10 munge -n </dev/null | timeout 10 unmunge >/dev/null || fail "munge credential round-trip failed"

# ---------------------------------------------------------------- slurm.conf
if [ -n "${HBVM_LAB_MEM_MB:-}" ]; then
    MEM=$HBVM_LAB_MEM_MB
else
    MEM=$(( $(awk '/^MemAvailable:/ {print $2}' /proc/meminfo) * 3 / 10240 ))
fi
[ "$MEM" -gt 1000 ] || fail "too little memory for the lab's nodes ($MEM MB each)"
nodes=$(IFS=,; echo "${HOSTS[*]:1}")
{
    cat <<EOF
# Written by .ci/lab_up.sh -- the multi-host lab (.ci/lab.md); .ci/lab_down.sh removes it.
ClusterName=hbvmlab
SlurmctldHost=head($NET.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
MailProg=/bin/true
SwitchType=switch/none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobContainerType=job_container/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
ReturnToService=2
SlurmctldPort=6817
SlurmdPort=6818
SlurmctldPidFile=$LAB/slurmctld.pid
StateSaveLocation=$LAB/spool/slurmctld
SlurmctldLogFile=$LAB/log/slurmctld.log
# several slurmd on one file system: one pid file, spool folder and log per node (%n)
SlurmdPidFile=$LAB/slurmd-%n.pid
SlurmdSpoolDir=$LAB/spool/slurmd-%n
SlurmdLogFile=$LAB/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
SlurmdParameters=config_overrides
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=256
SchedulerParameters=sched_interval=2
MinJobAge=300
KillWait=5
InactiveLimit=0
Waittime=0
SlurmctldTimeout=30
SlurmdTimeout=60
EOF
    i=1
    for h in "${HOSTS[@]:1}"; do
        i=$((i + 1))
        echo "NodeName=$h NodeAddr=$NET.$i NodeHostname=$h CPUs=$CPUS Sockets=1 CoresPerSocket=$CPUS ThreadsPerCore=1 RealMemory=$MEM State=UNKNOWN"
    done
    # LLN: each job goes to the least loaded node (else SLURM packs small jobs onto the first one)
    echo "PartitionName=lab Nodes=$nodes Default=YES LLN=YES MaxTime=INFINITE State=UP OverSubscribe=NO"
} >"$LAB/etc-slurm/slurm.conf"  # /etc/slurm/slurm.conf inside the lab

# ---------------------------------------------------------------- daemons (slurmctld with the head's hostname)
in_host 60 head /usr/sbin/slurmctld -f "$CONF" || fail "slurmctld failed to start"
for h in "${HOSTS[@]:1}"; do
    in_host 60 "$h" /usr/sbin/slurmd -f "$CONF" -N "$h" || fail "slurmd on $h failed to start"
done
pid_alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
for f in slurmctld $(printf 'slurmd-%s ' "${HOSTS[@]:1}"); do
    for _ in $(seq 1 100); do pid_alive "$LAB/$f.pid" && break; sleep 0.1; done
    pid_alive "$LAB/$f.pid" || fail "$f is not running"
done
log "daemons started"

deadline=$(( $(date +%s) + WAIT_S ))
while :; do
    states=$(in_host 10 head sinfo -h -N -o '%N %T' 2>/dev/null || true)
    up=$(awk '$2 ~ /^(idle|mixed|allocated)/' <<<"$states" | wc -l)
    [ "$up" -eq "$NODES" ] && break
    [ "$(date +%s)" -lt "$deadline" ] || fail "nodes not ready after $WAIT_S s: ${states:-no sinfo}"
    sleep 0.2
done
log "nodes ready: $(tr '\n' ' ' <<<"$states")"

if [ "${HBVM_LAB_NO_SMOKE:-0}" != 1 ]; then
    out=$(in_host 60 head srun -N "$NODES" -n "$NODES" --mem=50 -t 1 -J hbvm-lab-smoke hostname 2>&1) ||
        fail "smoke srun failed: $out"
    [ "$(sort <<<"$out" | tr '\n' ' ')" = "$(printf '%s ' "${HOSTS[@]:1}")" ] ||
        fail "smoke srun printed '$out', expected ${HOSTS[*]:1}"
    log "smoke test ok: srun -N $NODES hostname -> $(tr '\n' ' ' <<<"$out")"
fi

# what the tests read (tests/cluster/lab.py)
{
    echo "HBVM_LAB_DIR=$LAB"
    echo "HBVM_LAB_HOSTS='${HOSTS[*]}'"
    echo "HBVM_LAB_NET=$NET"
    echo "HBVM_LAB_MOUNT_NS=$LAB/ns/mnt"
} >"$LAB/lab.env"
log "lab up: ${HOSTS[*]}"
