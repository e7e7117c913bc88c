#!/usr/bin/env bash
# Build the local cluster's binaries from the Go module proxy into the cache.
# Usage: build.sh [component...]   (default: all the cluster runs; kueuectl only when named)
# A component already in the cache is not rebuilt; the cache lives outside git.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"

# Cold build times, for bench/cluster.py.
record_time() { printf '%s\t%s\t%s\n' "$1" "$2" "$(date -u +%FT%TZ)" >> "$CACHE/build-times.tsv"; }

build_kubernetes() {
  local want=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl kube-proxy) missing=() b
  for b in "${want[@]}"; do
    # KUBEBUILDER_ASSETS (or PATH, with DISPATCH_USE_PATH=1) may already provide it.
    if ! resolve_bin "$b" >/dev/null; then missing+=("$b"); fi
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  # k8s.io/kubernetes replaces its staging modules with local paths; a wrapper
  # module replaces them with their published versions instead.
  local mod="$CACHE/src/kubernetes-$KUBERNETES_VERSION" staging="v0${KUBERNETES_VERSION#v1}"
  mkdir -p "$mod"
  local kgomod
  kgomod=$(go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" | python3 -c 'import json,sys;print(json.load(sys.stdin)["GoMod"])')
  {
    echo "module local.invalid/kubebuild"
    echo "go $(awk '/^go /{print $2; exit}' "$kgomod")"
    echo "require k8s.io/kubernetes $KUBERNETES_VERSION"
    awk -v v="$staging" '$2=="=>" && $3 ~ /^\.\/staging/ {print "replace " $1 " => " $1 " " v}' "$kgomod"
  } > "$mod/go.mod"
  printf 'package kubebuild\n\nimport _ "k8s.io/kubernetes/cmd/kube-apiserver/app"\n' > "$mod/tools.go"
  (cd "$mod" && go get "k8s.io/kubernetes@$KUBERNETES_VERSION" >/dev/null && go mod tidy)
  for b in "${missing[@]}"; do
    log "building $b $KUBERNETES_VERSION"
    local t=$SECONDS
    (cd "$mod" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$KUBERNETES_VERSION" \
       -o "$(bin_path "$b").tmp" "k8s.io/kubernetes/cmd/$b") \
      || die "building $b failed"
    mv "$(bin_path "$b").tmp" "$(bin_path "$b")"
    record_time "$b" $((SECONDS - t))
  done
}

build_module_bin() { # name module@version package
  local name=$1 modver=$2 pkg=$3
  have_bin "$name" && return 0
  log "building $name ($modver)"
  local t=$SECONDS
  local mod="$CACHE/src/$name"
  mkdir -p "$mod"
  printf 'module local.invalid/%s\n\ngo 1.26.0\n' "$name" > "$mod/go.mod"
  printf 'package tools\n\nimport _ "%s"\n' "$pkg" > "$mod/tools.go"
  (cd "$mod" && go get "$modver" >/dev/null 2>&1) || die "go get $modver failed"
  (cd "$mod" && go mod tidy >/dev/null 2>&1) || die "go mod tidy for $name failed"
  (cd "$mod" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$(bin_path "$name").tmp" "$pkg") \
    || die "building $name failed"
  mv "$(bin_path "$name").tmp" "$(bin_path "$name")"
  record_time "$name" $((SECONDS - t))
}

main() {
  local what=("$@")
  [ ${#what[@]} -gt 0 ] || what=(etcd kubernetes jobset kueue trainer)
  mkdir -p "$CACHE/bin"
  for c in "${what[@]}"; do
    case $c in
      kubernetes) build_kubernetes ;;
      # etcd 3.6: the apiserver's watch progress requests need it (Debian's 3.4 lacks them).
      etcd) if ! resolve_bin etcd >/dev/null; then
              build_module_bin etcd "go.etcd.io/etcd/server/v3@$ETCD_VERSION" go.etcd.io/etcd/server/v3
            fi ;;
      kueue) build_module_bin kueue "sigs.k8s.io/kueue@$KUEUE_VERSION" sigs.k8s.io/kueue/cmd/kueue ;;
      # Kueue's own CLI, from the same pinned module; only the test of Kueue's tools needs it.
      kueuectl) build_module_bin kueuectl "sigs.k8s.io/kueue@$KUEUE_VERSION" sigs.k8s.io/kueue/cmd/kueuectl ;;
      jobset) build_module_bin jobset "sigs.k8s.io/jobset@$JOBSET_VERSION" sigs.k8s.io/jobset ;;
      trainer) build_module_bin trainer "github.com/kubeflow/trainer/v2@$TRAINER_VERSION" github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager ;;
      *) die "unknown component $c" ;;
    esac
  done
}
main "$@"
