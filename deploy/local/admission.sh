#!/usr/bin/env bash
# Run the admission controller as a host process against the local cluster.
# Usage: admission.sh start KUBECONFIG | stop | status
#   start  installs what the controller needs from deploy/admission, idempotently: its
#          ServiceAccount and RBAC, the webhook configuration when there is none, and the
#          A-write policy, whose plain-mode list names KUBECONFIG's user (the tutorials'
#          library). Then runs `python -m admission` in the background as that ServiceAccount
#          (a TokenRequest token: in Kueue mode only the controller may write A) and waits
#          until it holds the Lease. Pid file, log and the controller's kubeconfig are under
#          $DISPATCH_STATE, default /tmp/dispatch-admission. KUBECONFIG must be an admin's.
#   stop   SIGTERM (the controller releases the Lease), SIGKILL after 20 s.
#          The MutatingWebhookConfiguration stays: its objectSelector limits it to dispatch
#          pods, which must be refused while no controller runs (fail closed, design.md).
#          The A-write policy stays too: A is protected whether or not a controller runs.
#   status exit 0 when the process is running.
# Environment: ADMISSION_PYTHON (default: the repository's .venv python), ADMISSION_PORT
# (webhook, default 9443), ADMISSION_HEALTH (default 127.0.0.1:9444), ADMISSION_METRICS
# (default 127.0.0.1:9445), ADMISSION_ARGS (extra flags), KUBECTL (default: kubectl on
# PATH, else the local cluster's cached one).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
state=${DISPATCH_STATE:-/tmp/dispatch-admission}
pidfile=$state/admission.pid
logfile=$state/admission.log
python=${ADMISSION_PYTHON:-$repo/.venv/bin/python}
port=${ADMISSION_PORT:-9443}
health=${ADMISSION_HEALTH:-127.0.0.1:9444}
metrics=${ADMISSION_METRICS:-127.0.0.1:9445}
manifests=$repo/deploy/admission

log() { printf '[admission] %s\n' "$*" >&2; }
die() { printf '[admission] error: %s\n' "$*" >&2; exit 1; }

running() { [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; }

close_inherited_fds() {
  local fd
  for fd in "/proc/$BASHPID/fd/"*; do
    fd=${fd##*/}
    if [ "$fd" -gt 2 ] 2>/dev/null; then eval "exec $fd>&-" 2>/dev/null || true; fi
  done
}

find_kubectl() {
  local cache=${DISPATCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/dispatch-kubeflow} found
  if [ -n "${KUBECTL:-}" ]; then echo "$KUBECTL"; return 0; fi
  if command -v kubectl >/dev/null 2>&1; then command -v kubectl; return 0; fi
  found=$(find "$cache/bin" -maxdepth 1 -name 'kubectl-v*' 2>/dev/null | sort | tail -n 1)
  [ -n "$found" ] && echo "$found"
}

# install KUBECTL KUBECONFIG: what the controller needs (server-side apply: idempotent).
install() {
  local k=$1 kubeconfig=$2 user
  # The Lease and the TLS Secret live in dispatch-system.
  if ! "$k" --kubeconfig "$kubeconfig" get namespace dispatch-system >/dev/null 2>&1; then
    "$k" --kubeconfig "$kubeconfig" create namespace dispatch-system >/dev/null
  fi
  "$k" --kubeconfig "$kubeconfig" apply --server-side --force-conflicts \
    --field-manager dispatch-admission-sh -f "$manifests/serviceaccount.yaml" \
    -f "$manifests/rbac.yaml" >/dev/null
  # The controller may only get and update its webhook configuration: create it when there is
  # none, never apply over it (the controller points it at this host's URL).
  if ! "$k" --kubeconfig "$kubeconfig" get mutatingwebhookconfiguration dispatch-admission \
      >/dev/null 2>&1; then
    "$k" --kubeconfig "$kubeconfig" create -f "$manifests/webhook.yaml" >/dev/null
  fi
  # The A-write policy. Its plain-mode list names this kubeconfig's user, whom the tutorials'
  # library logs in as. The file lists the ConfigMaps first: a binding needs its list.
  user=$("$k" --kubeconfig "$kubeconfig" auth whoami -o 'jsonpath={.status.userInfo.username}')
  [ -n "$user" ] || die "cannot tell which user $kubeconfig logs in as"
  "$python" -c '
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
for d in docs:
    if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "dispatch-admission-count-plain":
        d["data"] = {"writers": sys.argv[2] + "\n"}
    if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "dispatch-admission-count-kueue":
        d["data"]["resumers"] = "kueue-controller\ntrainer-controller\n"  # the users of pki.sh
yaml.safe_dump_all(docs, sys.stdout)
' "$manifests/admission-count-policy.yaml" "$user" \
    | "$k" --kubeconfig "$kubeconfig" apply --server-side --force-conflicts \
        --field-manager dispatch-admission-sh -f - >/dev/null
}

# controller_kubeconfig KUBECTL KUBECONFIG OUT: KUBECONFIG's server and CA with a token of the
# controller's ServiceAccount, made anew on every start.
controller_kubeconfig() {
  local k=$1 kubeconfig=$2 out=$3 server ca token
  server=$("$k" --kubeconfig "$kubeconfig" config view --minify --flatten \
    -o 'jsonpath={.clusters[0].cluster.server}')
  ca=$("$k" --kubeconfig "$kubeconfig" config view --minify --flatten \
    -o 'jsonpath={.clusters[0].cluster.certificate-authority-data}')
  token=$("$k" --kubeconfig "$kubeconfig" -n dispatch-system create token dispatch-admission \
    --duration 720h)
  (umask 077 && cat >"$out.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: cluster
  cluster: {server: "$server", certificate-authority-data: "$ca"}
users:
- name: dispatch-admission
  user: {token: "$token"}
contexts:
- name: dispatch-admission
  context: {cluster: cluster, user: dispatch-admission}
current-context: dispatch-admission
EOF
  )
  mv "$out.tmp" "$out"
}

start() {
  local kubeconfig=${1:?usage: admission.sh start KUBECONFIG}
  [ -r "$kubeconfig" ] || die "cannot read kubeconfig $kubeconfig"
  mkdir -p "$state"
  if running; then log "already running (pid $(cat "$pidfile"))"; return 0; fi
  local identity kubectl
  identity="$(hostname)_host_$$"
  kubectl=$(find_kubectl) || die "no kubectl: put one on PATH or set KUBECTL"
  install "$kubectl" "$kubeconfig"
  controller_kubeconfig "$kubectl" "$kubeconfig" "$state/controller.kubeconfig"
  # Mutual TLS as the deployed controller has it, when the cluster ships the client CA.
  local client_ca=()
  if "$kubectl" --kubeconfig "$kubeconfig" -n dispatch-system get configmap \
      dispatch-admission-client-ca -o 'jsonpath={.data.ca\.crt}' >"$state/client-ca.crt" 2>/dev/null \
      && [ -s "$state/client-ca.crt" ]; then
    client_ca=(--client-ca "$state/client-ca.crt")
  fi
  # The controller outlives this script: it must not inherit the caller's open files (a
  # `flock /tmp/dk-cluster.lock` around this script would otherwise stay locked for as long
  # as the controller runs), so every descriptor above stderr is closed first.
  # shellcheck disable=SC2086  # ADMISSION_ARGS is a list of flags
  (cd "$repo" && close_inherited_fds && exec setsid "$python" -m admission \
      --kubeconfig "$state/controller.kubeconfig" --identity "$identity" \
      --webhook-listen "127.0.0.1:$port" --webhook-url "https://127.0.0.1:$port" \
      --tls-secret dispatch-admission-host-tls "${client_ca[@]}" \
      --health-listen "$health" --metrics-listen "$metrics" ${ADMISSION_ARGS:-} \
      >>"$logfile" 2>&1 </dev/null) &
  echo $! >"$pidfile"
  log "started pid $(cat "$pidfile"), log $logfile"
  for _ in $(seq 1 120); do
    running || die "the controller exited; see $logfile"
    holder=$("$kubectl" --kubeconfig "$kubeconfig" -n dispatch-system get lease \
      dispatch-admission -o 'jsonpath={.spec.holderIdentity}' 2>/dev/null || true)
    if [ "$holder" = "$identity" ]; then log "holds Lease dispatch-system/dispatch-admission"; return 0; fi
    sleep 0.5
  done
  die "the controller did not take the Lease within 60 s; see $logfile"
}

stop() {
  running || { rm -f "$pidfile"; log "not running"; return 0; }
  local pid
  pid=$(cat "$pidfile")
  kill -TERM "$pid"
  for _ in $(seq 1 40); do
    kill -0 "$pid" 2>/dev/null || { rm -f "$pidfile"; log "stopped"; return 0; }
    sleep 0.5
  done
  kill -KILL "$pid" 2>/dev/null || true
  rm -f "$pidfile"
  log "killed after 20 s"
}

case ${1:-} in
  start) shift; start "$@" ;;
  stop) stop ;;
  status) if running; then echo "running (pid $(cat "$pidfile"))"; else echo "stopped"; exit 3; fi ;;
  *) echo "usage: $0 start KUBECONFIG | stop | status" >&2; exit 2 ;;
esac
