#!/usr/bin/env bash
# A one-node SLURM cluster on this machine, for the tests and for a person trying `executor: slurm`.
#
#   scripts/slurm-cluster.sh up       install (Debian slurm-wlm + munge, first time), configure, start
#   scripts/slurm-cluster.sh down     stop the daemons it started, munged included (by pid files, never by name)
#   scripts/slurm-cluster.sh status   sinfo of the running cluster
#   eval "$(scripts/slurm-cluster.sh env)"   point sbatch/squeue/submitit at it in this shell
#
# Idempotent: `up` on a running cluster only checks it. State, logs and config live in
# $SCALERL_SLURM_DIR (default /tmp/scalerl-slurm). Accounting is off; a small `sacct` stand-in built on
# `squeue --states=all` is put first on PATH, because submitit needs sacct to see job states (without it
# a job killed from outside makes job.result() hang). Needs root (apt-get, munge key, daemons).
set -euo pipefail

STATE=${SCALERL_SLURM_DIR:-/tmp/scalerl-slurm}
CONF=$STATE/slurm.conf
HOST=$(hostname -s)

log() { echo "slurm-cluster: $*" >&2; }

install_packages() {
    if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sbatch >/dev/null \
        && command -v munged >/dev/null; then
        return
    fi
    if [ "${SCALERL_NO_INSTALL:-0}" = 1 ]; then
        log "slurm-wlm and munge are not installed (SCALERL_NO_INSTALL=1: not installing them)"
        exit 3
    fi
    log "installing slurm-wlm and munge (Debian packages)"
    # A child process takes the apt lock and closes it before this script starts any daemon: a daemon
    # started with the lock's descriptor open would hold it for as long as it runs (scripts/apt-install.sh).
    sh "$(dirname "$0")/apt-install.sh" slurmctld slurmd slurm-client munge
}

write_config() {
    mkdir -p "$STATE/bin" "$STATE/ctld" "$STATE/slurmd"
    # The node line comes from slurmd -C; RealMemory above what it reports drains the node, so use 95%.
    local cpus memory
    cpus=$(slurmd -C | sed -n 's/.*CPUs=\([0-9]*\).*/\1/p' | head -1)
    memory=$(slurmd -C | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' | head -1)
    memory=$((memory * 95 / 100))
    cat >"$CONF" <<EOF
ClusterName=scalerl
SlurmctldHost=$HOST
AuthType=auth/munge
# Short credential lifetime and scheduler intervals: a requeued job restarts in seconds, not minutes.
AuthInfo=cred_expire=10
SchedulerParameters=sched_interval=5,bf_interval=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# Without DefMemPerCPU a job without --mem takes the whole node and jobs run one at a time.
DefMemPerCPU=$((memory / cpus))
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
# Keep finished jobs visible to squeue (and so to the sacct stand-in) for an hour.
MinJobAge=3600
KillWait=5
SlurmUser=root
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmdSpoolDir=$STATE/slurmd
StateSaveLocation=$STATE/ctld
SlurmctldLogFile=$STATE/slurmctld.log
SlurmdLogFile=$STATE/slurmd.log
NodeName=$HOST CPUs=$cpus RealMemory=$memory State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
EOF
    # sacct stand-in: submitit asks `sacct -o JobID,State,NodeList --parsable2 -j ID[,ID...]`.
    cat >"$STATE/bin/sacct" <<'EOF'
#!/usr/bin/env bash
ids=""
while [ $# -gt 0 ]; do
    case "$1" in
        -j|--jobs) ids="$2"; shift 2 ;;
        -j*) ids="${1#-j}"; shift ;;
        --jobs=*) ids="${1#--jobs=}"; shift ;;
        *) shift ;;
    esac
done
echo "JobID|State|NodeList"
squeue --states=all --noheader --array --format='%i|%T|%N' ${ids:+--jobs="$ids"} 2>/dev/null || true
EOF
    chmod +x "$STATE/bin/sacct"
}

pid_alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

start_munge() {
    if [ -S /run/munge/munge.socket.2 ] && munge -n >/dev/null 2>&1; then
        return
    fi
    mkdir -p /etc/munge /run/munge /var/lib/munge /var/log/munge
    if [ ! -s /etc/munge/munge.key ]; then
        dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
    fi
    chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge
    chmod 0400 /etc/munge/munge.key
    chmod 0755 /run/munge
    runuser -u munge -- /usr/sbin/munged
    # munged writes its pid file itself; a copy here marks it as ours, so `down` stops it (and only it).
    for _ in $(seq 50); do
        if munge -n >/dev/null 2>&1; then
            [ -s /run/munge/munged.pid ] && cp /run/munge/munged.pid "$STATE/munged.pid"
            return
        fi
        sleep 0.1
    done
    log "munged did not start"; exit 1
}

up() {
    install_packages
    if pid_alive "$STATE/slurmctld.pid" && pid_alive "$STATE/slurmd.pid"; then
        log "already running ($CONF)"
    else
        write_config
        start_munge
        export SLURM_CONF=$CONF
        pid_alive "$STATE/slurmctld.pid" || slurmctld
        for _ in $(seq 100); do scontrol ping >/dev/null 2>&1 && break; sleep 0.1; done
        pid_alive "$STATE/slurmd.pid" || slurmd
    fi
    export SLURM_CONF=$CONF
    for _ in $(seq 100); do
        if sinfo --noheader --format=%t 2>/dev/null | grep -qx idle; then
            log "up: node $HOST idle; eval \"\$($0 env)\" to use it"
            return
        fi
        sleep 0.2
    done
    sinfo >&2 || true
    log "the node did not become idle; see $STATE/slurmctld.log and $STATE/slurmd.log"
    exit 1
}

down() {
    for daemon in slurmd slurmctld munged; do
        if pid_alive "$STATE/$daemon.pid"; then
            kill "$(cat "$STATE/$daemon.pid")"
            for _ in $(seq 50); do pid_alive "$STATE/$daemon.pid" || break; sleep 0.1; done
        fi
    done
    log "down"
}

case "${1:-}" in
    up) up ;;
    down) down ;;
    status) SLURM_CONF=$CONF sinfo ;;
    env) echo "export SLURM_CONF=$CONF PATH=$STATE/bin:\$PATH" ;;
    *) echo "usage: $0 up|down|status|env" >&2; exit 2 ;;
esac
