#!/usr/bin/env bash
# A one-node SLURM cluster on this machine, for the tests (tests/test_slurm_cluster.py) and for trying the
# cluster path by hand: slurmctld + slurmd on localhost, munge for authentication, partition `debug`.
#
#   bash slurm/local-cluster.sh up      # install (apt, only if missing), configure, start; wait for the node
#   bash slurm/local-cluster.sh status  # sinfo; exit 0 when the node takes jobs
#   bash slurm/local-cluster.sh down    # stop the daemons (configuration and packages stay)
#
# Runs as root and starts the daemons directly (no systemd here). `up` is idempotent: a running cluster whose
# node is idle is left alone. It exits non-zero, with the daemons' last log lines, when the node does not
# come up within LOCAL_SLURM_WAIT_S seconds (60).
set -euo pipefail
export PATH="$PATH:/usr/sbin:/sbin"  # slurmctld, slurmd, munged live there; a CI shell's PATH may lack it

CONF_DIR=/etc/slurm
CONF=$CONF_DIR/slurm.conf
LOG_DIR=/var/log/slurm
SPOOL=/var/spool
PARTITION=debug
# GPUs the node advertises as a generic resource: lets a GPU-rendered script (--gpus-per-node=N) be
# scheduled here and run its N ranks on the CPU. Slurm wants one character device per GPU; these are
# aliases of /dev/null (no CUDA device behind them). 0 advertises none.
FAKE_GPUS=${LOCAL_SLURM_FAKE_GPUS:-2}
FAKE_GPU_DIR=/var/lib/slurm-local/fake-gpu
WAIT_S=${LOCAL_SLURM_WAIT_S:-60}

die() { echo "local-cluster: $*" >&2; exit 1; }
say() { echo "local-cluster: $*" >&2; }

node_state() {  # the node's state as sinfo prints it (idle, mixed, down*, drained, ...), empty if no answer
  timeout 10 sinfo -h -N -p "$PARTITION" -o %T 2>/dev/null | head -n 1 || true
}

takes_jobs() {
  case "$(node_state)" in
    idle|mixed|allocated|completing) return 0 ;;
    *) return 1 ;;
  esac
}

install_packages() {
  local missing=()
  command -v slurmctld >/dev/null || missing+=(slurmctld)
  command -v slurmd >/dev/null || missing+=(slurmd)
  command -v sbatch >/dev/null || missing+=(slurm-client)
  command -v munged >/dev/null || missing+=(munge)
  [ ${#missing[@]} -eq 0 ] && return 0
  command -v apt-get >/dev/null || die "slurm/munge are missing (${missing[*]}) and there is no apt-get to install them"
  say "installing slurm-wlm munge (missing: ${missing[*]})"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null || die "apt-get update failed"
  apt-get install -y -q slurm-wlm munge >/dev/null || die "apt-get install -y slurm-wlm munge failed"
}

write_config() {
  local host hw gres_line="" node_gres=""
  mkdir -p "$CONF_DIR" "$LOG_DIR" "$SPOOL/slurmctld" "$SPOOL/slurmd"
  host=$(hostname -s)
  # The node's hardware as slurmd itself detects it (CPUs, sockets, cores, threads, RealMemory): a
  # configuration that claims more than slurmd finds leaves the node drained.
  hw=$(slurmd -C | head -n 1 | sed 's/^NodeName=[^ ]* //') || die "slurmd -C could not read the hardware"
  [ -n "$hw" ] || die "slurmd -C printed nothing"
  if [ "$FAKE_GPUS" -gt 0 ]; then
    gres_line="GresTypes=gpu"
    node_gres="Gres=gpu:$FAKE_GPUS"
    mkdir -p "$FAKE_GPU_DIR"
    for i in $(seq 0 $((FAKE_GPUS - 1))); do
      [ -c "$FAKE_GPU_DIR/gpu$i" ] || mknod "$FAKE_GPU_DIR/gpu$i" c 1 3 || die "mknod $FAKE_GPU_DIR/gpu$i failed"
    done
    echo "Name=gpu File=$FAKE_GPU_DIR/gpu[0-$((FAKE_GPUS - 1))]" >"$CONF_DIR/gres.conf"
  else
    rm -f "$CONF_DIR/gres.conf"
  fi
  cat >"$CONF.tmp" <<EOF
# Written by slurm/local-cluster.sh: a one-node test cluster on localhost. Edits are overwritten by 'up'.
ClusterName=local
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
# No cgroups and no systemd in a container: track processes through /proc, bind nothing.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
# A job that names no memory gets 512 MB per CPU, not the whole node (which would serialize all jobs).
DefMemPerCPU=512
SchedulerType=sched/backfill
MpiDefault=none
SwitchType=switch/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
ReturnToService=2
# Seconds between the warning SIGTERM and SIGKILL at a time limit or scancel.
KillWait=10
# Finished jobs stay visible to squeue/scontrol for this long (the tests read their exit codes).
MinJobAge=600
StateSaveLocation=$SPOOL/slurmctld
SlurmdSpoolDir=$SPOOL/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd.log
$gres_line
NodeName=$host NodeAddr=127.0.0.1 $hw $node_gres State=UNKNOWN
PartitionName=$PARTITION Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
  mv "$CONF.tmp" "$CONF"
}

start_munge() {
  if munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; then
    return 0
  fi
  mkdir -p /etc/munge /run/munge /var/lib/munge /var/log/munge
  if [ ! -s /etc/munge/munge.key ]; then
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
  fi
  chown munge:munge /etc/munge /etc/munge/munge.key /run/munge /var/lib/munge /var/log/munge
  chmod 0700 /etc/munge
  chmod 0400 /etc/munge/munge.key
  chmod 0755 /run/munge
  runuser -u munge -- /usr/sbin/munged || die "munged did not start (see /var/log/munge/munged.log)"
  munge -n </dev/null | unmunge >/dev/null || die "munge round trip failed (see /var/log/munge/munged.log)"
}

running() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

up() {
  [ "$(id -u)" -eq 0 ] || die "must run as root (it installs packages and starts slurmctld/slurmd)"
  if command -v sinfo >/dev/null && takes_jobs; then
    say "already up: node $(hostname -s) is $(node_state) in partition $PARTITION"
    return 0
  fi
  install_packages
  write_config
  start_munge
  running /run/slurmctld.pid || slurmctld || die "slurmctld did not start (see $LOG_DIR/slurmctld.log)"
  running /run/slurmd.pid || slurmd || die "slurmd did not start (see $LOG_DIR/slurmd.log)"
  local waited=0 state
  until takes_jobs; do
    state=$(node_state)
    case "$state" in
      down*|drain*|fail*) scontrol update NodeName="$(hostname -s)" State=RESUME >/dev/null 2>&1 || true ;;
    esac
    if [ "$waited" -ge "$WAIT_S" ] && ! takes_jobs; then
      # The daemons' last lines first (less the PMIx plugin noise), the verdict last.
      tail -n 15 "$LOG_DIR/slurmctld.log" "$LOG_DIR/slurmd.log" 2>/dev/null | grep -v -i pmix >&2 || true
      die "node $(hostname -s) is '$(node_state)' after ${WAIT_S}s, not idle (logs: $LOG_DIR)"
    fi
    sleep 1
    waited=$((waited + 1))
  done
  say "up: node $(hostname -s) is $(node_state) in partition $PARTITION ($(sinfo -h -N -o '%c CPUs, %m MB, gres %G' | head -n 1))"
}

down() {
  local pidfile pid
  for pidfile in /run/slurmd.pid /run/slurmctld.pid; do
    if running "$pidfile"; then
      pid=$(cat "$pidfile")
      kill "$pid"
      for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    fi
  done
  if [ -f /run/munge/munged.pid ] && kill -0 "$(cat /run/munge/munged.pid)" 2>/dev/null; then
    kill "$(cat /run/munge/munged.pid)"
  fi
  say "down"
}

status() {
  command -v sinfo >/dev/null || die "slurm is not installed (run: bash slurm/local-cluster.sh up)"
  timeout 10 sinfo || die "slurmctld does not answer (run: bash slurm/local-cluster.sh up)"
  takes_jobs || die "node is '$(node_state)', not taking jobs"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) status ;;
  *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
