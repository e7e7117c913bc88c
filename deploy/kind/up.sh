#!/usr/bin/env bash
# Stand up a kind cluster for dispatch-kubeflow: up.sh NAME KUBECONFIG
#
# FOR MACHINES WITH DOCKER ONLY. This script needs a Docker engine, kind and kubectl. It
# cannot run on the project's own build and CI machines, which have no Docker engine: it
# has never been run there, and the project's tests use deploy/local/up.sh (the same
# interface, no Docker) instead. See docs/tutorial-kind.md.
#
# It does the seed tutorial's six steps, in order:
#   1. creates a kind cluster of one control-plane node and two workers (kind.yaml), unless
#      one named NAME exists, and caps each worker's node container at 2500 MB of memory
#      (docker update; KIND_WORKER_MEMORY overrides);
#   2. installs JobSet, Kueue and Trainer at the versions in deploy/local/versions.env, from
#      manifests downloaded now from their pinned upstream releases (nothing upstream is
#      stored in this repository), configures Kueue's TrainJob integration and its
#      AdmissionGatedBy feature gate, and waits for each to roll out;
#   3. builds the admission controller image from deploy/admission/Dockerfile and the job
#      image localhost/dispatch-busybox:kind, and loads both into the nodes;
#   4. applies deploy/base.yaml;
#   5. applies the admission controller's kustomize manifests (deploy/admission);
#   6. pins the controllers to the control-plane node, so that pausing a worker
#      (docker pause NAME-worker) loses only training pods.
#
# Idempotent: run it again and it brings an existing cluster back to this state.
# Undo it with deploy/kind/down.sh NAME.
#
# Environment (all optional):
#   KIND_NODE_IMAGE        node image for a new cluster (default: your kind's default)
#   KIND_WORKER_MEMORY     memory cap of each worker node container (default 2500m)
#   KIND_ROLLOUT_TIMEOUT   how long to wait for each rollout (default 5m)
#   BUSYBOX_BASE           base of the job image (default docker.io/library/busybox:1.37)
set -Eeuo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=../local/versions.env
. "$repo/deploy/local/versions.env"

usage() {
  cat >&2 <<EOF
usage: $0 NAME KUBECONFIG
  NAME        kind cluster name (lower-case letters, digits and '-'); nodes are
              NAME-control-plane, NAME-worker and NAME-worker2
  KUBECONFIG  where to write the cluster's kubeconfig
Needs Docker, kind and kubectl. Without Docker, use deploy/local/up.sh.
EOF
  exit 2
}
[ $# -eq 2 ] || usage
CLUSTER_NAME=$1
KUBECONFIG_OUT=$2
[[ $CLUSTER_NAME =~ ^[a-z0-9]([-a-z0-9]{0,30}[a-z0-9])?$ ]] || { echo "error: bad NAME '$CLUSTER_NAME'" >&2; usage; }
[ -n "$KUBECONFIG_OUT" ] || usage

STEP="checking prerequisites"
log() { printf '[kind] %s\n' "$*" >&2; }
die() { printf '[kind] error: %s\n' "$*" >&2; exit 1; }
trap 'printf "[kind] error: step \"%s\" failed (up.sh line %s)\n" "$STEP" "$LINENO" >&2' ERR
step() { STEP=$*; log "$STEP"; }

for tool in docker kind kubectl curl git; do
  command -v "$tool" >/dev/null || die "$tool not found on PATH (this script needs Docker, kind, kubectl, curl and git; without Docker use deploy/local/up.sh)"
done
docker info >/dev/null 2>&1 || die "no Docker engine answers 'docker info' (without Docker use deploy/local/up.sh)"
[ -f "$repo/deploy/admission/Dockerfile" ] || die "deploy/admission/Dockerfile not found in $repo"
[ -f "$repo/deploy/admission/kustomization.yaml" ] || die "deploy/admission/kustomization.yaml not found in $repo"

ADMISSION_IMAGE=localhost/dispatch-admission:kind
BUSYBOX_IMAGE=localhost/dispatch-busybox:kind
BUSYBOX_BASE=${BUSYBOX_BASE:-docker.io/library/busybox:1.37}
WORKER_MEMORY=${KIND_WORKER_MEMORY:-2500m}
TIMEOUT=${KIND_ROLLOUT_TIMEOUT:-5m}
WORKERS=("$CLUSTER_NAME-worker" "$CLUSTER_NAME-worker2")

JOBSET_URL="https://github.com/kubernetes-sigs/jobset/releases/download/$JOBSET_VERSION/manifests.yaml"
KUEUE_URL="https://github.com/kubernetes-sigs/kueue/releases/download/$KUEUE_VERSION/manifests.yaml"
TRAINER_KUSTOMIZE="https://github.com/kubeflow/trainer.git/manifests/overlays/manager?ref=$TRAINER_VERSION"

k() { kubectl --kubeconfig "$KUBECONFIG_OUT" "$@"; }
rollout() { # NAMESPACE DEPLOYMENT
  k -n "$1" rollout status "deployment/$2" --timeout "$TIMEOUT"
}
fetch() { # URL OUT
  curl -fsSL --retry 3 -o "$2" "$1" || die "could not download $1"
}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# --- 1. the cluster ------------------------------------------------------------------------
step "1/6 kind cluster $CLUSTER_NAME (one control-plane, two workers)"
mkdir -p "$(dirname "$KUBECONFIG_OUT")"
if kind get clusters 2>/dev/null | grep -qx "$CLUSTER_NAME"; then
  log "cluster $CLUSTER_NAME exists; writing its kubeconfig to $KUBECONFIG_OUT"
  kind export kubeconfig --name "$CLUSTER_NAME" --kubeconfig "$KUBECONFIG_OUT"
else
  create=(create cluster --name "$CLUSTER_NAME" --config "$here/kind.yaml"
          --kubeconfig "$KUBECONFIG_OUT" --wait 5m)
  if [ -n "${KIND_NODE_IMAGE:-}" ]; then create+=(--image "$KIND_NODE_IMAGE"); fi
  kind "${create[@]}"
fi
# kind's config cannot limit a node's memory; the node container's cgroup can.
for w in "${WORKERS[@]}"; do
  docker update --memory "$WORKER_MEMORY" --memory-swap "$WORKER_MEMORY" "$w" >/dev/null
done
log "workers capped at $WORKER_MEMORY of memory each"

# --- 2. JobSet, Kueue, Trainer -------------------------------------------------------------
step "2/6 JobSet $JOBSET_VERSION"
fetch "$JOBSET_URL" "$work/jobset.yaml"
k apply --server-side --force-conflicts -f "$work/jobset.yaml" >/dev/null
rollout jobset-system jobset-controller-manager

step "2/6 Kueue $KUEUE_VERSION"
fetch "$KUEUE_URL" "$work/kueue.yaml"
k apply --server-side --force-conflicts -f "$work/kueue.yaml" >/dev/null
rollout kueue-system kueue-controller-manager

step "2/6 Trainer $TRAINER_VERSION"
# Trainer's manager overlay also bundles a JobSet install (into kubeflow-system); JobSet is
# installed above from its own release, so its objects (label app.kubernetes.io/name=jobset)
# are left out here.
k apply --server-side --force-conflicts -l 'app.kubernetes.io/name!=jobset' \
  -k "$TRAINER_KUSTOMIZE" >/dev/null
rollout kubeflow-system kubeflow-trainer-controller-manager

step "2/6 Kueue configuration: TrainJob integration and AdmissionGatedBy"
# Kueue reads its Configuration from ConfigMap kueue-manager-config once, at start. This one
# enables the integrations dispatch needs (the TrainJob framework needs the JobSet and Trainer
# CRDs, installed above) and turns AdmissionGatedBy on explicitly (beta and on by default
# from Kueue v0.19; the configuration's featureGates map, not the --feature-gates flag).
cat > "$work/controller_manager_config.yaml" <<'EOF'
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
health:
  healthProbeBindAddress: :8081
metrics:
  bindAddress: :8443
webhook:
  port: 9443
leaderElection:
  leaderElect: true
  resourceName: c1f6bfd2.kueue.x-k8s.io
clientConnection:
  qps: 300
  burst: 500
integrations:
  frameworks:
  - batch/job
  - jobset.x-k8s.io/jobset
  - trainer.kubeflow.org/trainjob
featureGates:
  AdmissionGatedBy: true
EOF
k -n kueue-system create configmap kueue-manager-config \
  --from-file=controller_manager_config.yaml="$work/controller_manager_config.yaml" \
  --dry-run=client -o yaml \
  | k apply --server-side --force-conflicts --field-manager dispatch-kind -f - >/dev/null
# A hash of the configuration on the pod template restarts Kueue only when it changed.
config_hash=$(sha256sum "$work/controller_manager_config.yaml" | cut -c1-16)
k -n kueue-system patch deployment kueue-controller-manager --type merge \
  -p "{\"spec\":{\"template\":{\"metadata\":{\"annotations\":{\"dispatch.phpboyscout.uk/kueue-config\":\"$config_hash\"}}}}}" >/dev/null
rollout kueue-system kueue-controller-manager

# --- 3. images -----------------------------------------------------------------------------
step "3/6 images $ADMISSION_IMAGE and $BUSYBOX_IMAGE"
docker build -q -t "$ADMISSION_IMAGE" -f "$repo/deploy/admission/Dockerfile" "$repo" >/dev/null
printf 'FROM %s\n' "$BUSYBOX_BASE" | docker build -q -t "$BUSYBOX_IMAGE" - >/dev/null
kind load docker-image --name "$CLUSTER_NAME" "$ADMISSION_IMAGE" "$BUSYBOX_IMAGE"

# --- 4. base.yaml --------------------------------------------------------------------------
step "4/6 deploy/base.yaml"
deadline=$((SECONDS + 120))
# Kueue's and Trainer's webhooks answer a moment after their rollouts report ready.
until k apply --server-side -f "$repo/deploy/base.yaml" >"$work/base.log" 2>&1; do
  if [ $SECONDS -ge $deadline ]; then cat "$work/base.log" >&2; die "applying deploy/base.yaml failed"; fi
  sleep 2
done

# --- 5. the admission controller -----------------------------------------------------------
step "5/6 admission controller (deploy/admission)"
k apply -k "$repo/deploy/admission" >/dev/null
image=$(k -n dispatch-system get deployment dispatch-admission -o jsonpath='{.spec.template.spec.containers[0].image}')
if [ "$image" != "$ADMISSION_IMAGE" ]; then
  # Run the image built and loaded above, never a pulled one.
  k -n dispatch-system patch deployment dispatch-admission --type json -p "[
    {\"op\": \"replace\", \"path\": \"/spec/template/spec/containers/0/image\", \"value\": \"$ADMISSION_IMAGE\"},
    {\"op\": \"add\", \"path\": \"/spec/template/spec/containers/0/imagePullPolicy\", \"value\": \"IfNotPresent\"}]" >/dev/null
fi

# --- 6. controllers on the control-plane node ----------------------------------------------
step "6/6 pinning the controllers to $CLUSTER_NAME-control-plane"
pin='{"spec":{"template":{"spec":{
  "nodeSelector":{"node-role.kubernetes.io/control-plane":""},
  "tolerations":[{"key":"node-role.kubernetes.io/control-plane","operator":"Exists","effect":"NoSchedule"},
                 {"key":"CriticalAddonsOnly","operator":"Exists"}]}}}}'
pinned=(jobset-system/jobset-controller-manager kueue-system/kueue-controller-manager
        kubeflow-system/kubeflow-trainer-controller-manager dispatch-system/dispatch-admission
        kube-system/coredns local-path-storage/local-path-provisioner)
for nd in "${pinned[@]}"; do
  ns=${nd%%/*} deploy=${nd#*/}
  # coredns and local-path-provisioner are kind's own; skip either if this kind lacks it.
  k -n "$ns" get deployment "$deploy" >/dev/null 2>&1 || continue
  k -n "$ns" patch deployment "$deploy" --type strategic -p "$pin" >/dev/null
done
for nd in "${pinned[@]}"; do
  ns=${nd%%/*} deploy=${nd#*/}
  k -n "$ns" get deployment "$deploy" >/dev/null 2>&1 || continue
  rollout "$ns" "$deploy"
done

STEP="waiting for the admission controller's Lease and AdmissionCheck"
deadline=$((SECONDS + 120))
holder() { k -n dispatch-system get lease dispatch-admission -o jsonpath='{.spec.holderIdentity}' 2>/dev/null || true; }
until [ -n "$(holder)" ]; do
  [ $SECONDS -lt $deadline ] || die "no holder of Lease dispatch-system/dispatch-admission after 120s: kubectl -n dispatch-system logs deploy/dispatch-admission"
  sleep 2
done
k wait --for condition=Active --timeout 120s admissioncheck/dispatch-admission >/dev/null

trap - ERR
log "cluster $CLUSTER_NAME is ready; export KUBECONFIG=$KUBECONFIG_OUT"
