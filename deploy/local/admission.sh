#!/usr/bin/env bash
# Run the admission controller as a host process against the local cluster.
# Usage: admission.sh start KUBECONFIG | stop | status
#   start  runs `python -m admission` in the background (pid file and log under
#          $DISPATCH_STATE, default /tmp/dispatch-admission) and waits until it holds the Lease.
#   stop   SIGTERM (the controller releases the Lease), SIGKILL after 20 s.
#          The MutatingWebhookConfiguration stays: its objectSelector limits it to dispatch
#          pods, which must be refused while no controller runs (fail closed, design.md).
#   status exit 0 when the process is running.
# Environment: ADMISSION_PYTHON (default: the repository's .venv python), ADMISSION_PORT
# (webhook, default 9443), ADMISSION_HEALTH (default 127.0.0.1:9444), ADMISSION_METRICS
# (default 127.0.0.1:9445), ADMISSION_ARGS (extra flags).
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

start() {
  local kubeconfig=${1:?usage: admission.sh start KUBECONFIG}
  [ -r "$kubeconfig" ] || die "cannot read kubeconfig $kubeconfig"
  mkdir -p "$state"
  if running; then log "already running (pid $(cat "$pidfile"))"; return 0; fi
  local identity kubectl
  identity="$(hostname)_host_$$"
  kubectl=$(command -v kubectl || true)
  # The Lease and the TLS Secret live in dispatch-system.
  if [ -n "$kubectl" ] && ! "$kubectl" --kubeconfig "$kubeconfig" get namespace dispatch-system >/dev/null 2>&1; then
    "$kubectl" --kubeconfig "$kubeconfig" create namespace dispatch-system >/dev/null
  fi
  # The controller outlives this script: it must not inherit the caller's open files (a
  # `flock /tmp/dk-cluster.lock` around this script would otherwise stay locked for as long
  # as the controller runs), so every descriptor above stderr is closed first.
  # shellcheck disable=SC2086  # ADMISSION_ARGS is a list of flags
  (cd "$repo" && close_inherited_fds && exec setsid "$python" -m admission --kubeconfig "$kubeconfig" \
      --identity "$identity" \
      --webhook-listen "127.0.0.1:$port" --webhook-url "https://127.0.0.1:$port" \
      --tls-secret dispatch-admission-tls \
      --health-listen "$health" --metrics-listen "$metrics" ${ADMISSION_ARGS:-} \
      >>"$logfile" 2>&1 </dev/null) &
  echo $! >"$pidfile"
  log "started pid $(cat "$pidfile"), log $logfile"
  for _ in $(seq 1 120); do
    running || die "the controller exited; see $logfile"
    if [ -n "$kubectl" ]; then
      holder=$("$kubectl" --kubeconfig "$kubeconfig" -n dispatch-system get lease \
        dispatch-admission -o 'jsonpath={.spec.holderIdentity}' 2>/dev/null || true)
      if [ "$holder" = "$identity" ]; then log "holds Lease dispatch-system/dispatch-admission"; return 0; fi
    elif curl -fsS "http://$health/readyz" 2>/dev/null | grep -q leader; then
      log "leading"; return 0
    fi
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
