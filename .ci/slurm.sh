#!/usr/bin/env bash
# Install and start Slurm on this (CI) machine, for tests/slurm/: Debian's slurm-wlm + munge, one controller,
# - node <this host>, partition `debug` (the default): the one-node tests;
# - nodes pods-n1 and pods-n2, partition `multi`: two nodes, each in its own network namespace with its own
#   hostname and address (.ci/slurm-nodes.sh), for the multi-node tests. Where this machine cannot make
#   network namespaces (no iproute2, no CAP_NET_ADMIN) there is no `multi` and those tests skip.
# Needs root. Idempotent: a Slurm that answers `sinfo` with both partitions up (or `debug` where there can be
# no `multi`) and runs this script's slurm.conf is left as it is; a changed slurm.conf restarts the daemons.
# Exits non-zero if `debug` cannot start; the Slurm tests then skip. Logs: /var/log/slurm/{slurmctld,slurmd-<node>}.log, /var/log/munge/munged.log.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

idle() { sinfo -h -N -p "$1" -o %T 2>/dev/null | grep -cE '^(idle|mixed|allocated)$' || true; }
up() { [ "$(idle debug)" -ge 1 ] && { [ "$(idle multi)" -ge 2 ] || ! ip netns list >/dev/null 2>&1; }; }
if [ "$(id -u)" != 0 ]; then
  if up; then echo "slurm: already running"; exit 0; fi
  echo "slurm: needs root to install and start" >&2; exit 1
fi
if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null || ! command -v ip >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq --no-install-recommends slurm-wlm munge iproute2 >/dev/null
fi

host=$(hostname -s)
cpus=$(nproc)
mem=$(awk '/MemTotal/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)
two=0
if bash "$here/slurm-nodes.sh" net; then two=1; else echo "slurm: no two-node partition \`multi\` on this machine" >&2; fi
# the controller listens on every address; the nodes reach it on the bridge
ctl=$host; [ $two = 1 ] && ctl="$host(10.213.77.1)"
mkdir -p /etc/slurm /var/spool/slurmctld "/var/spool/slurmd/$host" /var/log/slurm /run/munge /var/log/munge /etc/munge
# CPUs: the jobs of a small sweep run side by side even on a 2-core machine (config_overrides lets slurmd
# accept more CPUs than it finds). No configless mode: every slurmd of this machine reads /etc/slurm.
conf=$(mktemp)
cat > "$conf" <<CONF
ClusterName=pods-ci
SlurmctldHost=$ctl
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
# A requeued job may start again after cred_expire seconds (default 120): 10 keeps the requeue tests short
AuthInfo=cred_expire=10
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
StateSaveLocation=/var/spool/slurmctld
# one slurmd per node on this machine: %n is the node's name
SlurmdSpoolDir=/var/spool/slurmd/%n
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd-%n.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd-%n.log
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
# Short waits, so that time limits, requeues and kills happen in seconds in the tests
KillWait=30
# A node whose slurmd stops answering is set down after 15 s (default 300; pinged every 5 s): the test of a
# node whose slurmd dies waits for that. A loaded machine's slurmd still answers a ping within 15 s.
SlurmdTimeout=15
MinJobAge=300
InactiveLimit=0
Waittime=0
MailProg=/bin/true
# Schedule every 2 s (defaults 30-60 s): a requeued job starts again as soon as cred_expire allows
SchedulerParameters=sched_interval=2,bf_interval=2
NodeName=$host CPUs=$(( cpus < 8 ? 8 : cpus )) RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
CONF
if [ $two = 1 ]; then  # 4 CPUs each (2 tasks per node fit, 5 do not), a quarter of the memory each
  cat >> "$conf" <<CONF
NodeName=pods-n1 NodeAddr=10.213.77.11 CPUs=4 RealMemory=$(( mem / 4 )) State=UNKNOWN
NodeName=pods-n2 NodeAddr=10.213.77.12 CPUs=4 RealMemory=$(( mem / 4 )) State=UNKNOWN
PartitionName=multi Nodes=pods-n[1-2] MaxTime=INFINITE State=UP OverSubscribe=NO
CONF
fi
if up && cmp -s "$conf" /etc/slurm/slurm.conf; then rm -f "$conf"; echo "slurm: already running"; exit 0; fi
if ! cmp -s "$conf" /etc/slurm/slurm.conf; then  # a new conf: daemons started with the old one stop first
  for f in /run/slurmctld.pid /run/slurmd*.pid; do
    [ -s "$f" ] && kill "$(cat "$f")" 2>/dev/null && sleep 1
    rm -f "$f"
  done
  mv "$conf" /etc/slurm/slurm.conf
else
  rm -f "$conf"
fi

if [ ! -s /etc/munge/munge.key ]; then
  dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
fi
chown -R munge:munge /etc/munge /run/munge /var/log/munge 2>/dev/null || true
chmod 700 /etc/munge; chmod 400 /etc/munge/munge.key
pgrep -x munged >/dev/null || runuser -u munge -- munged --force
alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
alive /run/slurmctld.pid || slurmctld
alive "/run/slurmd-$host.pid" || slurmd
[ $two = 1 ] && bash "$here/slurm-nodes.sh" start
for _ in $(seq 60); do
  # this host's node, not any node: the two namespace nodes may answer first
  if [ "$(idle debug)" -ge 1 ]; then echo "slurm: up ($host, partition debug)"; break; fi
  # a node that was down (a restart of the daemons) comes back only when told to
  if sinfo -h -N -p debug -o %T 2>/dev/null | grep -qiE 'down|drain'; then
    scontrol update nodename="$host" state=resume 2>/dev/null || true
  fi
  sleep 0.5
done
if [ "$(idle debug)" -ge 1 ] && [ $two = 1 ]; then
  for _ in $(seq 60); do [ "$(idle multi)" -ge 2 ] && break; sleep 0.5; done
  if [ "$(idle multi)" -lt 2 ]; then
    echo "slurm: nodes pods-n1/pods-n2 did not come up; see /var/log/slurm/slurmd-pods-n*.log" >&2
  elif ! bash "$here/slurm-nodes.sh" check; then  # the tests read the reason from sinfo and skip
    scontrol update nodename=pods-n[1-2] state=drain reason="the nodes cannot reach each other over pods-br"
  else
    echo "slurm: up (pods-n1, pods-n2, partition multi)"
  fi
fi
[ "$(idle debug)" -ge 1 ] && exit 0
echo "slurm: did not come up; see /var/log/slurm/slurmctld.log and slurmd.log" >&2
sinfo >&2 || true
exit 1
