#!/usr/bin/env bash
# Pause or resume one worker of a local cluster, as `docker pause` does to a kind node:
#   node.sh pause|resume|status NAME NODE
# Pausing freezes the node's pods (their cgroups), its kubelet and its containerd; the
# control plane sees the node go NotReady and its pods are lost after the usual timeouts,
# while every other node and controller keeps running.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"
[ $# -eq 3 ] || { echo "usage: $0 pause|resume|status NAME NODE" >&2; exit 2; }
action=$1 CLUSTER_NAME=$2 node=$3
cluster_dirs "$CLUSTER_NAME"
[ -f "$STATE/pids/kubelet-$node" ] || die "no node $node in cluster $CLUSTER_NAME"
pids=("$(cat "$STATE/pids/kubelet-$node")" "$(cat "$STATE/pids/containerd-$node")")
freezer=/sys/fs/cgroup/freezer/dispatch-$node
case $action in
  pause)
    kill -STOP "${pids[@]}"
    [ -d "$freezer" ] && echo FROZEN > "$freezer/freezer.state"
    log "node $node paused" ;;
  resume)
    [ -d "$freezer" ] && echo THAWED > "$freezer/freezer.state"
    kill -CONT "${pids[@]}"
    log "node $node resumed" ;;
  status)
    state=$(awk '{print $3}' "/proc/${pids[0]}/stat")
    [ "$state" = T ] && echo paused || echo running ;;
  *) echo "usage: $0 pause|resume|status NAME NODE" >&2; exit 2 ;;
esac
