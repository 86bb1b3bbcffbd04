#!/usr/bin/env bash
# Install and start a one-node Slurm on this (CI) machine, for tests/slurm/: Debian's slurm-wlm + munge,
# one node named after this host, one partition `debug`. Needs root. Idempotent: a running Slurm that
# answers `sinfo` is left as it is. Exits non-zero if Slurm cannot start; the Slurm tests then skip.
# Logs: /var/log/slurm/{slurmctld,slurmd}.log, /var/log/munge/munged.log.
set -euo pipefail

if sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then
  echo "slurm: already running"; exit 0
fi
if [ "$(id -u)" != 0 ]; then echo "slurm: needs root to install and start" >&2; exit 1; fi
if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
fi

host=$(hostname -s)
cpus=$(nproc)
mem=$(awk '/MemTotal/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)
mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge /var/log/munge /etc/munge
# CPUs: the jobs of a small sweep run side by side even on a 2-core machine (config_overrides lets slurmd
# accept more CPUs than it finds). SlurmctldParameters=enable_configless is not needed: one node.
cat > /etc/slurm/slurm.conf <<CONF
ClusterName=pods-ci
SlurmctldHost=$host
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
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
# Short waits, so that time limits, requeues and kills happen in seconds in the tests
KillWait=30
MinJobAge=300
InactiveLimit=0
Waittime=0
MailProg=/bin/true
# Schedule every 2 s (defaults 30-60 s): a requeued job starts again as soon as cred_expire allows
SchedulerParameters=sched_interval=2,bf_interval=2
NodeName=$host CPUs=$(( cpus < 8 ? 8 : cpus )) RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
CONF

if [ ! -s /etc/munge/munge.key ]; then
  dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
fi
chown -R munge:munge /etc/munge /run/munge /var/log/munge 2>/dev/null || true
chmod 700 /etc/munge; chmod 400 /etc/munge/munge.key
pgrep -x munged >/dev/null || runuser -u munge -- munged --force
pgrep -x slurmctld >/dev/null || slurmctld
pgrep -x slurmd >/dev/null || slurmd
for _ in $(seq 60); do
  if sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then
    scontrol update nodename="$host" state=resume 2>/dev/null || true
    echo "slurm: up ($host, partition debug)"; exit 0
  fi
  sleep 0.5
done
echo "slurm: did not come up; see /var/log/slurm/slurmctld.log and slurmd.log" >&2
sinfo >&2 || true
exit 1
