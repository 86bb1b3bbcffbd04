#!/usr/bin/env bash
# Two Slurm compute nodes on this one machine, for tests/slurm/test_multinode.py (called by .ci/slurm.sh, root).
# Each node is a network namespace (pods-n1, pods-n2) with its own address on a bridge (pods-br, 10.213.77.0/24;
# the controller is .1 on the bridge) and its own hostname (a UTS namespace), so that a job across both nodes
# talks over the bridge as over a network, and gloo binds each node's own address (its hostname resolves to
# it through /etc/hosts). The filesystem is shared, as on a cluster with a shared home.
#   .ci/slurm-nodes.sh net      make the namespaces and the bridge (idempotent); exit 1 if this machine cannot
#   .ci/slurm-nodes.sh start    start each node's slurmd inside its namespaces (once the controller runs)
#   .ci/slurm-nodes.sh check    the nodes reach each other (TCP to the other's slurmd); exit 1 if not
set -euo pipefail

NET=10.213.77
NODES=(pods-n1 pods-n2)
addr() { echo "$NET.$((11 + $1))"; }

net() {
  command -v ip >/dev/null || { echo "slurm-nodes: no \`ip\` (iproute2)" >&2; return 1; }
  if ! ip link show pods-br >/dev/null 2>&1; then
    ip link add pods-br type bridge && ip addr add "$NET.1/24" dev pods-br && ip link set pods-br up
  fi
  for i in "${!NODES[@]}"; do
    n=${NODES[$i]}
    ip netns list | grep -qw "$n" || ip netns add "$n"
    if ! ip -n "$n" link show eth0 >/dev/null 2>&1; then
      ip link add "v-$n" type veth peer name eth0 netns "$n"
      ip link set "v-$n" master pods-br && ip link set "v-$n" up
      ip -n "$n" addr add "$(addr "$i")/24" dev eth0
      ip -n "$n" link set eth0 up && ip -n "$n" link set lo up
    fi
    # the node's hostname resolves to its own address everywhere (MASTER_ADDR is a hostname from Slurm)
    grep -qE "^$(addr "$i")[[:space:]]+$n\$" /etc/hosts || echo "$(addr "$i") $n" >> /etc/hosts
  done
}

start() {
  for n in "${NODES[@]}"; do
    pid=/run/slurmd-$n.pid
    if [ -s "$pid" ] && kill -0 "$(cat "$pid")" 2>/dev/null; then continue; fi
    mkdir -p "/var/spool/slurmd/$n"
    # nsenter, not `ip netns exec`: that remounts /sys without /sys/fs/cgroup, which slurmd needs
    nsenter --net="/run/netns/$n" unshare --uts sh -c "hostname $n && exec slurmd"
  done
}

check() {
  # each node reaches the other's slurmd over the bridge (a firewall on bridged traffic would stop gloo too)
  for i in "${!NODES[@]}"; do
    other=$(( 1 - i ))
    for _ in $(seq 20); do
      ip netns exec "${NODES[$i]}" timeout 2 bash -c "echo > /dev/tcp/$(addr $other)/6818" 2>/dev/null && continue 2
      sleep 0.5
    done
    echo "slurm-nodes: ${NODES[$i]} cannot reach $(addr $other):6818 over pods-br" >&2; return 1
  done
}

"${1:?usage: slurm-nodes.sh net|start|check}"
