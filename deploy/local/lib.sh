# Shared helpers for the local cluster scripts (sourced, not run).
# shellcheck shell=bash
here=${here:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)}
# shellcheck source=deploy/local/versions.env
. "$here/versions.env"
CACHE=${DISPATCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/dispatch-kubeflow}
export GOFLAGS=${GOFLAGS:--mod=mod}
log() { printf '[local] %s\n' "$*" >&2; }
die() { printf '[local] error: %s\n' "$*" >&2; exit 1; }
bin_path() { # a binary's cached path, versioned so a pin change rebuilds
  case $1 in
    kube-*|kubelet) echo "$CACHE/bin/$1-$KUBERNETES_VERSION" ;;
    kueue) echo "$CACHE/bin/kueue-$KUEUE_VERSION" ;;
    jobset) echo "$CACHE/bin/jobset-$JOBSET_VERSION" ;;
    trainer) echo "$CACHE/bin/trainer-$TRAINER_VERSION" ;;
    *) echo "$CACHE/bin/$1" ;;
  esac
}
have_bin() { [ -x "$(bin_path "$1")" ]; }
