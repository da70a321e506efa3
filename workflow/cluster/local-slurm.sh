#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for testing the pipeline's Slurm path for real
# (docs/pipeline.md, "On a GPU cluster (Slurm)"; CI runs it through .ci/slurm).
#
#   workflow/cluster/local-slurm.sh start    # install (Debian) if missing, configure, start, wait for idle
#   workflow/cluster/local-slurm.sh status
#   workflow/cluster/local-slurm.sh stop     # stop the daemons by their process ids
#   workflow/cluster/local-slurm.sh config   # only write slurm.conf and gres.conf (KARMA_SLURM_CONF)
#
# Needs root (it writes /etc/slurm and starts daemons). The node offers this machine's cores and
# 90% of its memory, and declares COUNTED_GPUS generic GPUs backed by empty placeholder files (Slurm
# counts a GPU per device file), so that the profile's GPU requests (`gpu` resources) are scheduled as
# on a real cluster; jobs then find no CUDA device and run on the emulated one (config: device: auto). No accounting database:
# job status comes from squeue, so finished jobs stay visible for MinJobAge seconds.
set -euo pipefail

STATE=${KARMA_SLURM_STATE:-/var/tmp/karma-slurm}
CONF=${KARMA_SLURM_CONF:-/etc/slurm/slurm.conf}
MARK="# written by karma workflow/cluster/local-slurm.sh"
COUNTED_GPUS=4
PARTITION=local

log() { echo "local-slurm: $*" >&2; }

install_if_missing() {
    if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sbatch >/dev/null \
            && command -v munged >/dev/null; then
        return
    fi
    log "installing Debian's slurmctld, slurmd, slurm-client and munge"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    apt-get install -y -q slurmctld slurmd slurm-client munge >/dev/null
}

write_config() {
    if [[ -f $CONF ]] && ! grep -qF "$MARK" "$CONF"; then
        log "refusing to overwrite $CONF: it was not written by this script (a real cluster?)"
        exit 1
    fi
    local host cpus mem
    host=$(hostname)
    # the machine's processors, as slurmd counts them: GNU nproc honours OMP_NUM_THREADS (usual on
    # clusters), and a node of fewer CPUs than a job asks for keeps the job pending forever
    cpus=$(getconf _NPROCESSORS_ONLN)
    mem=$(awk '/MemTotal/ {printf "%d", $2 / 1024 * 0.9}' /proc/meminfo)
    mkdir -p "$STATE/ctld" "$STATE/d" "$STATE/dev" "$(dirname "$CONF")"
    for ((g = 0; g < COUNTED_GPUS; g++)); do touch "$STATE/dev/gpu$g"; done
    cat >"$CONF" <<CONFIG
$MARK
ClusterName=karma-local
SlurmctldHost=$host
SlurmUser=root
AuthType=auth/munge
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/d
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/slurmctld.log
SlurmdLogFile=$STATE/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=pmi2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MinJobAge=300
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
GresTypes=gpu
NodeName=$host CPUs=$cpus RealMemory=$mem Gres=gpu:$COUNTED_GPUS State=UNKNOWN
PartitionName=$PARTITION Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONFIG
    cat >"$(dirname "$CONF")/gres.conf" <<GRES
$MARK
NodeName=$host Name=gpu File=$STATE/dev/gpu[0-$((COUNTED_GPUS - 1))]
GRES
}

start_munge() {
    if pgrep -x munged >/dev/null; then
        return
    fi
    mkdir -p /run/munge /var/log/munge /var/lib/munge
    chown munge:munge /run/munge /var/log/munge /var/lib/munge /etc/munge /etc/munge/munge.key 2>/dev/null || true
    if [[ ! -s /etc/munge/munge.key ]]; then
        mungekey --create --keyfile=/etc/munge/munge.key 2>/dev/null \
            || dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
        chown munge:munge /etc/munge/munge.key
        chmod 400 /etc/munge/munge.key
    fi
    runuser -u munge -- munged
    for _ in $(seq 1 20); do [[ -S /run/munge/munge.socket.2 ]] && return; sleep 0.25; done
    log "munged did not start"
    exit 1
}

wait_idle() {
    for _ in $(seq 1 60); do
        state=$(sinfo -h -o %T 2>/dev/null | head -n 1 || true)
        if [[ $state == drain* || $state == inval* ]]; then  # e.g. registered before its GPUs were configured
            scontrol update nodename="$(hostname)" state=resume 2>/dev/null || true
        fi
        if [[ $state == idle* || $state == mixed* ]]; then
            log "node $(hostname) is $state (partition $PARTITION, $(getconf _NPROCESSORS_ONLN) CPUs, $COUNTED_GPUS counted GPUs)"
            return
        fi
        sleep 1
    done
    log "the node did not become idle; see $STATE/slurmctld.log and $STATE/slurmd.log"
    exit 1
}

start() {
    install_if_missing
    write_config
    start_munge
    if ! pgrep -x slurmctld >/dev/null; then
        rm -rf "${STATE:?}/ctld"/*  # a fresh controller state: no drain reasons left from an earlier run
        slurmctld
    fi
    pgrep -x slurmd >/dev/null || slurmd
    wait_idle
}

stop() {
    for daemon in slurmd slurmctld; do
        if [[ -f $STATE/$daemon.pid ]]; then
            pid=$(cat "$STATE/$daemon.pid")
            kill "$pid" 2>/dev/null || true
            for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
            rm -f "$STATE/$daemon.pid"
        fi
    done
    if [[ -f /run/munge/munged.pid ]]; then
        pid=$(cat /run/munge/munged.pid)
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    fi
    log "stopped"
}

case ${1:-} in
    start) start ;;
    stop) stop ;;
    status) sinfo; squeue ;;
    config) write_config ;;
    *) echo "usage: $0 start|stop|status|config" >&2; exit 2 ;;
esac
