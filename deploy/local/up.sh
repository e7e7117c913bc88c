#!/usr/bin/env bash
# Start a local Kubernetes cluster with no Docker: up.sh NAME KUBECONFIG
#
# The nodes of deploy/kind/kind.yaml: NAME-control-plane (tainted and labelled as kind's)
# and the workers NAME-worker and NAME-worker2. Each node is a network namespace joined by
# a veth to one bridge (kind's Docker network), holding that node's kubelet, containerd
# (with runc) and kube-proxy. Real etcd, kube-apiserver, kube-controller-manager and
# kube-scheduler run on the host, listening on loopback and the bridge only; JobSet, Kueue
# and Trainer controllers with their CRDs, RBAC and webhooks; then deploy/base.yaml.
# Builds what is missing first (cached outside git). Diagram: docs/local-cluster.md.
# Idempotent: with the cluster running it rewrites KUBECONFIG and returns.
# Undo everything with down.sh NAME.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"

usage() {
  cat >&2 <<EOF
usage: $0 NAME KUBECONFIG
  NAME        cluster name (letters, digits and '-', at most 20 characters); nodes are
              NAME-control-plane, NAME-worker and NAME-worker2
  KUBECONFIG  where to write the admin kubeconfig (down.sh removes it while unchanged)
EOF
  exit 2
}
[ $# -eq 2 ] || usage
CLUSTER_NAME=$1
KUBECONFIG_OUT=$2
[[ $CLUSTER_NAME =~ ^[a-z0-9]([-a-z0-9]{0,18}[a-z0-9])?$ ]] || { echo "error: bad NAME '$CLUSTER_NAME'" >&2; usage; }
[ -n "$KUBECONFIG_OUT" ] || usage
# The API server's profiling only when asked (bench/scale.py --apiserver-profile).
case ${APISERVER_PROFILING:=false} in
  true | false) ;;
  *) die "APISERVER_PROFILING=$APISERVER_PROFILING: say true or false" ;;
esac
[ "$(id -u)" = 0 ] || die "must run as root: it starts kubelets, mounts, bridges and iptables chains"
# Kueue's Configuration as a MultiKueue manager's (multikueue.sh sets both for its manager;
# unset, every cluster's is the same): KUEUE_FRAMEWORKS, comma-separated, replaces the
# integrations; KUEUE_MULTIKUEUE_WORKER_LOST_TIMEOUT adds a multiKueue section with it.
kueue_frameworks=$(kueue_frameworks_yaml KUEUE_FRAMEWORKS "${KUEUE_FRAMEWORKS:-$KUEUE_LOCAL_FRAMEWORKS}") || exit 1
kueue_multikueue=
if [ -n "${KUEUE_MULTIKUEUE_WORKER_LOST_TIMEOUT:-}" ]; then
  is_duration "$KUEUE_MULTIKUEUE_WORKER_LOST_TIMEOUT" \
    || die "KUEUE_MULTIKUEUE_WORKER_LOST_TIMEOUT '$KUEUE_MULTIKUEUE_WORKER_LOST_TIMEOUT' is not a duration such as 2m"
  kueue_multikueue="multiKueue: {workerLostTimeout: $KUEUE_MULTIKUEUE_WORKER_LOST_TIMEOUT}"
fi
cluster_dirs "$CLUSTER_NAME"
cluster_nodes "$CLUSTER_NAME"
BRIDGE=$(bridge_name "$CLUSTER_NAME" br)
export PATH="$CACHE/bin:$PATH"

write_kubeconfig() { # OUT USER CERT KEY
  local out=$1 user=$2 crt=$3 key=$4
  mkdir -p "$(dirname "$out")"
  cat > "$out.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: $CLUSTER_NAME
  cluster:
    server: https://$HOST_IP:$APISERVER_PORT
    certificate-authority-data: $(base64 -w0 < "$STATE/pki/ca.crt")
users:
- name: $user
  user:
    client-certificate-data: $(base64 -w0 < "$crt")
    client-key-data: $(base64 -w0 < "$key")
contexts:
- name: $CLUSTER_NAME
  context: {cluster: $CLUSTER_NAME, user: $user}
current-context: $CLUSTER_NAME
EOF
  chmod 600 "$out.tmp"
  mv "$out.tmp" "$out"
}

kctl() { "$(resolve_bin kubectl)" --kubeconfig "$STATE/admin.kubeconfig" "$@"; }

already_up() {
  [ -f "$STATE/admin.kubeconfig" ] && proc_alive kube-apiserver && admin_curl /readyz >/dev/null \
    && [ -f "$STATE/ready" ]
}

hand_out_kubeconfig() { # the admin kubeconfig at the caller's path, recorded for down.sh
  cp "$STATE/admin.kubeconfig" "$KUBECONFIG_OUT.tmp" && mv "$KUBECONFIG_OUT.tmp" "$KUBECONFIG_OUT"
  local path
  path=$(realpath -m -- "$KUBECONFIG_OUT")
  grep -qxF -- "$path" "$STATE/kubeconfigs" 2>/dev/null || echo "$path" >> "$STATE/kubeconfigs"
}

if already_up; then
  hand_out_kubeconfig
  log "cluster $CLUSTER_NAME is already up; kubeconfig written to $KUBECONFIG_OUT"
  exit 0
fi
if [ -d "$STATE" ]; then
  log "cluster $CLUSTER_NAME is half up; taking it down first"
  "$here/down.sh" "$CLUSTER_NAME"
fi

t0=$SECONDS
"$here/deps.sh"
"$here/build.sh"
# The controller's image first: a failed build (no network, a pip error) costs no cluster.
if [ "${DISPATCH_CONTROLLER:-cluster}" = cluster ]; then
  log "building the admission controller's image (no Docker: controller-image.sh)"
  image_tar=$("$here/controller-image.sh" "$CACHE/images") \
    || die "building localhost/dispatch-admission:kind failed (its step and log are above); nothing was started"
fi

for v in ETCD_PORT APISERVER_PORT KCM_PORT SCHED_PORT JOBSET_WEBHOOK_PORT KUEUE_WEBHOOK_PORT \
         TRAINER_WEBHOOK_PORT JOBSET_HEALTH_PORT KUEUE_HEALTH_PORT TRAINER_HEALTH_PORT \
         TRAINER_STATUS_PORT; do
  comp=${v%_PORT}; comp=${comp,,}; comp=${comp//_/ }
  port_free "${!v}" || die "$comp: port 127.0.0.1:${!v} is in use: stop what holds it, or set $v to another port"
done
ip link show "$BRIDGE" >/dev/null 2>&1 && die "bridge $BRIDGE exists: run down.sh $CLUSTER_NAME"
ip -4 -o addr show | grep -q " $HOST_IP/" \
  && die "address $HOST_IP is in use on this machine: set NODE_SUBNET_PREFIX to another 10.x"
for node in "${NODES[@]}"; do
  [ -e "/run/netns/$(node_netns "$node")" ] && die "network namespace $(node_netns "$node") exists: run down.sh $CLUSTER_NAME"
done

mkdir -p "$STATE" "$RUN" "$STATE/logs"
# --- what the machine was like before: down.sh puts it back --------------------------------
if [ ! -f "$STATE_ROOT/machine.before" ]; then
  mkdir -p "$STATE_ROOT"
  {
    for s in vm.overcommit_memory kernel.panic kernel.panic_on_oops; do
      echo "sysctl $s $(sysctl -n "$s")"
    done
    for d in /var/lib/kubelet /var/lib/cni /var/log/containers /var/log/pods /var/run/netns /etc/cni /opt/cni /etc/kueue; do
      [ -e "$d" ] && echo "existed $d"
    done
  } > "$STATE_ROOT/machine.before.tmp"
  mv "$STATE_ROOT/machine.before.tmp" "$STATE_ROOT/machine.before"
fi

# --- images --------------------------------------------------------------------------------
mkdir -p "$CACHE/images"
if [ ! -f "$CACHE/images/pause.tar" ] || [ "$here/pause.c" -nt "$CACHE/images/pause.tar" ]; then
  gcc -static -O2 -o "$CACHE/images/pause" "$here/pause.c" || fail images "" "building the pause binary failed (needs gcc and libc6-dev)"
  python3 "$here/mkimage.py" pause "$CACHE/images/pause.tar" "$CACHE/images/pause"
fi
if [ ! -f "$CACHE/images/busybox.tar" ] || [ "$here/mkimage.py" -nt "$CACHE/images/busybox.tar" ]; then
  python3 "$here/mkimage.py" busybox "$CACHE/images/busybox.tar"
fi

# --- certificates ----------------------------------------------------------------------------
node_args=()
for i in "${!NODES[@]}"; do node_args+=("${NODES[$i]}=$(node_ip "$i")"); done
"$here/pki.sh" "$STATE/pki" "$CLUSTER_NAME" "$HOST_IP" "${node_args[@]}"
P=$STATE/pki
write_kubeconfig "$STATE/admin.kubeconfig" admin "$P/admin.crt" "$P/admin.key"
write_kubeconfig "$STATE/controller-manager.kubeconfig" kcm "$P/controller-manager.crt" "$P/controller-manager.key"
write_kubeconfig "$STATE/scheduler.kubeconfig" sched "$P/scheduler.crt" "$P/scheduler.key"
for c in jobset kueue trainer; do write_kubeconfig "$STATE/$c.kubeconfig" "$c" "$P/$c.crt" "$P/$c.key"; done
write_kubeconfig "$STATE/kube-proxy.kubeconfig" kube-proxy "$P/kube-proxy.crt" "$P/kube-proxy.key"

# --- the nodes' network ------------------------------------------------------------------------
# One bridge stands for kind's Docker network: the host holds HOST_IP on it, each node's
# namespace a veth end. Nothing is forwarded or masqueraded by the host: the nodes' namespaces
# route pods to each other over the bridge, and the host reaches pods (webhooks) by a route
# per node. No default route anywhere: traffic stays inside the machine.
log "creating the nodes' network ($HOST_IP on bridge $BRIDGE)"
ip link add "$BRIDGE" type bridge
ip addr add "$HOST_IP/24" dev "$BRIDGE"
ip link set "$BRIDGE" up
for i in "${!NODES[@]}"; do
  node=${NODES[$i]} ns=$(node_netns "${NODES[$i]}") veth=$(bridge_name "$CLUSTER_NAME" "$i")
  ip netns add "$ns"
  ip link add "$veth" type veth peer name eth0 netns "$ns"
  ip link set "$veth" master "$BRIDGE" up
  in_node "$node" ip link set lo up
  in_node "$node" ip addr add "$(node_ip "$i")/24" dev eth0
  in_node "$node" ip link set eth0 up
  # The node routes for its pods (as a kind node does); its own settings, not the host's.
  in_node "$node" sysctl -qw net.ipv4.ip_forward=1
  for j in "${!NODES[@]}"; do
    [ "$j" = "$i" ] && continue
    in_node "$node" ip route add "$(pod_prefix "$j").0/24" via "$(node_ip "$j")"
  done
  ip route add "$(pod_prefix "$i").0/24" via "$(node_ip "$i")" dev "$BRIDGE"
done

# --- etcd ------------------------------------------------------------------------------------
ETCD=$(resolve_bin etcd) || fail etcd "" "no etcd binary (build.sh builds it; or set KUBEBUILDER_ASSETS)"
log "starting etcd"
start_proc etcd "$STATE/logs/etcd.log" "$ETCD" --name "$CLUSTER_NAME" --data-dir "$STATE/etcd" \
  --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" \
  --initial-advertise-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" \
  --initial-cluster "$CLUSTER_NAME=http://127.0.0.1:$((ETCD_PORT + 1))" \
  --quota-backend-bytes 4294967296 --snapshot-count 10000
wait_until etcd "$STATE/logs/etcd.log" 30 curl -sf "http://127.0.0.1:$ETCD_PORT/health"

# --- kube-apiserver ----------------------------------------------------------------------------
log "starting kube-apiserver"
# Its command line is kept (NUL-separated) so apiserver.sh can restart it the same way.
# The host runs no kube-proxy, so the API server reaches Services (the admission webhook) at
# their endpoints' pod addresses (--enable-aggregator-routing). Pods of a lost node are
# evicted 10 s after it goes NotReady (kind's default is 300 s) so that node faults show fast.
# Admission webhooks get the API server's client certificate (a CA of its own, pki.sh):
# dispatch-admission requires it (mutual TLS, docs/install-admission.md). By name for the
# Service; '*' for the host replicas' loopback URLs, whose ports vary (other webhooks here
# ask for no client certificate, so they are sent none).
{
  printf 'apiVersion: v1\nkind: Config\nusers:\n'
  for n in dispatch-admission.dispatch-system.svc dispatch-admission.dispatch-system.svc:443 '*'; do
    printf -- "- name: '%s'\n  user: {client-certificate: %s, client-key: %s}\n" "$n" \
      "$P/apiserver-webhook-client.crt" "$P/apiserver-webhook-client.key"
  done
} > "$STATE/webhook-client.kubeconfig"
{
  printf 'apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n'
  for plugin in MutatingAdmissionWebhook ValidatingAdmissionWebhook; do
    printf -- "- name: %s\n  configuration:\n    apiVersion: apiserver.config.k8s.io/v1\n" "$plugin"
    printf -- "    kind: WebhookAdmissionConfiguration\n    kubeConfigFile: %s\n" \
      "$STATE/webhook-client.kubeconfig"
  done
} > "$STATE/admission-control.yaml"
# shellcheck disable=SC2054  # the commas are inside flag values (Node,RBAC)
apiserver_cmd=("$(resolve_bin kube-apiserver)" \
  --etcd-servers "http://127.0.0.1:$ETCD_PORT" --etcd-prefix "/dispatch-local" \
  --bind-address "$HOST_IP" --secure-port "$APISERVER_PORT" --advertise-address "$HOST_IP" \
  --service-cluster-ip-range 10.96.0.0/16 \
  --client-ca-file "$P/ca.crt" --tls-cert-file "$P/apiserver.crt" --tls-private-key-file "$P/apiserver.key" \
  --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
  --admission-control-config-file "$STATE/admission-control.yaml" \
  --service-account-issuer https://kubernetes.default.svc --service-account-key-file "$P/sa.pub" \
  --service-account-signing-key-file "$P/sa.key" --api-audiences https://kubernetes.default.svc \
  --kubelet-client-certificate "$P/apiserver-kubelet-client.crt" \
  --kubelet-client-key "$P/apiserver-kubelet-client.key" \
  --kubelet-preferred-address-types InternalIP,Hostname \
  --allow-privileged=true --profiling="$APISERVER_PROFILING" --v 1 \
  --enable-aggregator-routing=true \
  --default-not-ready-toleration-seconds 10 --default-unreachable-toleration-seconds 10 \
  --feature-gates PodLogsQuerySplitStreams=true)
printf '%s\0' "${apiserver_cmd[@]}" > "$STATE/kube-apiserver.cmdline"
start_proc kube-apiserver "$STATE/logs/kube-apiserver.log" "${apiserver_cmd[@]}"
wait_until kube-apiserver "$STATE/logs/kube-apiserver.log" 90 admin_curl /readyz

# --- controller-manager and scheduler -----------------------------------------------------------
log "starting kube-controller-manager and kube-scheduler"
start_proc kube-controller-manager "$STATE/logs/kube-controller-manager.log" "$(resolve_bin kube-controller-manager)" \
  --kubeconfig "$STATE/controller-manager.kubeconfig" \
  --authentication-kubeconfig "$STATE/controller-manager.kubeconfig" \
  --authorization-kubeconfig "$STATE/controller-manager.kubeconfig" \
  --bind-address 127.0.0.1 --secure-port "$KCM_PORT" --leader-elect=false \
  --controllers garbage-collector-controller,job-controller,deployment-controller,replicaset-controller,endpoints-controller,endpointslice-controller,namespace-controller,serviceaccount-controller,serviceaccount-token-controller,clusterrole-aggregation-controller,node-lifecycle-controller,root-ca-certificate-publisher-controller,pod-garbage-collector-controller,taint-eviction-controller \
  --use-service-account-credentials --root-ca-file "$P/ca.crt" \
  --service-account-private-key-file "$P/sa.key" \
  --node-monitor-grace-period 20s --v 1
start_proc kube-scheduler "$STATE/logs/kube-scheduler.log" "$(resolve_bin kube-scheduler)" \
  --kubeconfig "$STATE/scheduler.kubeconfig" \
  --authentication-kubeconfig "$STATE/scheduler.kubeconfig" \
  --authorization-kubeconfig "$STATE/scheduler.kubeconfig" \
  --bind-address 127.0.0.1 --secure-port "$SCHED_PORT" --leader-elect=false --v 1
wait_until kube-controller-manager "$STATE/logs/kube-controller-manager.log" 60 \
  curl -skf "https://127.0.0.1:$KCM_PORT/healthz"
wait_until kube-scheduler "$STATE/logs/kube-scheduler.log" 60 curl -skf "https://127.0.0.1:$SCHED_PORT/healthz"

# --- nodes ------------------------------------------------------------------------------------
import_pids=()
mem_total_mb=$(awk '/MemTotal/ {print int($2/1024)}' /proc/meminfo)
reserved_mb=$(( mem_total_mb > NODE_MEMORY_MB ? mem_total_mb - NODE_MEMORY_MB : 0 ))
for i in "${!NODES[@]}"; do
  node=${NODES[$i]} ip=$(node_ip "$i") pods=$(pod_prefix "$i")
  N=$STATE/nodes/$node R=$RUN/$node
  mkdir -p "$N/containerd" "$N/kubelet" "$N/cni/net.d" "$N/cni/cache" "$N/cni/ipam" "$N/pod-logs" "$R"
  log "starting node $node ($ip, pods $pods.0/24, network namespace $(node_netns "$node"))"
  # Pods on a bridge inside the node's namespace, the node their gateway; no masquerade.
  cat > "$N/cni/net.d/10-dispatch.conflist" <<EOF
{"cniVersion": "0.4.0", "name": "dispatch-$node", "plugins": [
  {"type": "bridge", "bridge": "pods0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "dataDir": "$N/cni/ipam", "routes": [{"dst": "0.0.0.0/0"}],
            "ranges": [[{"subnet": "$pods.0/24", "gateway": "$pods.1", "rangeStart": "$pods.10", "rangeEnd": "$pods.250"}]]}},
  {"type": "loopback"}]}
EOF
  cat > "$N/containerd.toml" <<EOF
version = 2
root = "$N/containerd/root"
state = "$R/containerd"
[grpc]
  address = "$R/containerd.sock"
[ttrpc]
  address = "$R/containerd.sock.ttrpc"
[debug]
  level = "warn"
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/pause:dispatch"
  # No CAP_SYS_RESOURCE here: without this every sandbox fails to start.
  restrict_oom_score_adj = true
  disable_apparmor = true
  # Pods' network namespaces under this node's state directory, not the machine's
  # /run/netns: down.sh of one cluster then never touches another's pods.
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$N/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
[plugins."io.containerd.internal.v1.opt"]
  path = "$N/containerd/opt"
EOF
  start_proc "containerd-$node" "$STATE/logs/containerd-$node.log" \
    nsenter "--net=/run/netns/$(node_netns "$node")" -- containerd --config "$N/containerd.toml"
  wait_until "containerd-$node" "$STATE/logs/containerd-$node.log" 30 \
    ctr --address "$R/containerd.sock" version
  for img in pause busybox; do
    ctr --address "$R/containerd.sock" -n k8s.io images import --no-unpack=false \
      "$CACHE/images/$img.tar" >>"$STATE/logs/containerd-$node.log" 2>&1 \
      || fail "containerd-$node" "$STATE/logs/containerd-$node.log" "importing the $img image failed"
  done
  # The controller's image (about 200 MB) is unpacked in the background while the rest
  # starts; the deployment below waits for every node's import.
  if [ -n "${image_tar:-}" ]; then
    ctr --address "$R/containerd.sock" -n k8s.io images import --no-unpack=false \
      "$image_tar" >>"$STATE/logs/image-import-$node.log" 2>&1 &
    import_pids+=("$node=$!")
  fi
  # The node's cgroup root, in every v1 hierarchy, capped like a kind node container.
  for ctl in /sys/fs/cgroup/*/; do
    [ -f "${ctl}cgroup.procs" ] || continue
    mkdir -p "${ctl}dispatch-$node"
    if [ -f "${ctl}cpuset.cpus" ]; then
      cat "${ctl}cpuset.cpus" > "${ctl}dispatch-$node/cpuset.cpus"
      cat "${ctl}cpuset.mems" > "${ctl}dispatch-$node/cpuset.mems"
    fi
  done
  [ -d "/sys/fs/cgroup/memory/dispatch-$node" ] && echo $((NODE_MEMORY_MB * 1024 * 1024)) \
    > "/sys/fs/cgroup/memory/dispatch-$node/memory.limit_in_bytes"
  write_kubeconfig "$N/kubelet.kubeconfig" "$node" "$P/node-$node.crt" "$P/node-$node.key"
  cat > "$N/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $ip
port: 10250
readOnlyPort: 0
healthzBindAddress: $ip
healthzPort: 10248
tlsCertFile: $P/kubelet-$node.crt
tlsPrivateKeyFile: $P/kubelet-$node.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $P/ca.crt}
authorization: {mode: AlwaysAllow}
containerRuntimeEndpoint: unix://$R/containerd.sock
cgroupDriver: cgroupfs
cgroupRoot: /dispatch-$node
cgroupsPerQOS: true
# This machine has cgroup v1 and no swap accounting.
failCgroupV1: false
failSwapOn: false
podLogsDir: $N/pod-logs
resolvConf: ""
staticPodPath: ""
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%"}
# Offer pods NODE_MEMORY_MB like the seed's memory-capped node containers.
systemReserved: {memory: "${reserved_mb}Mi"}
enforceNodeAllocatable: [pods]
maxPods: 50
nodeStatusUpdateFrequency: 4s
syncFrequency: 10s
shutdownGracePeriod: 0s
# Alpha in 1.37: lets a client read a container's stdout and stderr apart.
featureGates: {PodLogsQuerySplitStreams: true}
EOF
  taints=()
  # kind's control-plane node: no ordinary pod lands there (its role label follows below).
  [ "$i" = 0 ] && taints=(--register-with-taints "node-role.kubernetes.io/control-plane=:NoSchedule")
  # The kubelet's command line is kept (NUL-separated) so kubelet.sh restarts it the same way.
  kubelet_cmd=(nsenter "--net=/run/netns/$(node_netns "$node")" -- "$(resolve_bin kubelet)" \
    --config "$N/kubelet.yaml" --kubeconfig "$N/kubelet.kubeconfig" \
    --root-dir "$N/kubelet" --cert-dir "$N/kubelet/pki" --hostname-override "$node" \
    --node-ip "$ip" --node-labels "dispatch.phpboyscout.uk/local-node=true" "${taints[@]}" --v 1)
  printf '%s\0' "${kubelet_cmd[@]}" > "$N/kubelet.cmdline"
  start_proc "kubelet-$node" "$STATE/logs/kubelet-$node.log" "${kubelet_cmd[@]}"
  # One kube-proxy per node, in its namespace: the `kubernetes` Service and every other
  # ClusterIP work from pods. It leaves the machine's conntrack settings alone (zeros).
  write_kubeconfig "$N/kube-proxy.kubeconfig" kube-proxy "$P/kube-proxy.crt" "$P/kube-proxy.key"
  start_proc "kube-proxy-$node" "$STATE/logs/kube-proxy-$node.log" \
    nsenter "--net=/run/netns/$(node_netns "$node")" -- "$(resolve_bin kube-proxy)" \
    --kubeconfig "$N/kube-proxy.kubeconfig" --hostname-override "$node" --proxy-mode iptables \
    --cluster-cidr "$NODE_SUBNET_PREFIX.0.0/16" --bind-address "$ip" \
    --metrics-bind-address "$ip:10249" --healthz-bind-address "$ip:10256" \
    --conntrack-max-per-core 0 --conntrack-min 0 \
    --conntrack-tcp-timeout-established 0 --conntrack-tcp-timeout-close-wait 0 --v 1
done
for node in "${NODES[@]}"; do
  wait_until "kubelet-$node" "$STATE/logs/kubelet-$node.log" 90 \
    sh -c "'$(resolve_bin kubectl)' --kubeconfig '$STATE/admin.kubeconfig' get node '$node' -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -qx True"
done
# A kubelet may not give itself a role label (NodeRestriction); kind labels it as kubeadm does.
kctl label --overwrite node "${NODES[0]}" node-role.kubernetes.io/control-plane= \
  node.kubernetes.io/exclude-from-external-load-balancers= >>"$STATE/logs/install.log" 2>&1 \
  || fail "${NODES[0]}" "$STATE/logs/install.log" "labelling the control-plane node failed"
for i in "${!NODES[@]}"; do
  wait_until "kube-proxy-${NODES[$i]}" "$STATE/logs/kube-proxy-${NODES[$i]}.log" 60 \
    curl -sf "http://$(node_ip "$i"):10256/healthz"
done

# --- JobSet, Kueue and Trainer ------------------------------------------------------------------
log "installing JobSet $JOBSET_VERSION, Kueue $KUEUE_VERSION and Trainer $TRAINER_VERSION"
M=$STATE/manifests
python3 -c 'import yaml' 2>/dev/null || fail manifests "" "python3 lacks PyYAML (run 'make venv' or apt-get install python3-yaml)"
python3 "$here/manifests.py" "$M" "$P/ca.crt" \
  "jobset=$(module_dir "sigs.k8s.io/jobset@$JOBSET_VERSION"):$JOBSET_WEBHOOK_PORT" \
  "kueue=$(module_dir "sigs.k8s.io/kueue@$KUEUE_VERSION"):$KUEUE_WEBHOOK_PORT" \
  "trainer=$(module_dir "github.com/kubeflow/trainer/v2@$TRAINER_VERSION"):$TRAINER_WEBHOOK_PORT" \
  || fail manifests "" "could not read the upstream manifests from the module cache"
for c in jobset kueue trainer; do
  kctl apply --server-side --force-conflicts -f "$M/$c-crds.yaml" -f "$M/$c-rbac.yaml" >>"$STATE/logs/install.log" 2>&1 \
    || fail "$c" "$STATE/logs/install.log" "applying its CRDs and RBAC failed"
done

kctl wait --for condition=established --timeout 60s crd --all >>"$STATE/logs/install.log" 2>&1 \
  || fail crds "$STATE/logs/install.log" "CRDs not established"

C=$STATE/controllers
mkdir -p "$C/certs"
cp "$P/webhook.crt" "$C/certs/tls.crt"; cp "$P/webhook.key" "$C/certs/tls.key"
cat > "$C/jobset.yaml" <<EOF
apiVersion: config.jobset.x-k8s.io/v1alpha1
kind: Configuration
leaderElection: {leaderElect: false}
internalCertManagement: {enable: false}
webhook: {port: $JOBSET_WEBHOOK_PORT, host: 127.0.0.1, certDir: $C/certs}
metrics: {bindAddress: "0"}
health: {healthProbeBindAddress: "127.0.0.1:$JOBSET_HEALTH_PORT"}
EOF
cat > "$C/kueue.yaml" <<EOF
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: kueue-system
leaderElection: {leaderElect: false}
internalCertManagement: {enable: false}
webhook: {port: $KUEUE_WEBHOOK_PORT, host: 127.0.0.1, certDir: $C/certs}
metrics: {bindAddress: "0"}
health: {healthProbeBindAddress: "127.0.0.1:$KUEUE_HEALTH_PORT"}
integrations:
  frameworks: [$kueue_frameworks]
# VisibilityOnDemand serves an aggregated API from a fixed cert path (/visibility); not used here.
featureGates: {AdmissionGatedBy: true, VisibilityOnDemand: false}
EOF
if [ -n "$kueue_multikueue" ]; then echo "$kueue_multikueue" >> "$C/kueue.yaml"; fi
cat > "$C/trainer.yaml" <<EOF
apiVersion: config.trainer.kubeflow.org/v1alpha1
kind: Configuration
leaderElection: {leaderElect: false}
certManagement: {enable: false}
webhook: {port: $TRAINER_WEBHOOK_PORT, host: 127.0.0.1}
metrics: {bindAddress: "0"}
health: {healthProbeBindAddress: "127.0.0.1:$TRAINER_HEALTH_PORT"}
statusServer: {port: $TRAINER_STATUS_PORT}
EOF
# Kueue reads its metrics serving certificate from this fixed path when it does not manage
# certificates itself (cmd/kueue/main.go); down.sh removes it again.
mkdir -p /etc/kueue/metrics/certs
cp "$C/certs/tls.crt" "$C/certs/tls.key" /etc/kueue/metrics/certs/
for c in jobset kueue trainer; do
  # TMPDIR: where controller-runtime looks for serving certificates by default.
  mkdir -p "$C/$c-tmp/k8s-webhook-server"
  ln -sfn "$C/certs" "$C/$c-tmp/k8s-webhook-server/serving-certs"
  start_proc "$c" "$STATE/logs/$c.log" env KUBECONFIG="$STATE/$c.kubeconfig" TMPDIR="$C/$c-tmp" \
    "$(resolve_bin "$c")" --config "$C/$c.yaml"
done
wait_until jobset "$STATE/logs/jobset.log" 90 curl -sf "http://127.0.0.1:$JOBSET_HEALTH_PORT/readyz"
wait_until kueue "$STATE/logs/kueue.log" 90 curl -sf "http://127.0.0.1:$KUEUE_HEALTH_PORT/readyz"
wait_until trainer "$STATE/logs/trainer.log" 90 curl -sf "http://127.0.0.1:$TRAINER_HEALTH_PORT/readyz"
for c in jobset kueue trainer; do
  kctl apply --server-side --force-conflicts -f "$M/$c-webhooks.yaml" >>"$STATE/logs/install.log" 2>&1 \
    || fail "$c" "$STATE/logs/install.log" "applying its webhook configurations failed"
done

# --- the objects dispatch needs -------------------------------------------------------------------
log "applying deploy/base.yaml"
deadline=$((SECONDS + 60))
until kctl apply --server-side -f "$repo/deploy/base.yaml" >>"$STATE/logs/install.log" 2>&1; do
  # The webhooks answer a moment after the controllers report ready.
  [ $SECONDS -lt $deadline ] || fail base.yaml "$STATE/logs/install.log" "applying deploy/base.yaml failed"
  sleep 1
done

# --- the admission controller, deployed as users deploy it --------------------------------------
# DISPATCH_CONTROLLER=host leaves it out: run it as a host process with admission.sh instead.
if [ "${DISPATCH_CONTROLLER:-cluster}" = cluster ]; then
  for np in "${import_pids[@]}"; do
    wait "${np#*=}" || fail "containerd-${np%%=*}" "$STATE/logs/image-import-${np%%=*}.log" \
      "importing the controller's image failed"
  done
  # deploy/admission as shipped, with three changes a kind user makes too: the image built
  # above; the controllers pinned to the control-plane node (the seed's step 6); and the
  # A-write policy's plain-mode list naming this cluster's admin, whom the tutorials'
  # library logs in as.
  O=$STATE/admission
  mkdir -p "$O"
  cp "$P/webhook-client-ca.crt" "$O/ca.crt"
  pod_ranges=$(for i in "${!NODES[@]}"; do printf '"%s.0/24"\n' "$(pod_prefix "$i")"; done | paste -sd,)
  cat > "$O/kustomization.yaml" <<EOF
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources: [$(python3 -c 'import os,sys; print(os.path.relpath(sys.argv[1], sys.argv[2]))' "$repo/deploy/admission" "$O")]
images: [{name: localhost/dispatch-admission, newTag: kind}]
# Mutual TLS: the webhook requires the API server's client certificate (see above). The
# NetworkPolicy with this cluster's pod ranges (checked by the API server; not enforced
# here: the local pod network has no policy engine).
components:
  - $(python3 -c 'import os,sys; print(os.path.relpath(sys.argv[1], sys.argv[2]))' "$repo/deploy/admission/mtls" "$O")
  - $(python3 -c 'import os,sys; print(os.path.relpath(sys.argv[1], sys.argv[2]))' "$repo/deploy/admission/networkpolicy" "$O")
configMapGenerator:
  - {name: dispatch-admission-client-ca, namespace: dispatch-system, files: [ca.crt]}
generatorOptions: {disableNameSuffixHash: true}
patches:
  - target: {kind: NetworkPolicy, name: dispatch-admission}
    patch: |
      - op: replace
        path: /spec/ingress/0/from/0/ipBlock/except
        value: [$pod_ranges]
  - target: {kind: Deployment, name: dispatch-admission}
    patch: |
      apiVersion: apps/v1
      kind: Deployment
      metadata: {name: dispatch-admission, namespace: dispatch-system}
      spec:
        template:
          spec:
            nodeSelector: {node-role.kubernetes.io/control-plane: ""}
            tolerations:
              - {key: node-role.kubernetes.io/control-plane, operator: Exists, effect: NoSchedule}
  - target: {kind: ConfigMap, name: dispatch-admission-count-plain}
    patch: |
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: dispatch-admission-count-plain, namespace: dispatch-system}
      data: {writers: "kubernetes-admin\n"}
  - target: {kind: ConfigMap, name: dispatch-admission-count-kueue}
    patch: |
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: dispatch-admission-count-kueue, namespace: dispatch-system}
      data: {resumers: "kueue-controller\ntrainer-controller\n"}
  # Controllers run on the host (deploy/local/admission.sh, the cluster tests' replicas)
  # log in as the controller too, and point the webhook at the host's loopback.
  - target: {kind: ConfigMap, name: dispatch-admission-controller-writes}
    patch: |
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: dispatch-admission-controller-writes, namespace: dispatch-system}
      data: {webhookURLs: "https://127.0.0.1:\n"}
EOF
  log "deploying the admission controller (kubectl apply -k) to ${NODES[0]}"
  kctl apply --server-side --force-conflicts -k "$O" >>"$STATE/logs/install.log" 2>&1 \
    || fail admission "$STATE/logs/install.log" "kubectl apply -k deploy/admission failed"
  if ! kctl -n dispatch-system rollout status deployment/dispatch-admission --timeout 120s \
      >>"$STATE/logs/install.log" 2>&1; then
    { kctl -n dispatch-system get pods -o wide || true
      kctl -n dispatch-system get events --sort-by .lastTimestamp | tail -n 20 || true
      kctl -n dispatch-system logs deployment/dispatch-admission --all-containers --tail 20 || true
    } >>"$STATE/logs/install.log" 2>&1
    fail admission "$STATE/logs/install.log" "the Deployment did not roll out within 120 s (pods, events and its last log lines are in the log)"
  fi
  deadline=$((SECONDS + 60))
  until [ -n "$(kctl -n dispatch-system get lease dispatch-admission -o 'jsonpath={.spec.holderIdentity}' 2>/dev/null)" ]; do
    [ $SECONDS -lt $deadline ] || fail admission "$STATE/logs/install.log" "no replica took Lease dispatch-system/dispatch-admission within 60 s"
    sleep 0.5
  done
fi

touch "$STATE/ready"
hand_out_kubeconfig
log "cluster $CLUSTER_NAME is up in $((SECONDS - t0))s; kubeconfig: $KUBECONFIG_OUT"
