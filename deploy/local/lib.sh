# Shared helpers for the local cluster scripts (sourced, not run).
# shellcheck shell=bash
here=${here:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)}
# shellcheck source=versions.env
. "$here/versions.env"

# Build outputs (binaries, images, upstream manifests): kept between runs, outside git.
CACHE=${DISPATCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/dispatch-kubeflow}
# Runtime state of clusters (certificates, etcd data, node roots): removed by down.sh.
STATE_ROOT=${DISPATCH_STATE_ROOT:-/var/lib/dispatch-local}
RUN_ROOT=${DISPATCH_RUN_ROOT:-/run/dispatch-local}
export GOFLAGS=${GOFLAGS:--mod=mod}

# Loopback ports; override when they clash with something else on the machine.
ETCD_PORT=${ETCD_PORT:-22379}
APISERVER_PORT=${APISERVER_PORT:-16443}
KCM_PORT=${KCM_PORT:-20257}
SCHED_PORT=${SCHED_PORT:-20259}
JOBSET_WEBHOOK_PORT=${JOBSET_WEBHOOK_PORT:-21443}
KUEUE_WEBHOOK_PORT=${KUEUE_WEBHOOK_PORT:-22443}
TRAINER_WEBHOOK_PORT=${TRAINER_WEBHOOK_PORT:-23443}
JOBSET_HEALTH_PORT=${JOBSET_HEALTH_PORT:-21081}
KUEUE_HEALTH_PORT=${KUEUE_HEALTH_PORT:-22081}
TRAINER_HEALTH_PORT=${TRAINER_HEALTH_PORT:-23081}
TRAINER_STATUS_PORT=${TRAINER_STATUS_PORT:-23444}
# Memory a node offers pods, like the seed's 2500 MB node containers.
NODE_MEMORY_MB=${NODE_MEMORY_MB:-2500}
# The cluster's addresses, all inside this machine: PREFIX.0.0/24 is the nodes' network
# (kind's Docker network; the host is .1, node i is .(i+2)), PREFIX.(i+1).0/24 node i's pods.
NODE_SUBNET_PREFIX=${NODE_SUBNET_PREFIX:-10.244}
HOST_IP=$NODE_SUBNET_PREFIX.0.1

log() { printf '[local] %s\n' "$*" >&2; }
die() { printf '[local] error: %s\n' "$*" >&2; exit 1; }

bin_path() { # a binary's cached path, versioned so a pin change rebuilds
  case $1 in
    kube-*|kubelet|kubectl) echo "$CACHE/bin/$1-$KUBERNETES_VERSION" ;;
    kueue) echo "$CACHE/bin/kueue-$KUEUE_VERSION" ;;
    kueuectl) echo "$CACHE/bin/kueuectl-$KUEUE_VERSION" ;;
    jobset) echo "$CACHE/bin/jobset-$JOBSET_VERSION" ;;
    trainer) echo "$CACHE/bin/trainer-$TRAINER_VERSION" ;;
    etcd) echo "$CACHE/bin/etcd-$ETCD_VERSION" ;;
    *) echo "$CACHE/bin/$1" ;;
  esac
}
have_bin() { [ -x "$(bin_path "$1")" ]; }

# resolve_bin NAME: KUBEBUILDER_ASSETS, then the cache (built), then PATH.
resolve_bin() {
  local n=$1
  if [ -n "${KUBEBUILDER_ASSETS:-}" ] && [ -x "$KUBEBUILDER_ASSETS/$n" ]; then
    echo "$KUBEBUILDER_ASSETS/$n"; return 0
  fi
  if have_bin "$n"; then bin_path "$n"; return 0; fi
  if [ "${DISPATCH_USE_PATH:-}" = 1 ] && command -v "$n" >/dev/null 2>&1; then
    command -v "$n"; return 0
  fi
  return 1
}

cluster_dirs() { # sets STATE RUN for cluster $1
  STATE="$STATE_ROOT/$1"
  RUN="$RUN_ROOT/$1"
  export STATE RUN
}

bridge_name() { # CLUSTER SUFFIX: a link name, at most 15 characters as Linux requires
  echo "dk$(printf '%s' "$1" | md5sum | cut -c1-8)-$2"
}

# The nodes, as kind.yaml has them: node i is NODES[i].
cluster_nodes() { # CLUSTER: sets NODES
  # shellcheck disable=SC2034  # used by the scripts that source this
  NODES=("$1-control-plane" "$1-worker" "$1-worker2")
}
node_ip() { echo "$NODE_SUBNET_PREFIX.0.$(( $1 + 2 ))"; }        # index -> its address
pod_prefix() { echo "$NODE_SUBNET_PREFIX.$(( $1 + 1 ))"; }       # index -> its pods' /24
node_netns() { echo "dispatch-$1"; }                              # node name -> netns
in_node() { # NODE CMD...: run CMD in the node's network namespace (mounts stay the host's)
  local ns; ns=$(node_netns "$1"); shift
  nsenter "--net=/run/netns/$ns" -- "$@"
}

module_dir() { # module@version -> its directory in the module cache (downloads it)
  go mod download -json "$1" | python3 -c 'import json,sys;print(json.load(sys.stdin)["Dir"])'
}

# fail COMPONENT LOGFILE MESSAGE: say what failed, show its log's tail, clean up, exit 1.
fail() {
  local comp=$1 logf=$2 msg=$3
  printf '[local] error: %s: %s\n' "$comp" "$msg" >&2
  if [ -n "$logf" ] && [ -f "$logf" ]; then
    printf '[local] its log: %s; last lines:\n' "$logf" >&2
    tail -n 25 "$logf" | sed 's/^/    /' >&2
  fi
  if [ -n "${CLUSTER_NAME:-}" ] && [ "${DISPATCH_KEEP_ON_FAILURE:-}" != 1 ]; then
    log "undoing everything this run changed (set DISPATCH_KEEP_ON_FAILURE=1 to keep it for debugging)"
    "$here/down.sh" "$CLUSTER_NAME" >&2 || true
  fi
  exit 1
}

# start_proc NAME LOGFILE CMD...: run in its own session, pid in $STATE/pids/NAME.
start_proc() {
  local name=$1 logf=$2; shift 2
  mkdir -p "$STATE/pids" "$(dirname "$logf")"
  (
    # Long-lived processes must not keep the caller's other descriptors open (a held
    # flock, a pipe a caller waits on to close).
    for fd in "/proc/$BASHPID/fd"/*; do
      fd=${fd##*/}
      if [ "$fd" -gt 2 ]; then eval "exec $fd>&-"; fi
    done
    exec setsid "$@"
  ) >>"$logf" 2>&1 < /dev/null &
  echo $! > "$STATE/pids/$name"
}

proc_alive() { # NAME
  local f="$STATE/pids/$1"
  [ -f "$f" ] && kill -0 "$(cat "$f")" 2>/dev/null
}

# wait_until COMPONENT LOGFILE SECONDS CMD...: poll CMD every 0.2 s; fail when the
# process died or the time passed.
wait_until() {
  local comp=$1 logf=$2 secs=$3; shift 3
  local deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    if ! proc_alive "$comp"; then fail "$comp" "$logf" "the process exited"; fi
    if [ $SECONDS -ge $deadline ]; then fail "$comp" "$logf" "not ready within ${secs}s"; fi
    sleep 0.2
  done
}

port_free() { # PORT [ADDRESS]: true when nothing listens on ADDRESS (127.0.0.1):PORT
  ! (exec 3<>"/dev/tcp/${2:-127.0.0.1}/$1") 2>/dev/null
}

# Kueue's integrations whose CRDs every local cluster installs. up.sh writes them into Kueue's
# Configuration (KUEUE_FRAMEWORKS), multikueue.sh grants a MultiKueue manager the rules for
# them in its workers: one list for both.
KUEUE_LOCAL_FRAMEWORKS=batch/job,jobset.x-k8s.io/jobset,trainer.kubeflow.org/trainjob
kueue_framework_resource() { # FRAMEWORK: its API group and resource, or fails for another
  case $1 in
    batch/job) echo "batch jobs" ;;
    jobset.x-k8s.io/jobset) echo "jobset.x-k8s.io jobsets" ;;
    trainer.kubeflow.org/trainjob) echo "trainer.kubeflow.org trainjobs" ;;
    *) return 1 ;;
  esac
}
kueue_frameworks_yaml() { # VAR LIST: LIST (comma-separated) as Kueue's Configuration lists
  # it, or die naming VAR and the framework the local clusters lack
  local fw out='' fws
  IFS=, read -ra fws <<< "$2"
  [ ${#fws[@]} -gt 0 ] || die "$1 is empty"
  for fw in "${fws[@]}"; do
    kueue_framework_resource "$fw" >/dev/null \
      || die "$1: '$fw': only ${KUEUE_LOCAL_FRAMEWORKS//,/, } have their CRDs in the local clusters"
    out+="${out:+, }\"$fw\""
  done
  echo "$out"
}
is_duration() { [[ $1 =~ ^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$ ]]; }  # as Go's, in the units used here

admin_curl() { # PATH: GET from the apiserver as admin
  curl -sf --cacert "$STATE/pki/ca.crt" --cert "$STATE/pki/admin.crt" --key "$STATE/pki/admin.key" \
    "https://$HOST_IP:$APISERVER_PORT$1"
}
