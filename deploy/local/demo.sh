#!/usr/bin/env bash
# The README's main command: demo.sh NAME KUBECONFIG
# Builds and starts the local cluster and the admission controller, runs the seed's
# tutorial (examples/tutorial.py) against them, and stops what it started.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"
[ $# -eq 2 ] || { echo "usage: $0 NAME KUBECONFIG" >&2; exit 2; }
name=$1 kubeconfig=$2
py=${PYTHON:-$repo/.venv/bin/python}
cluster_dirs "$name"

started_cluster=0
if [ ! -f "$STATE/ready" ]; then started_cluster=1; fi
cleanup() {
  "$here/admission.sh" stop "$kubeconfig" || true
  if [ $started_cluster = 1 ]; then "$here/down.sh" "$name"; fi
}
trap cleanup EXIT
"$here/up.sh" "$name" "$kubeconfig"
"$here/admission.sh" start "$kubeconfig"
KUBECONFIG=$kubeconfig "$py" "$repo/examples/tutorial.py"
