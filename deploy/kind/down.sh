#!/usr/bin/env bash
# Delete a kind cluster made by deploy/kind/up.sh: down.sh NAME
#
# FOR MACHINES WITH DOCKER ONLY (like up.sh): it cannot run on the project's own build and
# CI machines, which have no Docker engine; there, deploy/local/down.sh undoes the local
# cluster instead.
#
# Deletes the cluster, then the kind Docker network if no other container uses it, then the
# two images up.sh built (localhost/dispatch-admission:kind, localhost/dispatch-busybox:kind).
# Running it for a cluster that does not exist is not an error.
set -euo pipefail

usage() {
  echo "usage: $0 NAME" >&2
  echo "  NAME  the kind cluster to delete (as given to deploy/kind/up.sh)" >&2
  exit 2
}
[ $# -eq 1 ] || usage
CLUSTER_NAME=$1
[[ $CLUSTER_NAME =~ ^[a-z0-9]([-a-z0-9]{0,30}[a-z0-9])?$ ]] || { echo "error: bad NAME '$CLUSTER_NAME'" >&2; usage; }

log() { printf '[kind] %s\n' "$*" >&2; }
die() { printf '[kind] error: %s\n' "$*" >&2; exit 1; }
for tool in docker kind; do
  command -v "$tool" >/dev/null || die "$tool not found on PATH (without Docker use deploy/local/down.sh)"
done
docker info >/dev/null 2>&1 || die "no Docker engine answers 'docker info'"

if kind get clusters 2>/dev/null | grep -qx "$CLUSTER_NAME"; then
  kind delete cluster --name "$CLUSTER_NAME"
else
  log "no kind cluster named $CLUSTER_NAME"
fi

# kind puts every cluster on one Docker network ("kind", or $KIND_EXPERIMENTAL_DOCKER_NETWORK);
# remove it only when nothing else is attached to it any more.
network=${KIND_EXPERIMENTAL_DOCKER_NETWORK:-kind}
if docker network inspect "$network" >/dev/null 2>&1; then
  attached=$(docker network inspect "$network" -f '{{len .Containers}}')
  if [ "$attached" = 0 ]; then
    docker network rm "$network" >/dev/null && log "removed Docker network $network"
  else
    log "Docker network $network still has $attached containers attached; kept"
  fi
fi

for image in localhost/dispatch-admission:kind localhost/dispatch-busybox:kind; do
  if docker image inspect "$image" >/dev/null 2>&1; then
    docker image rm "$image" >/dev/null && log "removed image $image"
  fi
done
log "cluster $CLUSTER_NAME deleted"
