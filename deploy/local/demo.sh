#!/usr/bin/env bash
# The README's main command (`make demo`): demo.sh NAME KUBECONFIG
# Builds and starts the local cluster, whose up.sh deploys the admission controller into it
# (deploy/admission, as users deploy it), runs the seed's tutorial (examples/tutorial.py)
# against them, and stops what it started — only that: a cluster that was already running is
# left running. With DISPATCH_CONTROLLER=host the controller runs as a host process instead
# (admission.sh, for development), started and stopped here likewise.
# The exit status is the tutorial's.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"
[ $# -eq 2 ] || { echo "usage: $0 NAME KUBECONFIG" >&2; exit 2; }
name=$1 kubeconfig=$2
py=${PYTHON:-$repo/.venv/bin/python}
cluster_dirs "$name"

# The same test as up.sh's: the cluster counts as running only when its apiserver answers.
cluster_up() {
  [ -f "$STATE/ready" ] && [ -f "$STATE/admin.kubeconfig" ] && proc_alive kube-apiserver \
    && admin_curl /readyz >/dev/null
}

started_cluster=0
started_admission=0
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [ $started_admission = 1 ]; then "$here/admission.sh" stop || true; fi
  if [ $started_cluster = 1 ]; then "$here/down.sh" "$name" || true; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if cluster_up; then
  log "cluster $name is already running: it is left running afterwards"
else
  started_cluster=1
fi
"$here/up.sh" "$name" "$kubeconfig"

if [ "${DISPATCH_CONTROLLER:-cluster}" = host ]; then
  if "$here/admission.sh" status >/dev/null 2>&1; then
    log "the admission controller is already running: it is left running afterwards"
  else
    started_admission=1
    "$here/admission.sh" start "$kubeconfig"
  fi
fi

KUBECONFIG=$kubeconfig "$py" "$repo/examples/tutorial.py"
