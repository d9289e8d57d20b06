#!/usr/bin/env bash
# A SLURM cluster of one or more nodes on this machine, on loopback only, for the tests
# (tests/test_slurm_cluster.py, tests/test_two_nodes.py) and for trying the cluster path by hand: slurmctld
# and one slurmd per node, munge for authentication, partition `debug`.
#
#   bash slurm/local-cluster.sh up [--nodes N]      # install (apt, only if missing), configure, start; wait
#   bash slurm/local-cluster.sh status [--nodes N]  # sinfo; exit 0 when N nodes (default 1) take jobs
#   bash slurm/local-cluster.sh down                # stop the daemons it started (configuration and packages stay)
#
# Every daemon runs in a UTS namespace of its own (`unshare -u`) under its own hostname: the controller as
# `ctl` (its SlurmctldHost), the nodes as n1..nN, all at NodeAddr=127.0.0.1 with a distinct Port= per
# slurmd and per-node spool, pid and log files (%n). A job step sees its node's name (`hostname`), as on a
# real cluster, and the names resolve to 127.0.0.1 through /etc/hosts. Runs as root and starts the daemons
# directly (no systemd here). `up` is idempotent: a running cluster of N nodes that take jobs is left alone;
# one of another size is stopped and configured anew. It exits non-zero, with the daemons' last log lines,
# when the nodes do not come up within LOCAL_SLURM_WAIT_S seconds (60). `down` stops only the daemons `up`
# started, whose pid files it keeps in its own state directory (a host's own slurmctld or munged, named in
# /run, is never touched), and takes its line out of /etc/hosts again.
set -euo pipefail
export PATH="$PATH:/usr/sbin:/sbin"  # slurmctld, slurmd, munged live there; a CI shell's PATH may lack it

CONF_DIR=/etc/slurm
CONF=$CONF_DIR/slurm.conf
LOG_DIR=/var/log/slurm
SPOOL=/var/spool
PARTITION=debug
CTL=ctl
HOSTS_TAG="# slurm/local-cluster.sh"
# GPUs each node advertises as a generic resource: lets a GPU-rendered script (--gpus-per-node=N) be
# scheduled here and run its N ranks on the CPU. Slurm wants one character device per GPU; these are
# aliases of /dev/null (no CUDA device behind them). 0 advertises none.
FAKE_GPUS=${LOCAL_SLURM_FAKE_GPUS:-2}
STATE=/var/lib/slurm-local
FAKE_GPU_DIR=$STATE/fake-gpu
WAIT_S=${LOCAL_SLURM_WAIT_S:-60}
NODES=1

die() { echo "local-cluster: $*" >&2; exit 1; }
say() { echo "local-cluster: $*" >&2; }

node_states() {  # "name state" per node as sinfo prints it (idle, mixed, down*, drained, ...); empty if no answer
  timeout 10 sinfo -h -N -p "$PARTITION" -o '%N %T' 2>/dev/null || true
}

takes_jobs() {  # at least NODES nodes are idle, mixed, allocated or completing
  [ "$(node_states | awk '$2 ~ /^(idle|mixed|allocated|completing)$/' | wc -l)" -ge "$NODES" ]
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
  cp /run/munge/munged.pid "$STATE/munged.pid"  # none answered before: this one is ours to stop
}

set_hosts() {  # set_hosts [LINE]: /etc/hosts without this script's line, plus LINE; unchanged if equal
  local tmp
  tmp=$(mktemp /etc/.hosts.XXXXXX)
  { grep -v "$HOSTS_TAG" /etc/hosts || true; [ -z "${1:-}" ] || echo "$1"; } >"$tmp"
  if cmp -s "$tmp" /etc/hosts; then rm -f "$tmp"; return 0; fi
  chmod --reference=/etc/hosts "$tmp"
  # a whole new file renamed into place; where /etc/hosts is a mount (docker's), a rename cannot replace
  # it: copied over it from the finished file, in one write
  mv -f "$tmp" /etc/hosts 2>/dev/null || { cat "$tmp" >/etc/hosts; rm -f "$tmp"; }
}

write_config() {
  local hw gres_line="" node_gres="" i
  mkdir -p "$CONF_DIR" "$LOG_DIR" "$SPOOL/slurmctld" "$SPOOL/slurmd" "$STATE"
  # The machine's hardware as slurmd itself detects it (CPUs, sockets, cores, threads, RealMemory), for
  # every node: a configuration that claims more than slurmd finds leaves the node drained.
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
  # The names resolve to loopback: MASTER_ADDR is a node's name, and gloo binds to its host's name.
  set_hosts "127.0.0.1 $CTL $(seq -f 'n%g' -s ' ' 1 "$NODES") $HOSTS_TAG"
  {
    cat <<EOF
# Written by slurm/local-cluster.sh: a $NODES-node test cluster on loopback. Edits are overwritten by 'up'.
ClusterName=local
SlurmctldHost=$CTL(127.0.0.1)
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
# One file system for all slurmds: spool, pid and log files per node (%n).
SlurmdSpoolDir=$SPOOL/slurmd/%n
# In this script's state directory: what 'down' may stop.
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd-%n.pid
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd-%n.log
$gres_line
EOF
    for i in $(seq 1 "$NODES"); do  # one address, a port per slurmd
      echo "NodeName=n$i NodeAddr=127.0.0.1 Port=$((6817 + i)) $hw $node_gres State=UNKNOWN"
    done
    echo "PartitionName=$PARTITION Nodes=$(seq -f 'n%g' -s ',' 1 "$NODES") Default=YES MaxTime=INFINITE State=UP"
  } >"$CONF.tmp"
  mv "$CONF.tmp" "$CONF"
}

in_namespace() {  # in_namespace NAME CMD...: CMD in a new UTS namespace whose hostname is NAME
  unshare -u sh -c 'hostname "$0" && exec "$@"' "$@"
}

up() {
  [ "$(id -u)" -eq 0 ] || die "must run as root (it installs packages and starts slurmctld/slurmd)"
  if command -v sinfo >/dev/null && takes_jobs && [ "$(node_states | wc -l)" -eq "$NODES" ]; then
    say "already up: $NODES node(s) in partition $PARTITION"
    return 0
  fi
  install_packages
  down  # another size, or daemons left half up: start over
  write_config
  start_munge
  # -c: the saved state names the last configuration's nodes and jobs, gone with its daemons
  in_namespace "$CTL" slurmctld -c || die "slurmctld did not start (see $LOG_DIR/slurmctld.log)"
  local i waited=0 node
  for i in $(seq 1 "$NODES"); do
    mkdir -p "$SPOOL/slurmd/n$i"
    in_namespace "n$i" slurmd || die "slurmd of n$i did not start (see $LOG_DIR/slurmd-n$i.log)"
  done
  until takes_jobs; do
    for node in $(node_states | awk '$2 ~ /^(down|drain|fail)/ {print $1}'); do
      scontrol update NodeName="$node" State=RESUME >/dev/null 2>&1 || true
    done
    if [ "$waited" -ge "$WAIT_S" ] && ! takes_jobs; then
      # The daemons' last lines first (less the PMIx plugin noise), the verdict last.
      tail -n 15 "$LOG_DIR"/slurmctld.log "$LOG_DIR"/slurmd-n*.log 2>/dev/null | grep -v -i pmix >&2 || true
      die "not $NODES node(s) taking jobs after ${WAIT_S}s: $(node_states | tr '\n' ' ')(logs: $LOG_DIR)"
    fi
    sleep 1
    waited=$((waited + 1))
  done
  say "up: $(sinfo -h -N -o '%N %T, %c CPUs, %m MB, gres %G;' | tr '\n' ' ')partition $PARTITION"
}

stop() {  # stop PIDFILE NAME: the daemon `up` started, if that pid still runs NAME (not a pid reused since)
  local pid
  pid=$(cat "$1" 2>/dev/null) || return 0
  if [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ]; then
    kill "$pid"
    for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  fi
  rm -f "$1"
}

down() {
  local pidfile
  for pidfile in "$STATE"/slurmd-*.pid; do
    [ -e "$pidfile" ] && stop "$pidfile" slurmd
  done
  stop "$STATE/slurmctld.pid" slurmctld
  stop "$STATE/munged.pid" munged
  set_hosts
  say "down"
}

status() {
  command -v sinfo >/dev/null || die "slurm is not installed (run: bash slurm/local-cluster.sh up)"
  timeout 10 sinfo || die "slurmctld does not answer (run: bash slurm/local-cluster.sh up)"
  takes_jobs || die "fewer than $NODES node(s) take jobs (run: bash slurm/local-cluster.sh up --nodes $NODES)"
}

usage() { echo "usage: $0 up|down|status [--nodes N]" >&2; exit 2; }
command=${1:-}
[ $# -gt 0 ] && shift
while [ $# -gt 0 ]; do
  case "$1" in
    --nodes) NODES=${2:-}; shift $(( $# > 1 ? 2 : 1 )) ;;
    --nodes=*) NODES=${1#--nodes=}; shift ;;
    *) usage ;;
  esac
done
[[ "$NODES" =~ ^[1-9][0-9]*$ ]] || die "--nodes '$NODES': expected a whole number of nodes, at least 1"
case "$command" in
  up) up ;;
  down) down ;;
  status) status ;;
  *) usage ;;
esac
