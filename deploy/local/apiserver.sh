#!/usr/bin/env bash
# Stop, start or restart a local cluster's kube-apiserver: apiserver.sh COMMAND NAME [SECONDS]
#
# For tests of what survives an API server restart. The apiserver is started again with the
# very command line up.sh started it with (kept in $STATE/kube-apiserver.cmdline; for a
# cluster started before up.sh kept it, read from the running process), so ports come from
# that command line, not from the environment. etcd and everything else keep running.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"

usage() {
  cat >&2 <<EOF
usage: $0 COMMAND NAME [SECONDS]
  restart NAME [SECONDS]  stop the apiserver, stay down SECONDS (default 0), start it
                          again and wait until /readyz answers
  stop NAME               stop it (TERM, then KILL after 30 s)
  start NAME              start it (when stopped) and wait until /readyz answers
  compact NAME            compact etcd at its current revision, then restart the
                          apiserver: every watch resumed from an older resourceVersion
                          gets 410 Expired and must list again
  status NAME             exit 0 when it runs and is ready
EOF
  exit 2
}
if [ $# -lt 2 ] || [ $# -gt 3 ]; then usage; fi
command=$1 name=$2 down=${3:-0}
[[ $name =~ ^[a-z0-9]([-a-z0-9]*[a-z0-9])?$ ]] || usage
[[ $down =~ ^[0-9]+(\.[0-9]+)?$ ]] || usage
cluster_dirs "$name"
[ -d "$STATE" ] || die "no cluster $name (no $STATE)"
CMDLINE=$STATE/kube-apiserver.cmdline
LOGF=$STATE/logs/kube-apiserver.log

load_cmdline() { # sets CMD (the command line) and APISERVER_PORT (from --secure-port)
  if [ ! -s "$CMDLINE" ]; then
    proc_alive kube-apiserver || die "cluster $name: no $CMDLINE and no running apiserver to read it from"
    cp "/proc/$(cat "$STATE/pids/kube-apiserver")/cmdline" "$CMDLINE.tmp"
    mv "$CMDLINE.tmp" "$CMDLINE"
  fi
  mapfile -d '' -t CMD < "$CMDLINE"
  local i
  APISERVER_PORT=
  for i in "${!CMD[@]}"; do
    if [ "${CMD[$i]}" = --secure-port ]; then APISERVER_PORT=${CMD[$((i + 1))]}; fi
    if [ "${CMD[$i]}" = --bind-address ]; then HOST_IP=${CMD[$((i + 1))]}; fi
    if [ "${CMD[$i]}" = --etcd-servers ]; then ETCD_URL=${CMD[$((i + 1))]%%,*}; fi
  done
  [ -n "$APISERVER_PORT" ] || die "cluster $name: no --secure-port in $CMDLINE"
}

stop_apiserver() {
  if ! proc_alive kube-apiserver; then
    log "cluster $name: kube-apiserver is not running"
    rm -f "$STATE/pids/kube-apiserver"
    return 0
  fi
  local pid
  pid=$(cat "$STATE/pids/kube-apiserver")
  log "cluster $name: stopping kube-apiserver (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + 30))
  while kill -0 "$pid" 2>/dev/null; do
    if [ $SECONDS -ge $deadline ]; then kill -KILL "$pid" 2>/dev/null || true; fi
    sleep 0.1
  done
  rm -f "$STATE/pids/kube-apiserver"
}

start_apiserver() {
  if proc_alive kube-apiserver; then
    log "cluster $name: kube-apiserver is running already"
  else
    local deadline=$((SECONDS + 15))
    until port_free "$APISERVER_PORT" "$HOST_IP"; do
      [ $SECONDS -lt $deadline ] || die "cluster $name: port $HOST_IP:$APISERVER_PORT stays in use"
      sleep 0.1
    done
    log "cluster $name: starting kube-apiserver on $HOST_IP:$APISERVER_PORT"
    start_proc kube-apiserver "$LOGF" "${CMD[@]}"
  fi
  wait_until kube-apiserver "$LOGF" 90 admin_curl /readyz
  log "cluster $name: kube-apiserver is ready"
}

case $command in
  restart)
    [ "$(id -u)" = 0 ] || die "must run as root (the apiserver runs as root)"
    load_cmdline
    stop_apiserver
    sleep "$down"
    start_apiserver
    ;;
  stop)
    [ "$(id -u)" = 0 ] || die "must run as root (the apiserver runs as root)"
    load_cmdline  # kept before it stops, for start
    stop_apiserver
    ;;
  start)
    [ "$(id -u)" = 0 ] || die "must run as root (the apiserver runs as root)"
    load_cmdline
    start_apiserver
    ;;
  compact)
    # A compaction alone does not reach clients: the apiserver's watch cache still serves
    # a watch from a compacted resourceVersion. Its restart starts a new cache after the
    # compacted revision, so every watch resumed from before gets 410 (what a client sees
    # when it was away longer than the cache's window).
    [ "$(id -u)" = 0 ] || die "must run as root (the apiserver runs as root)"
    load_cmdline
    [ -n "${ETCD_URL:-}" ] || die "cluster $name: no --etcd-servers in $CMDLINE"
    # etcd's JSON gateway: a one-key range returns the store's current revision.
    rev=$(curl -sf -X POST "$ETCD_URL/v3/kv/range" -d '{"key":"AA==","limit":1,"keys_only":true}' \
      | sed -n 's/.*"revision":"\([0-9]*\)".*/\1/p')
    [ -n "$rev" ] || die "cluster $name: etcd at $ETCD_URL gave no revision"
    curl -sf -X POST "$ETCD_URL/v3/kv/compaction" -d "{\"revision\":\"$rev\",\"physical\":true}" >/dev/null \
      || die "cluster $name: etcd at $ETCD_URL refused the compaction at revision $rev"
    log "cluster $name: etcd compacted at revision $rev"
    stop_apiserver
    start_apiserver
    echo "$rev"
    ;;
  status)
    load_cmdline
    proc_alive kube-apiserver && admin_curl /readyz >/dev/null
    ;;
  *) usage ;;
esac
