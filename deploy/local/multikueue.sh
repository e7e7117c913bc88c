#!/usr/bin/env bash
# Three local clusters for MultiKueue, a Kueue manager and two workers (issue 30):
#   multikueue.sh up            bring up PREFIX-manager, PREFIX-worker1 and PREFIX-worker2, each
#                               a normal up.sh cluster (the admission controller deployed in
#                               it), and make the workers the manager's MultiKueue clusters.
#                               Idempotent: with the clusters up it only applies the
#                               MultiKueue objects again
#   multikueue.sh down          stop the forwarders, undo any cut, down.sh the three clusters
#   multikueue.sh cut WORKER    partition WORKER (worker1, worker2 or its cluster name) from the
#                               manager, both ways; heal WORKER joins it again
#   multikueue.sh status        each cluster's state, and each worker's link to the manager
# As root. Kubeconfigs: $MK_KUBECONFIG_DIR/NAME.kubeconfig (admin, as up.sh writes them), and
# $MK_KUBECONFIG_DIR/PREFIX-workerI-to-manager.kubeconfig (worker I's dispatch-admission in the
# manager, with only the rights docs/multikueue.md names, as seen from that worker through its
# forwarder). Diagram and details: docs/local-cluster.md.
#
# Ports and addresses. The clusters run side by side with the default cluster and two more
# (at +100 and +200, e.g. dk2 and dk3): cluster i (0 manager, 1 and 2 the workers) gets every
# port of lib.sh (its default, or its variable's value) + MK_PORT_OFFSET + 100*i, and the
# subnet prefix NODE_SUBNET_PREFIX with its second number + MK_SUBNET_OFFSET + i. Defaults:
#   manager  10.250, API server 10.250.0.1:16943, etcd 22879, Kueue webhook 22943, ...
#   worker1  10.251, API server 10.251.0.1:17043, etcd 22979, Kueue webhook 23043, ...
#   worker2  10.252, API server 10.252.0.1:17143, etcd 23079, Kueue webhook 23143, ...
#
# The links are forwarders (forward.py), host processes kept with the manager's state, so
# that down.sh of the manager stops them too. All clusters share the host's network
# namespace, so no address filter could tell the manager's Kueue from the worker's own
# components; a path of its own can be cut alone:
#   to worker i:   127.0.0.1:(worker i's API server port + 50), the server of the kubeconfig in
#                  the manager's Secret (the API server's certificate names 127.0.0.1);
#   from worker i: (worker i's bridge address):(the manager's API server port + 50), where the
#                  worker's host processes, nodes and pods reach the manager (they have no
#                  route to the manager's bridge).
# cut drops both forwarders' packets, in their listening ports only, in a table or chains of
# its own in the host's firewall (nft, else iptables): open connections hang and new ones
# time out, as in a partition. With neither tool (or MK_CUT_MODE=forwarder) the forwarders
# refuse instead: they close every connection and stop listening. heal and down remove it.
#
# Environment:
#   MK_PREFIX               cluster names' prefix (mk); at most 12 characters
#   MK_KUBECONFIG_DIR       where the kubeconfigs are written (/tmp)
#   MK_PORT_OFFSET          added to lib.sh's ports (500), MK_SUBNET_OFFSET to its subnet (6)
#   MK_WORKER_LOST_TIMEOUT  the manager's Kueue multiKueue.workerLostTimeout (2m; Kueue's
#                           default is 15m)
#   MK_FRAMEWORKS           the manager's Kueue integrations, comma-separated
#                           (trainer.kubeflow.org/trainjob). The workers' RBAC follows it: the
#                           manager watches every enabled kind in every worker, and one it may
#                           not watch leaves that worker inactive
#   MK_TOKEN_DURATION       lifetime of the workers' tokens (720h; the API servers cap none).
#                           up makes a new token only when the old one fails or nears its end
#   MK_CUT_MODE             auto (nft, iptables, then forwarder), nft, iptables or forwarder
#   MK_WAIT                 seconds up waits for each worker to become Active (120)
# Changing MK_FRAMEWORKS or MK_WORKER_LOST_TIMEOUT takes effect at the manager's next start
# (down, then up).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"
# lib.sh's fail() takes down the cluster CLUSTER_NAME names: none of this script's failures may.
unset CLUSTER_NAME

MK_PREFIX=${MK_PREFIX:-mk}
MK_KUBECONFIG_DIR=${MK_KUBECONFIG_DIR:-/tmp}
MK_PORT_OFFSET=${MK_PORT_OFFSET:-500}
MK_SUBNET_OFFSET=${MK_SUBNET_OFFSET:-6}
MK_WORKER_LOST_TIMEOUT=${MK_WORKER_LOST_TIMEOUT:-2m}
MK_FRAMEWORKS=${MK_FRAMEWORKS:-trainer.kubeflow.org/trainjob}
MK_TOKEN_DURATION=${MK_TOKEN_DURATION:-720h}
MK_CUT_MODE=${MK_CUT_MODE:-auto}
MK_WAIT=${MK_WAIT:-120}

usage() {
  echo "usage: $0 up | down | cut WORKER | heal WORKER | status   (WORKER: worker1 or worker2)" >&2
  exit 2
}

[[ $MK_PREFIX =~ ^[a-z0-9]([-a-z0-9]{0,10}[a-z0-9])?$ ]] \
  || die "MK_PREFIX '$MK_PREFIX': lower-case letters, digits and '-', at most 12 characters"
[[ $MK_PORT_OFFSET =~ ^[0-9]+$ && $MK_SUBNET_OFFSET =~ ^[0-9]+$ && $MK_WAIT =~ ^[0-9]+$ ]] \
  || die "MK_PORT_OFFSET, MK_SUBNET_OFFSET and MK_WAIT must be numbers"
[[ $NODE_SUBNET_PREFIX =~ ^([0-9]+)\.([0-9]+)$ ]] || die "NODE_SUBNET_PREFIX '$NODE_SUBNET_PREFIX' is not A.B"
SUBNET_A=${BASH_REMATCH[1]} SUBNET_B=${BASH_REMATCH[2]}
[ $((SUBNET_B + MK_SUBNET_OFFSET + 2)) -le 255 ] \
  || die "NODE_SUBNET_PREFIX $NODE_SUBNET_PREFIX + MK_SUBNET_OFFSET $MK_SUBNET_OFFSET runs past .255"

CLUSTERS=("$MK_PREFIX-manager" "$MK_PREFIX-worker1" "$MK_PREFIX-worker2")
MANAGER=${CLUSTERS[0]}
PORT_VARS=(ETCD_PORT APISERVER_PORT KCM_PORT SCHED_PORT JOBSET_WEBHOOK_PORT KUEUE_WEBHOOK_PORT
           TRAINER_WEBHOOK_PORT JOBSET_HEALTH_PORT KUEUE_HEALTH_PORT TRAINER_HEALTH_PORT
           TRAINER_STATUS_PORT)
declare -A BASE
for v in "${PORT_VARS[@]}"; do BASE[$v]=${!v}; done
for v in "${PORT_VARS[@]}"; do
  # +1: etcd's peer port; +FORWARD_OFFSET: the API servers' forwarders
  [ $((BASE[$v] + MK_PORT_OFFSET + 200 + 50)) -lt 65536 ] || die "$v + MK_PORT_OFFSET runs past port 65535"
done
FORWARD_OFFSET=50
# The manager's MultiKueueConfig and AdmissionCheck: fixed names, for the tests' ClusterQueues.
MK_OBJECT=multikueue
# The identity the manager's Kueue has in each worker (the names of Kueue's own e2e).
SA_NS=kueue-system SA=mksa-sa ROLE=mksa-role BINDING=mksa-crb
# dispatch-admission's identities across clusters (docs/multikueue.md, install steps 3 and 4)
READER=dispatch-manager-reader AGENT_READS=dispatch-worker-reads
RESTART=(0 0 0)  # cluster I's dispatch-admission must restart: a kubeconfig of it changed
FIELD_MANAGER=dispatch-multikueue-sh
# The MultiKueue state, with the manager's: down.sh of the manager removes it.
MKDIR=$STATE_ROOT/$MANAGER/multikueue
# cut's own table (nft) or chains (iptables), named by the prefix: another setup's stay apart.
NFT_TABLE=dispatch_${MK_PREFIX//-/_}
IPT_IN=DISPATCH-$MK_PREFIX-IN IPT_OUT=DISPATCH-$MK_PREFIX-OUT

IFS=, read -ra FRAMEWORKS <<< "$MK_FRAMEWORKS"
FRAMEWORKS_YAML=$(kueue_frameworks_yaml MK_FRAMEWORKS "$MK_FRAMEWORKS") || exit 1
is_duration "$MK_WORKER_LOST_TIMEOUT" \
  || die "MK_WORKER_LOST_TIMEOUT '$MK_WORKER_LOST_TIMEOUT' is not a duration such as 2m or 90s"

# --- the clusters' ports and addresses ---------------------------------------------------------
cluster_env() { # I: the environment up.sh gets for cluster I, VAR=VALUE a line
  local v
  for v in "${PORT_VARS[@]}"; do echo "$v=$((BASE[$v] + MK_PORT_OFFSET + 100 * $1))"; done
  echo "NODE_SUBNET_PREFIX=$(subnet "$1")"
}
subnet() { echo "$SUBNET_A.$((SUBNET_B + MK_SUBNET_OFFSET + $1))"; }
host_ip() { echo "$(subnet "$1").0.1"; }                       # I -> its API server's address
api_port() { echo "$((BASE[APISERVER_PORT] + MK_PORT_OFFSET + 100 * $1))"; }
to_listen() { echo "127.0.0.1:$(($(api_port "$1") + FORWARD_OFFSET))"; }   # manager -> worker I
from_listen() { echo "$(host_ip "$1"):$(($(api_port 0) + FORWARD_OFFSET))"; }  # worker I -> manager
pods_to_listen() { echo "$(host_ip 0):$(($(api_port "$1") + FORWARD_OFFSET))"; }  # manager's pods -> worker I
kubeconfig_out() { echo "$MK_KUBECONFIG_DIR/${CLUSTERS[$1]}.kubeconfig"; }
to_manager_kubeconfig() { echo "$MK_KUBECONFIG_DIR/${CLUSTERS[$1]}-to-manager.kubeconfig"; }
admin_kubeconfig() { echo "$STATE_ROOT/${CLUSTERS[$1]}/admin.kubeconfig"; }
fwd_to() { echo "forward-to-${CLUSTERS[$1]}"; }               # the forwarders' pid file names
fwd_from() { echo "forward-from-${CLUSTERS[$1]}"; }
fwd_pods_to() { echo "forward-pods-to-${CLUSTERS[$1]}"; }

worker_index() { # WORKER (worker1, 1 or PREFIX-worker1) -> 1 or 2
  case $1 in
    1|worker1|"${CLUSTERS[1]}") echo 1 ;;
    2|worker2|"${CLUSTERS[2]}") echo 2 ;;
    *) die "no worker '$1': worker1 or worker2 (${CLUSTERS[1]}, ${CLUSTERS[2]})" ;;
  esac
}

join_by() { # SEPARATOR WORD...
  local sep=$1 out; shift
  printf -v out "%s$sep" "$@"
  echo "${out%"$sep"}"
}

need_root() { [ "$(id -u)" = 0 ] || die "must run as root"; }

kc() { # KUBECONFIG ARGS...: kubectl with a deadline (KC_TIMEOUT), so nothing here hangs
  local k=$1; shift
  "$KUBECTL" --kubeconfig "$k" --request-timeout "${KC_TIMEOUT:-20s}" "$@"
}
apply_yaml() { # KUBECONFIG WHAT: server-side apply of stdin, or die naming WHAT
  kc "$1" apply --server-side --force-conflicts --field-manager "$FIELD_MANAGER" -f - >/dev/null \
    || die "applying $2 failed"
}
find_kubectl() { KUBECTL=$(resolve_bin kubectl) || die "no kubectl: up.sh builds it into $CACHE/bin"; }

cluster_state() { # I: up, half up or down
  local d=$STATE_ROOT/${CLUSTERS[$1]}
  if [ ! -d "$d" ]; then echo down; return 0; fi
  if [ -f "$d/ready" ] && curl -sf -m 5 --cacert "$d/pki/ca.crt" --cert "$d/pki/admin.crt" \
      --key "$d/pki/admin.key" "https://$(host_ip "$1"):$(api_port "$1")/readyz" >/dev/null 2>&1; then
    echo up
  else
    echo "half up"
  fi
}

# --- forwarders ----------------------------------------------------------------------------------
listening() { [ -n "$(ss -Hltn src "$1" 2>/dev/null)" ]; }   # ADDR:PORT (never connects: a cut port hangs)

forwarder_pid() { # NAME: its pid, when it runs and is ours (a pid file can outlive its process)
  local f=$STATE_ROOT/$MANAGER/pids/$1 pid
  [ -f "$f" ] || return 1
  pid=$(cat "$f")
  kill -0 "$pid" 2>/dev/null && tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -qF "$here/forward.py " \
    && echo "$pid"
}

stop_forwarder() { # NAME: TERM, KILL after 5 s (it keeps no state)
  local pid
  if pid=$(forwarder_pid "$1"); then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
  fi
  rm -f "$STATE_ROOT/$MANAGER/pids/$1"
}

start_forwarder() { # NAME LISTEN TARGET REFUSE_FILE: start it unless it runs as asked already
  local name=$1 listen=$2 target=$3 refuse=$4 args
  args="--listen $listen --target $target --refuse-file $refuse"
  if forwarder_pid "$name" >/dev/null && [ "$(cat "$MKDIR/$name.args" 2>/dev/null)" = "$args" ]; then
    return 0
  fi
  stop_forwarder "$name"
  if listening "$listen"; then die "forwarder $name: $listen is in use: stop what holds it, or set MK_PORT_OFFSET"; fi
  cluster_dirs "$MANAGER"   # start_proc keeps the pid and log with the manager's
  # shellcheck disable=SC2086  # args is the flags above, split on purpose
  start_proc "$name" "$STATE/logs/$name.log" python3 -I "$here/forward.py" $args
  echo "$args" > "$MKDIR/$name.args"
  if [ -f "$refuse" ]; then
    sleep 0.5
    proc_alive "$name" || fail "$name" "$STATE/logs/$name.log" "the forwarder exited"
  else
    wait_until "$name" "$STATE/logs/$name.log" 10 listening "$listen"
  fi
  log "forwarder $name: $listen -> $target (pid $(cat "$STATE/pids/$name"))"
}

# --- cut and heal --------------------------------------------------------------------------------
cut_of() { # I: how worker I is cut (nft, iptables or forwarder), empty when it is not
  local f=$MKDIR/cut/${CLUSTERS[$1]}
  if [ -f "$f" ]; then cat "$f"; fi
}

cut_mode() {
  case $MK_CUT_MODE in
    auto)
      if command -v nft >/dev/null 2>&1; then echo nft
      elif command -v iptables >/dev/null 2>&1; then echo iptables
      else echo forwarder; fi ;;
    nft|iptables)
      command -v "$MK_CUT_MODE" >/dev/null 2>&1 || die "MK_CUT_MODE=$MK_CUT_MODE: no $MK_CUT_MODE here"
      echo "$MK_CUT_MODE" ;;
    forwarder) echo forwarder ;;
    *) die "MK_CUT_MODE '$MK_CUT_MODE': auto, nft, iptables or forwarder" ;;
  esac
}

drop_rules() { # I: what a cut of worker I drops, a packet kind a line: HOOK ADDR PORT-SIDE PORT
  local to from
  to=$(to_listen "$1") from=$(from_listen "$1")
  # The manager's Kueue and the forwarder to the worker talk over loopback: both directions
  # enter the host, so input sees both. Dropped there, a new connection's SYN goes
  # unanswered (dropped on output, connect would fail at once with EPERM).
  echo "input ${to%:*} dport ${to##*:}"
  echo "input ${to%:*} sport ${to##*:}"
  # The worker's side: in from its nodes and pods (over its bridge) or host processes, and
  # the forwarder's replies on their way out.
  echo "input ${from%:*} dport ${from##*:}"
  echo "output ${from%:*} sport ${from##*:}"
  # The manager's pods (dispatch-admission proving a worker empty) over its bridge.
  local pods
  pods=$(pods_to_listen "$1")
  echo "input ${pods%:*} dport ${pods##*:}"
  echo "output ${pods%:*} sport ${pods##*:}"
}

sync_nft() { # the table holds the drops of the workers cut with nft, and is gone when none is
  command -v nft >/dev/null 2>&1 || return 0
  local i hook addr side port input='' output='' match
  for i in 1 2; do
    [ "$(cut_of "$i")" = nft ] || continue
    while read -r hook addr side port; do
      match="ip ${side:0:1}addr $addr tcp $side $port drop"
      if [ "$hook" = input ]; then input+="    $match"$'\n'; else output+="    $match"$'\n'; fi
    done < <(drop_rules "$i")
  done
  if [ -z "$input$output" ]; then
    if nft list table inet "$NFT_TABLE" >/dev/null 2>&1; then nft delete table inet "$NFT_TABLE"; fi
    return 0
  fi
  # One transaction: declare, delete and define again, so no packet slips through between.
  nft -f - <<EOF
table inet $NFT_TABLE {}
delete table inet $NFT_TABLE
table inet $NFT_TABLE {
  chain input {
    type filter hook input priority -10; policy accept;
$input  }
  chain output {
    type filter hook output priority -10; policy accept;
$output  }
}
EOF
}

ipt() { iptables -w 5 "$@"; }

sync_iptables() { # our two chains hold the drops of the workers cut with iptables, or are gone
  command -v iptables >/dev/null 2>&1 || return 0
  local i want=0 hook chain addr side port spec
  for i in 1 2; do if [ "$(cut_of "$i")" = iptables ]; then want=1; fi; done
  if [ $want = 1 ]; then
    for hook in INPUT:$IPT_IN OUTPUT:$IPT_OUT; do
      ipt -n -L "${hook#*:}" >/dev/null 2>&1 || ipt -N "${hook#*:}"
      ipt -C "${hook%%:*}" -j "${hook#*:}" 2>/dev/null || ipt -I "${hook%%:*}" 1 -j "${hook#*:}"
    done
  fi
  # Rule by rule: adding one worker's drops never lifts the other's for a moment.
  for i in 1 2; do
    while read -r hook addr side port; do
      if [ "$hook" = input ]; then chain=$IPT_IN; else chain=$IPT_OUT; fi
      ipt -n -L "$chain" >/dev/null 2>&1 || continue
      if [ "$side" = dport ]; then spec=(-d "$addr/32" -p tcp --dport "$port" -j DROP)
      else spec=(-s "$addr/32" -p tcp --sport "$port" -j DROP); fi
      if [ "$(cut_of "$i")" = iptables ]; then
        ipt -C "$chain" "${spec[@]}" 2>/dev/null || ipt -A "$chain" "${spec[@]}"
      else
        while ipt -C "$chain" "${spec[@]}" 2>/dev/null; do ipt -D "$chain" "${spec[@]}"; done
      fi
    done < <(drop_rules "$i")
  done
  if [ $want = 0 ]; then
    for hook in INPUT:$IPT_IN OUTPUT:$IPT_OUT; do
      ipt -n -L "${hook#*:}" >/dev/null 2>&1 || continue
      while ipt -C "${hook%%:*}" -j "${hook#*:}" 2>/dev/null; do ipt -D "${hook%%:*}" -j "${hook#*:}"; done
      ipt -F "${hook#*:}"
      ipt -X "${hook#*:}"
    done
  fi
}

sync_refuse() { # the forwarders of workers cut with MK_CUT_MODE=forwarder refuse, the others listen
  local i name listen pid f refuse deadline
  [ -d "$MKDIR" ] || return 0
  for i in 1 2; do
    f=$MKDIR/refuse-${CLUSTERS[$i]} refuse=0
    if [ "$(cut_of "$i")" = forwarder ]; then touch "$f"; refuse=1; else rm -f "$f"; fi
    for name in "$(fwd_to "$i")" "$(fwd_from "$i")" "$(fwd_pods_to "$i")"; do
      pid=$(forwarder_pid "$name") || continue
      kill -USR1 "$pid"   # look at the file again
      case $name in
        "$(fwd_to "$i")") listen=$(to_listen "$i") ;;
        "$(fwd_from "$i")") listen=$(from_listen "$i") ;;
        *) listen=$(pods_to_listen "$i") ;;
      esac
      # Cut and heal return with it in effect.
      deadline=$((SECONDS + 10))
      while { [ $refuse = 1 ] && listening "$listen"; } || { [ $refuse = 0 ] && ! listening "$listen"; }; do
        [ $SECONDS -lt $deadline ] || die "forwarder $name did not follow $f within 10 s: see $STATE_ROOT/$MANAGER/logs/$name.log"
        sleep 0.1
      done
    done
  done
}

sync_cuts() { sync_nft; sync_iptables; sync_refuse; }

# --- MultiKueue --------------------------------------------------------------------------------------
worker_objects() { # what the manager's Kueue is in every worker: a ServiceAccount with
  # MultiKueue's rules (Kueue's e2e util MultiKueueRulesForManager, for MK_FRAMEWORKS only)
  local fw group res
  cat <<EOF
apiVersion: v1
kind: ServiceAccount
metadata: {name: $SA, namespace: $SA_NS}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: $ROLE}
rules:
- {apiGroups: [kueue.x-k8s.io], resources: [workloads], verbs: [create, update, patch, delete, get, list, watch]}
- {apiGroups: [kueue.x-k8s.io], resources: [workloads/status], verbs: [get, patch, update]}
- {apiGroups: [kueue.x-k8s.io], resources: [clusterqueues, localqueues], verbs: [get, list, watch]}
EOF
  for fw in "${FRAMEWORKS[@]}"; do
    read -r group res < <(kueue_framework_resource "$fw")
    echo "- {apiGroups: [$group], resources: [$res], verbs: [create, update, patch, delete, get, list, watch]}"
    echo "- {apiGroups: [$group], resources: [$res/status], verbs: [get]}"
  done
  cat <<EOF
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: $BINDING}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: $ROLE}
subjects: [{kind: ServiceAccount, name: $SA, namespace: $SA_NS}]
EOF
}

token_current() { # KUBECONFIG ADMIN_KUBECONFIG SERVER CA: the kubeconfig made before is still
  # right: same server and CA, and a token the issuing cluster (ADMIN's) accepts for at least
  # another day
  local out=$1 wk=$2 server=$3 ca=$4 token exp
  [ -f "$out" ] || return 1
  [ "$(kc "$out" config view --raw -o 'jsonpath={.clusters[0].cluster.server}')" = "$server" ] || return 1
  [ "$(kc "$out" config view --raw -o 'jsonpath={.clusters[0].cluster.certificate-authority-data}')" = "$ca" ] || return 1
  token=$(kc "$out" config view --raw -o 'jsonpath={.users[0].user.token}')
  [ -n "$token" ] || return 1
  exp=$(printf '%s' "$token" | python3 -c '
import base64, json, sys
p = sys.stdin.read().split(".")[1]
print(json.loads(base64.urlsafe_b64decode(p + "=" * (-len(p) % 4))).get("exp", 0))' 2>/dev/null) || return 1
  [ "$exp" -gt $(($(date +%s) + 86400)) ] || return 1
  # The token goes on stdin, never on a command line.
  [ "$(printf '{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{"token":"%s"}}' "$token" \
      | kc "$wk" create -f - -o 'jsonpath={.status.authenticated}' 2>/dev/null)" = true ]
}

token_kubeconfig() { # OUT ADMIN SERVER CA NS SA NAME [TLS_NAME]: a kubeconfig of the
  # ServiceAccount NS/SA of ADMIN's cluster at SERVER, with CA inline and a token (Kueue refuses
  # file paths, insecure TLS and exec plugins); TLS_NAME: the name its certificate is checked
  # by, when it names its own address and not SERVER's. A new token only when the one in OUT
  # fails or nears its end (a changed Secret makes Kueue reconnect, and dispatch-admission is
  # restarted for it): then TOKEN_CHANGED=1
  local out=$1 admin=$2 server=$3 ca=$4 ns=$5 sa=$6 name=$7 tls=${8:-} token
  if token_current "$out" "$admin" "$server" "$ca"; then return 0; fi
  token=$(kc "$admin" -n "$ns" create token "$sa" --duration "$MK_TOKEN_DURATION") \
    || die "$name: no token for $ns/$sa"
  (umask 077 && cat > "$out.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: $name
  cluster: {server: "$server", certificate-authority-data: "$ca"${tls:+, tls-server-name: $tls}}
users:
- name: $sa
  user: {token: "$token"}
contexts:
- name: $name
  context: {cluster: $name, user: $sa}
current-context: $name
EOF
  )
  mv "$out.tmp" "$out"
  TOKEN_CHANGED=1
  log "$name: new token for $ns/$sa ($MK_TOKEN_DURATION)"
}

ca_of() { kc "$1" config view --raw --minify -o 'jsonpath={.clusters[0].cluster.certificate-authority-data}'; }

join_worker() { # I: worker I's identity for the manager, its kubeconfig in the manager's Secret,
  # and the MultiKueueCluster; the manager reaches the worker through its forwarder
  local i=$1 w=${CLUSTERS[$1]} wk mk out
  wk=$(admin_kubeconfig "$i") mk=$(admin_kubeconfig 0) out=$MKDIR/${CLUSTERS[$1]}.kubeconfig
  worker_objects | apply_yaml "$wk" "$w: ServiceAccount $SA_NS/$SA and its RBAC"
  token_kubeconfig "$out" "$wk" "https://$(to_listen "$i")" "$(ca_of "$wk")" "$SA_NS" "$SA" "$w"
  # The Secret in Kueue's own namespace (the only one it reads), under the key kubeconfig.
  kc "$mk" -n kueue-system create secret generic "$w-kubeconfig" --from-file=kubeconfig="$out" \
      --dry-run=client -o yaml \
    | apply_yaml "$mk" "$MANAGER: Secret kueue-system/$w-kubeconfig"
  apply_yaml "$mk" "$MANAGER: MultiKueueCluster $w" <<EOF
apiVersion: kueue.x-k8s.io/v1beta2
kind: MultiKueueCluster
metadata: {name: $w}
spec:
  clusterSource:
    kubeConfig: {locationType: Secret, location: $w-kubeconfig}
EOF
}

# dispatch-admission's identities across clusters: exactly the rights the install steps 3 and
# 4 of docs/multikueue.md name, so that the tests and the campaign run on what users grant.
reader_objects() { # in each worker, for the manager's controller: list pods, nothing more
  cat <<EOF
apiVersion: v1
kind: ServiceAccount
metadata: {name: $READER, namespace: dispatch-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: $READER}
rules:
- {apiGroups: [""], resources: [pods], verbs: [list]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: $READER}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: $READER}
subjects: [{kind: ServiceAccount, name: $READER, namespace: dispatch-system}]
EOF
}

agent_objects() { # W: in the manager, for worker W's controller: get and update its own permit
  # Lease, get Workloads and TrainJobs
  cat <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: $AGENT_READS}
rules:
- {apiGroups: [kueue.x-k8s.io], resources: [workloads], verbs: [get]}
- {apiGroups: [trainer.kubeflow.org], resources: [trainjobs], verbs: [get]}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: dispatch-agent-$1, namespace: dispatch-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: dispatch-agent-$1, namespace: dispatch-system}
rules:
- {apiGroups: [coordination.k8s.io], resources: [leases], resourceNames: [dispatch-worker-$1], verbs: [get, update]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: dispatch-agent-$1, namespace: dispatch-system}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: dispatch-agent-$1}
subjects: [{kind: ServiceAccount, name: dispatch-agent-$1, namespace: dispatch-system}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: dispatch-agent-$1}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: $AGENT_READS}
subjects: [{kind: ServiceAccount, name: dispatch-agent-$1, namespace: dispatch-system}]
EOF
}

write_to_manager_kubeconfig() { # I: worker I's controller's identity in the manager, seen from
  # worker I through its forwarder (the manager's certificate names its own address, not the
  # forwarder's: it is checked by a name it carries)
  local i=$1 w=${CLUSTERS[$1]} mk
  mk=$(admin_kubeconfig 0)
  agent_objects "$w" | apply_yaml "$mk" "$MANAGER: ServiceAccount dispatch-system/dispatch-agent-$w and its RBAC"
  TOKEN_CHANGED=0
  token_kubeconfig "$(to_manager_kubeconfig "$i")" "$mk" "https://$(from_listen "$i")" \
    "$(ca_of "$mk")" dispatch-system "dispatch-agent-$w" "$MANAGER-from-$w" kubernetes
  RESTART[i]=$TOKEN_CHANGED
}

apply_mode() { # I COMPONENT [PATCH...]: cluster I's controller as up.sh deployed it, with the
  # component of deploy/admission and the JSON patch ops given (YAML, one a line) for its
  # Deployment; then wait for the roll-out
  local i=$1 component=$2 k o repo op
  shift 2
  k=$(admin_kubeconfig "$i") o=$STATE_ROOT/${CLUSTERS[$i]}/admission-multikueue
  repo=$(cd "$here/../.." && pwd)
  mkdir -p "$o"
  {
    echo "apiVersion: kustomize.config.k8s.io/v1beta1"
    echo "kind: Kustomization"
    echo "resources: [../admission]"
    echo "components: [$(python3 -c 'import os,sys; print(os.path.relpath(sys.argv[1], sys.argv[2]))' "$repo/deploy/admission/$component" "$o")]"
    if [ $# -gt 0 ]; then
      echo "patches:"
      echo "  - target: {kind: Deployment, name: dispatch-admission}"
      echo "    patch: |"
      for op in "$@"; do echo "      $op"; done
    fi
  } > "$o/kustomization.yaml"
  kc "$k" apply --server-side --force-conflicts -k "$o" >>"$STATE_ROOT/${CLUSTERS[$i]}/logs/install.log" 2>&1 \
    || die "${CLUSTERS[$i]}: kubectl apply -k $o failed: $STATE_ROOT/${CLUSTERS[$i]}/logs/install.log"
  # It reads its kubeconfigs when it starts: a new token needs a new start.
  if [ "${RESTART[$i]}" = 1 ]; then
    kc "$k" -n dispatch-system rollout restart deployment/dispatch-admission \
        >>"$STATE_ROOT/${CLUSTERS[$i]}/logs/install.log" 2>&1 \
      || die "${CLUSTERS[$i]}: cannot restart dispatch-admission for its new kubeconfig"
    RESTART[i]=0
  fi
  KC_TIMEOUT=0 kc "$k" -n dispatch-system rollout status deployment/dispatch-admission --timeout 180s \
      >>"$STATE_ROOT/${CLUSTERS[$i]}/logs/install.log" 2>&1 \
    || die "${CLUSTERS[$i]}: dispatch-admission ($component) did not roll out: $STATE_ROOT/${CLUSTERS[$i]}/logs/install.log"
}

dispatch_modes() { # dispatch-admission in its MultiKueue modes (docs/multikueue-fence.md): the
  # manager's proves workers empty through its pods' forwarders and times the permits; each
  # worker's renews its permit and fences MultiKueue's pods
  local i mk wk w ip secret
  mk=$(admin_kubeconfig 0)
  secret=(-n dispatch-system create secret generic dispatch-admission-workers)
  for i in 1 2; do
    w=${CLUSTERS[$i]} wk=$(admin_kubeconfig "$i")
    reader_objects | apply_yaml "$wk" "$w: ServiceAccount dispatch-system/$READER and its RBAC"
    # Through the manager's pods' forwarder; the worker's certificate names its own address.
    TOKEN_CHANGED=0
    token_kubeconfig "$MKDIR/dispatch-$w.kubeconfig" "$wk" "https://$(pods_to_listen "$i")" \
      "$(ca_of "$wk")" dispatch-system "$READER" "$w" kubernetes
    [ "$TOKEN_CHANGED" = 0 ] || RESTART[0]=1
    secret+=("--from-file=$w=$MKDIR/dispatch-$w.kubeconfig")
    # The permit exists from the start; the worker's agent renews it.
    printf 'apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata: {name: dispatch-worker-%s, namespace: dispatch-system}\n' "$w" \
      | apply_yaml "$mk" "$MANAGER: Lease dispatch-system/dispatch-worker-$w"
  done
  kc "$mk" "${secret[@]}" --dry-run=client -o yaml \
    | apply_yaml "$mk" "$MANAGER: Secret dispatch-system/dispatch-admission-workers"
  apply_mode 0 multikueue-manager
  for i in 1 2; do
    w=${CLUSTERS[$i]} wk=$(admin_kubeconfig "$i")
    kc "$wk" -n dispatch-system create configmap dispatch-admission-worker --from-literal=cluster="$w" \
        --dry-run=client -o yaml | apply_yaml "$wk" "$w: ConfigMap dispatch-system/dispatch-admission-worker"
    kc "$wk" -n dispatch-system create secret generic dispatch-admission-manager \
        --from-file=kubeconfig="$(to_manager_kubeconfig "$i")" --dry-run=client -o yaml \
      | apply_yaml "$wk" "$w: Secret dispatch-system/dispatch-admission-manager"
    # No cluster DNS here: the fences dial the Service's address and check its name.
    ip=$(kc "$wk" -n dispatch-system get service dispatch-admission -o 'jsonpath={.spec.clusterIP}')
    [ -n "$ip" ] || die "$w: Service dispatch-system/dispatch-admission has no ClusterIP"
    apply_mode "$i" multikueue-worker \
      "- {op: add, path: /spec/template/spec/containers/0/args/-, value: --agent-url=https://$ip:9444}" \
      "- {op: add, path: /spec/template/spec/containers/0/args/-, value: --agent-server-name=dispatch-admission.dispatch-system.svc}"
    # The manager's Kueue creates its copy of each TrainJob here, the manager's A and all:
    # the A policy lets its identity here do that, and nothing more (key remotes).
    printf 'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: dispatch-admission-count-kueue, namespace: dispatch-system}\ndata:\n  remotes: |\n    system:serviceaccount:%s:%s\n' "$SA_NS" "$SA" \
      | apply_yaml "$wk" "$w: ConfigMap dispatch-system/dispatch-admission-count-kueue (remotes)"
  done
}

wait_active() { # KIND NAME: until its Active condition is True, or MK_WAIT seconds
  local kind=$1 name=$2 mk status deadline=$((SECONDS + MK_WAIT))
  mk=$(admin_kubeconfig 0)
  while :; do
    status=$(kc "$mk" get "$kind" "$name" -o 'jsonpath={.status.conditions[?(@.type=="Active")].status}' 2>/dev/null || true)
    if [ "$status" = True ]; then return 0; fi
    if [ $SECONDS -ge $deadline ]; then
      die "$kind $name is not Active after ${MK_WAIT}s: $(kc "$mk" get "$kind" "$name" \
        -o 'jsonpath={.status.conditions[?(@.type=="Active")].reason}: {.status.conditions[?(@.type=="Active")].message}' 2>/dev/null || true) (the manager's Kueue log: $STATE_ROOT/$MANAGER/logs/kueue.log)"
    fi
    sleep 1
  done
}

configure() {
  local i mk cfg any=0
  find_kubectl
  mk=$(admin_kubeconfig 0)
  cfg=$STATE_ROOT/$MANAGER/controllers/kueue.yaml
  if ! grep -qxF "  frameworks: [$FRAMEWORKS_YAML]" "$cfg" \
      || ! grep -qxF "multiKueue: {workerLostTimeout: $MK_WORKER_LOST_TIMEOUT}" "$cfg"; then
    log "warning: $MANAGER's Kueue was started with other settings ($cfg) than MK_FRAMEWORKS and MK_WORKER_LOST_TIMEOUT ask for; they take effect after multikueue.sh down and up"
  fi
  mkdir -p "$MKDIR/cut"
  chmod 700 "$MKDIR"
  for i in 1 2; do
    start_forwarder "$(fwd_to "$i")" "$(to_listen "$i")" "$(host_ip "$i"):$(api_port "$i")" \
      "$MKDIR/refuse-${CLUSTERS[$i]}"
    start_forwarder "$(fwd_from "$i")" "$(from_listen "$i")" "$(host_ip 0):$(api_port 0)" \
      "$MKDIR/refuse-${CLUSTERS[$i]}"
    start_forwarder "$(fwd_pods_to "$i")" "$(pods_to_listen "$i")" "$(host_ip "$i"):$(api_port "$i")" \
      "$MKDIR/refuse-${CLUSTERS[$i]}"
  done
  sync_cuts   # a worker cut before stays cut
  for i in 1 2; do
    join_worker "$i"
    write_to_manager_kubeconfig "$i"
  done
  dispatch_modes
  apply_yaml "$mk" "$MANAGER: MultiKueueConfig and AdmissionCheck $MK_OBJECT" <<EOF
apiVersion: kueue.x-k8s.io/v1beta2
kind: MultiKueueConfig
metadata: {name: $MK_OBJECT}
spec:
  clusters: [${CLUSTERS[1]}, ${CLUSTERS[2]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: AdmissionCheck
metadata: {name: $MK_OBJECT}
spec:
  controllerName: kueue.x-k8s.io/multikueue
  parameters: {apiGroup: kueue.x-k8s.io, kind: MultiKueueConfig, name: $MK_OBJECT}
EOF
  for i in 1 2; do
    if [ -n "$(cut_of "$i")" ]; then log "${CLUSTERS[$i]} is cut off: not waiting for it"; continue; fi
    wait_active multikueuecluster "${CLUSTERS[$i]}"
    any=1
  done
  if [ $any = 1 ]; then wait_active admissioncheck "$MK_OBJECT"; fi
}

# --- commands ----------------------------------------------------------------------------------------
cmd_up() {
  need_root
  local t0=$SECONDS t i envs times=()
  mkdir -p "$MK_KUBECONFIG_DIR"
  for i in 0 1 2; do
    t=$SECONDS
    mapfile -t envs < <(cluster_env "$i")
    # The manager's Kueue gets a multiKueue section and MK_FRAMEWORKS (up.sh); the workers'
    # the Configuration of every local cluster.
    if [ "$i" = 0 ]; then
      envs+=("KUEUE_FRAMEWORKS=$MK_FRAMEWORKS" "KUEUE_MULTIKUEUE_WORKER_LOST_TIMEOUT=$MK_WORKER_LOST_TIMEOUT")
    fi
    log "cluster ${CLUSTERS[$i]}: $(subnet "$i").0.0/16, API server $(host_ip "$i"):$(api_port "$i")"
    env -u KUEUE_FRAMEWORKS -u KUEUE_MULTIKUEUE_WORKER_LOST_TIMEOUT DISPATCH_CONTROLLER=cluster "${envs[@]}" \
      "$here/up.sh" "${CLUSTERS[$i]}" "$(kubeconfig_out "$i")" \
      || die "up.sh ${CLUSTERS[$i]} failed (above); clusters already up stay up: multikueue.sh down removes them"
    times+=("${CLUSTERS[$i]} $((SECONDS - t))s")
  done
  t=$SECONDS
  configure
  times+=("MultiKueue $((SECONDS - t))s")
  log "MultiKueue is set up: AdmissionCheck $MK_OBJECT on $MANAGER, workers ${CLUSTERS[1]} and ${CLUSTERS[2]}"
  log "elapsed: $(join_by ', ' "${times[@]}"); total $((SECONDS - t0))s"
}

cmd_down() {
  need_root
  local t0=$SECONDS i
  for i in 1 2; do
    stop_forwarder "$(fwd_to "$i")"
    stop_forwarder "$(fwd_from "$i")"
    stop_forwarder "$(fwd_pods_to "$i")"
  done
  rm -rf "$MKDIR/cut"
  sync_nft
  sync_iptables
  for i in 0 1 2; do "$here/down.sh" "${CLUSTERS[$i]}"; done
  for i in 0 1 2; do rm -f "$(kubeconfig_out "$i")"; done
  for i in 1 2; do rm -f "$(to_manager_kubeconfig "$i")"; done
  log "MultiKueue clusters down in $((SECONDS - t0))s"
}

cmd_cut() {
  need_root
  local i mode
  i=$(worker_index "$1")
  [ -d "$MKDIR" ] || die "MultiKueue is not set up: run multikueue.sh up"
  mode=$(cut_of "$i")
  if [ -n "$mode" ]; then
    log "${CLUSTERS[$i]} is cut off already ($mode)"
  else
    mode=$(cut_mode)
    echo "$mode" > "$MKDIR/cut/${CLUSTERS[$i]}"
  fi
  sync_cuts
  case $mode in
    forwarder) log "${CLUSTERS[$i]} cut off from $MANAGER: its forwarders closed their connections and refuse new ones" ;;
    *) log "${CLUSTERS[$i]} cut off from $MANAGER: $mode drops $(to_listen "$i") and $(from_listen "$i") (open connections hang, new ones time out)" ;;
  esac
}

cmd_heal() {
  need_root
  local i
  i=$(worker_index "$1")
  [ -d "$MKDIR" ] || die "MultiKueue is not set up: run multikueue.sh up"
  rm -f "$MKDIR/cut/${CLUSTERS[$i]}"
  sync_cuts
  log "${CLUSTERS[$i]} joined to $MANAGER again"
}

cmd_status() {
  need_root
  local i state mk name pid cond
  for i in 0 1 2; do
    state=$(cluster_state "$i")
    printf '%-20s %-8s API server https://%s:%s, kubeconfig %s\n' "${CLUSTERS[$i]}" "$state" \
      "$(host_ip "$i")" "$(api_port "$i")" "$(kubeconfig_out "$i")"
  done
  [ -d "$MKDIR" ] || { echo "MultiKueue: not set up"; return 0; }
  mk=$(admin_kubeconfig 0)
  KUBECTL=$(resolve_bin kubectl) || KUBECTL=
  for i in 1 2; do
    local link=connected fwd=()
    if [ -n "$(cut_of "$i")" ]; then link="cut ($(cut_of "$i"))"; fi
    for name in "$(fwd_to "$i")" "$(fwd_from "$i")" "$(fwd_pods_to "$i")"; do
      if pid=$(forwarder_pid "$name"); then fwd+=("$name running (pid $pid)"); else fwd+=("$name STOPPED"); fi
    done
    cond=unknown
    if [ -n "$KUBECTL" ] && [ "$(cluster_state 0)" = up ]; then
      cond=$(KC_TIMEOUT=5s kc "$mk" get multikueuecluster "${CLUSTERS[$i]}" \
        -o 'jsonpath={.status.conditions[?(@.type=="Active")].status} ({.status.conditions[?(@.type=="Active")].reason})' 2>/dev/null || echo unknown)
    fi
    printf '%-20s %s; manager -> worker %s, worker -> manager %s; MultiKueueCluster Active: %s\n' \
      "${CLUSTERS[$i]}" "$link" "$(to_listen "$i")" "$(from_listen "$i")" "$cond"
    printf '%-20s %s\n' "" "$(join_by '; ' "${fwd[@]}")"
  done
  if [ -n "$KUBECTL" ] && [ "$(cluster_state 0)" = up ]; then
    printf 'AdmissionCheck %s Active: %s\n' "$MK_OBJECT" "$(KC_TIMEOUT=5s kc "$mk" get admissioncheck "$MK_OBJECT" \
      -o 'jsonpath={.status.conditions[?(@.type=="Active")].status} ({.status.conditions[?(@.type=="Active")].reason})' 2>/dev/null || echo unknown)"
  fi
}

case ${1:-} in
  up) [ $# -eq 1 ] || usage; cmd_up ;;
  down) [ $# -eq 1 ] || usage; cmd_down ;;
  cut) [ $# -eq 2 ] || usage; cmd_cut "$2" ;;
  heal) [ $# -eq 2 ] || usage; cmd_heal "$2" ;;
  status) [ $# -eq 1 ] || usage; cmd_status ;;
  *) usage ;;
esac
