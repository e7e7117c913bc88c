#!/usr/bin/env bash
# Node faults of a local cluster, as a kind user makes them with docker:
#   node.sh pause|resume NAME NODE   freeze the node whole (`docker pause`): its kubelet,
#                                    containerd, kube-proxy and pods' cgroups
#   node.sh cut|heal NAME NODE       cut the node off from the control plane and the other
#                                    nodes (`docker network disconnect`), and join it again:
#                                    its veth on the bridge goes down; the node keeps running,
#                                    pods and all, but nothing reaches it and it reaches nothing
#   node.sh restart-kubelet NAME NODE  stop the node's kubelet (TERM) and start it again with
#                                    the same command line; containers keep running
#   node.sh status NAME NODE         prints running, paused or cut
# The control plane sees a paused or cut node go NotReady after node-monitor-grace-period
# (20 s) and evicts its pods 10 s later; their deletion cannot complete until the node's
# kubelet confirms it (or an operator force-deletes them: docs/local-cluster.md).
# The API server is restarted with apiserver.sh.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"
usage() { echo "usage: $0 pause|resume|cut|heal|restart-kubelet|status NAME NODE" >&2; exit 2; }
[ $# -eq 3 ] || usage
action=$1 CLUSTER_NAME=$2 node=$3
cluster_dirs "$CLUSTER_NAME"
cluster_nodes "$CLUSTER_NAME"
# A fault that goes wrong fails only itself: lib.sh's fail() must not take the cluster down.
export DISPATCH_KEEP_ON_FAILURE=1
index=
for i in "${!NODES[@]}"; do [ "${NODES[$i]}" = "$node" ] && index=$i; done
if [ -z "$index" ] || [ ! -f "$STATE/pids/kubelet-$node" ]; then
  die "no node $node in cluster $CLUSTER_NAME (nodes: ${NODES[*]})"
fi
veth=$(bridge_name "$CLUSTER_NAME" "$index")
procs=("kubelet-$node" "containerd-$node" "kube-proxy-$node")
pids=()
for p in "${procs[@]}"; do [ -f "$STATE/pids/$p" ] && pids+=("$(cat "$STATE/pids/$p")"); done
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
  cut)
    ip link set "$veth" down
    log "node $node cut off (link $veth down)" ;;
  heal)
    ip link set "$veth" up
    log "node $node joined again (link $veth up)" ;;
  restart-kubelet)
    pid=$(cat "$STATE/pids/kubelet-$node")
    kill -TERM "$pid" 2>/dev/null || true
    deadline=$((SECONDS + 30))
    while kill -0 "$pid" 2>/dev/null; do
      [ $SECONDS -lt $deadline ] || kill -KILL "$pid" 2>/dev/null || true
      sleep 0.1
    done
    mapfile -d '' -t cmd < "$STATE/nodes/$node/kubelet.cmdline"
    start_proc "kubelet-$node" "$STATE/logs/kubelet-$node.log" "${cmd[@]}"
    wait_until "kubelet-$node" "$STATE/logs/kubelet-$node.log" 90 \
      curl -sf "http://$(node_ip "$index"):10248/healthz"
    log "kubelet of $node restarted (pid $(cat "$STATE/pids/kubelet-$node"))" ;;
  status)
    state=$(awk '{print $3}' "/proc/${pids[0]}/stat")
    if [ "$state" = T ]; then echo paused
    elif ! ip link show "$veth" | grep -q '[<,]UP[,>]'; then echo cut
    else echo running; fi ;;
  *) usage ;;
esac
