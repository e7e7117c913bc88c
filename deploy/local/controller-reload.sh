#!/usr/bin/env bash
# Put the working tree's controller into a running local cluster: controller-reload.sh NAME
#
# Builds localhost/dispatch-admission:kind from this checkout (controller-image.sh, cached
# by its inputs), imports it into every node's containerd, applies deploy/admission again
# (as up.sh did) and restarts the Deployment
# dispatch-system/dispatch-admission, then waits for the rollout. The tag stays `kind`, so
# the restart is what makes the pods run the new image (imagePullPolicy: IfNotPresent).
# For a developer's loop and the fault suite's campaigns; up.sh does all this at start.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"
[ $# -eq 1 ] || { echo "usage: $0 NAME" >&2; exit 2; }
CLUSTER_NAME=$1
export DISPATCH_KEEP_ON_FAILURE=1  # a failed reload must not take the cluster down
cluster_dirs "$CLUSTER_NAME"
cluster_nodes "$CLUSTER_NAME"
[ -f "$STATE/ready" ] || die "cluster $CLUSTER_NAME is not up (no $STATE/ready)"
image_tar=$("$here/controller-image.sh" "$CACHE/images") \
  || die "building localhost/dispatch-admission:kind failed (its step and log are above)"
for node in "${NODES[@]}"; do
  ctr --address "$RUN/$node/containerd.sock" -n k8s.io images import --no-unpack=false \
    "$image_tar" >>"$STATE/logs/image-import-$node.log" 2>&1 \
    || die "importing the controller's image into $node failed: $STATE/logs/image-import-$node.log"
done
kctl() { "$(resolve_bin kubectl)" --kubeconfig "$STATE/admin.kubeconfig" "$@"; }
# The manifests too (RBAC, webhook, policies), as up.sh applied them: a controller may need
# what its manifests grant.
if [ -f "$STATE/admission/kustomization.yaml" ]; then
  kctl apply --server-side --force-conflicts -k "$STATE/admission" >>"$STATE/logs/install.log" 2>&1 \
    || die "kubectl apply -k deploy/admission failed: $STATE/logs/install.log"
fi
kctl -n dispatch-system rollout restart deployment/dispatch-admission >/dev/null
kctl -n dispatch-system rollout status deployment/dispatch-admission --timeout 180s >&2 \
  || die "the controller's rollout did not finish: kubectl -n dispatch-system get pods"
log "cluster $CLUSTER_NAME runs the controller of $(git -C "$here/../.." describe --always --dirty 2>/dev/null || echo this checkout)"
