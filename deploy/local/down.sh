#!/usr/bin/env bash
# Stop a local cluster and put the machine back as it was: down.sh NAME
# Stops every process, unmounts what the nodes mounted, removes the nodes' network
# namespaces (their iptables rules and routes go with them), the veths, the bridge and its
# routes, the state, the kubeconfigs up.sh wrote (while unchanged), and restores the
# kernel settings the kubelet changed. The host's own iptables are never touched: nothing of
# a local cluster writes them.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"
if [ $# -ne 1 ] || ! [[ $1 =~ ^[a-z0-9]([-a-z0-9]*[a-z0-9])?$ ]]; then
  echo "usage: $0 NAME" >&2; exit 2
fi
[ "$(id -u)" = 0 ] || die "must run as root"
CLUSTER_NAME=$1
cluster_dirs "$CLUSTER_NAME"
cluster_nodes "$CLUSTER_NAME"

kill_tree() { # SIGNAL PID...: the processes and everything in their sessions
  local sig=$1; shift
  local p
  for p in "$@"; do
    pkill "-$sig" -s "$p" 2>/dev/null
    kill "-$sig" "$p" 2>/dev/null
  done
}

stop_pids() { # NAME...: TERM, then KILL what is left after 10 s
  local pids=() n f
  for n in "$@"; do
    f="$STATE/pids/$n"
    [ -f "$f" ] && pids+=("$(cat "$f")")
  done
  [ ${#pids[@]} -eq 0 ] && return 0
  kill_tree TERM "${pids[@]}"
  for _ in $(seq 50); do
    local alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.2
  done
  kill_tree CONT "${pids[@]}"   # a paused node cannot take TERM
  kill_tree KILL "${pids[@]}"
  for n in "$@"; do rm -f "$STATE/pids/$n"; done
}

if [ -d "$STATE" ] || [ -d "$RUN" ]; then
  log "stopping cluster $CLUSTER_NAME"
  # Thaw paused nodes first, or their processes cannot die.
  for node in "${NODES[@]}"; do
    fz=/sys/fs/cgroup/freezer/dispatch-$node
    [ -f "$fz/freezer.state" ] && echo THAWED > "$fz/freezer.state" 2>/dev/null
  done
  stop_pids jobset kueue trainer
  for f in "$STATE"/pids/kubelet-* "$STATE"/pids/kube-proxy-*; do [ -e "$f" ] && stop_pids "$(basename "$f")"; done
  # The containers: kill the shims of this cluster's containerds (they take the pods with them).
  for sock in "$RUN"/*/containerd.sock; do
    [ -S "$sock" ] || continue
    pkill -KILL -f "containerd-shim-runc-v2 -namespace k8s.io .*-address $sock" 2>/dev/null
  done
  # Not always: a container whose shim is killed may go on running, re-parented to init
  # (seen: both controller replicas of a cluster left running after a fault campaign). Every
  # process of a node lives under its cgroup root, so kill what those still hold.
  for node in "${NODES[@]}"; do
    find /sys/fs/cgroup/*/"dispatch-$node" -name cgroup.procs -exec cat {} + 2>/dev/null \
      | sort -u | xargs -r kill -KILL 2>/dev/null
  done
  for f in "$STATE"/pids/containerd-*; do [ -e "$f" ] && stop_pids "$(basename "$f")"; done
  # Anything still running from this cluster's directories (shims, pods' processes).
  for d in "$STATE" "$RUN"; do pkill -KILL -f -- "$d/" 2>/dev/null; done
  stop_pids kube-scheduler kube-controller-manager kube-apiserver etcd
  for f in "$STATE"/pids/*; do [ -e "$f" ] && stop_pids "$(basename "$f")"; done

  # Mounts below the cluster's directories, deepest first (the kubelet bind-mounts its root,
  # pods' volumes are tmpfs, containerd mounts overlays and shm).
  for _ in 1 2 3; do
    mapfile -t mounts < <(awk -v s="$STATE/" -v r="$RUN/" -v s0="$STATE" -v r0="$RUN" \
      'index($5, s) == 1 || index($5, r) == 1 || $5 == s0 || $5 == r0 {print $5}' /proc/self/mountinfo | sort -r)
    [ ${#mounts[@]} -eq 0 ] && break
    for m in "${mounts[@]}"; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null; done
  done

  # The pods' network namespaces are mounts below $RUN (containerd's
  # netns_mounts_under_state_dir), unmounted above; their veths went with them.
  # The nodes' namespaces: their veth ends, pod bridges, routes and iptables rules go too.
  for node in "${NODES[@]}"; do
    [ -e "/run/netns/$(node_netns "$node")" ] && ip netns delete "$(node_netns "$node")" 2>/dev/null
  done
  # The bridge (its routes go with it) and any veth left of a half-made node.
  for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' | grep "^$(bridge_name "$CLUSTER_NAME" "")"); do
    ip link delete "$link" 2>/dev/null
  done

  # cgroups of the nodes' pods, deepest first.
  for ctl in /sys/fs/cgroup/*/; do
    for node in "${NODES[@]}"; do
      root=${ctl}dispatch-$node
      [ -d "$root" ] || continue
      find "$root" -depth -type d -exec rmdir {} \; 2>/dev/null
    done
  done
  # The kubeconfigs up.sh wrote at its callers' paths: each while it is still the one
  # written (a file changed since is the caller's own).
  while IFS= read -r f; do
    cmp -s -- "$f" "$STATE/admin.kubeconfig" && rm -f -- "$f"
  done < <(cat "$STATE/kubeconfigs" 2>/dev/null)
  rm -rf "$STATE" "$RUN"
  log "cluster $CLUSTER_NAME stopped"
else
  log "cluster $CLUSTER_NAME is not running"
fi

# The machine-wide changes are undone when the last cluster is gone.
if [ -f "$STATE_ROOT/machine.before" ] && [ -z "$(find "$STATE_ROOT" -mindepth 1 -maxdepth 1 -type d 2>/dev/null)" ]; then
  while read -r what a b; do
    case $what in sysctl) sysctl -qw "$a=$b" ;; esac
  done < "$STATE_ROOT/machine.before"
  for d in /var/lib/kubelet /var/lib/cni /var/log/containers /var/log/pods /var/run/netns /etc/cni /opt/cni /etc/kueue; do
    grep -qx "existed $d" "$STATE_ROOT/machine.before" && continue
    [ -e "$d" ] || continue
    # mountinfo names the real path: /var/run/netns is mounted as /run/netns (ip netns add
    # bind-mounts it onto itself), and rm cannot remove a mount point.
    real=$(readlink -f "$d")
    awk -v d="$real" 'index($5, d) == 1 {print $5}' /proc/self/mountinfo | sort -r | xargs -r -n1 umount -l 2>/dev/null
    rm -rf "$d"
  done
  rm -f "$STATE_ROOT/machine.before"
  rmdir "$STATE_ROOT" "$RUN_ROOT" 2>/dev/null
  log "machine settings restored"
fi
exit 0
