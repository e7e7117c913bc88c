#!/usr/bin/env bash
# Certificates of a local cluster: pki.sh DIR CLUSTER HOST_IP NODE=IP...
# One CA signs the apiserver's serving certificate, client certificates for the admin,
# the control-plane components, each node (system:node:NAME) and each controller, and one
# loopback serving certificate shared by the controllers' webhooks. A second CA signs one
# certificate only: the one the API server presents to admission webhooks (its
# AdmissionConfiguration), which dispatch-admission's webhook requires (mutual TLS); the
# cluster CA also signs every node's and admin's, which must not pass there. Idempotent.
set -euo pipefail
dir=$1 host_ip=$3
shift 3
nodes=("$@")
mkdir -p "$dir"
cd "$dir"

if [ ! -f ca.key ]; then
  openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 \
    -subj "/CN=dispatch-local-ca" >/dev/null 2>&1
fi
if [ ! -f webhook-client-ca.key ]; then
  openssl req -x509 -newkey rsa:2048 -nodes -keyout webhook-client-ca.key \
    -out webhook-client-ca.crt -days 3650 -subj "/CN=dispatch-local-webhook-client-ca" >/dev/null 2>&1
fi
[ -f sa.key ] || { openssl genrsa -out sa.key 2048 2>/dev/null && openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null; }

# cert NAME SUBJECT [SAN] [EKU]   (signed by $CA, default the cluster CA)
cert() {
  local n=$1 subj=$2 san=${3:-} eku=${4:-clientAuth} ca=${CA:-ca}
  [ -f "$n.crt" ] && return 0
  openssl req -newkey rsa:2048 -nodes -keyout "$n.key" -out "$n.csr" -subj "$subj" >/dev/null 2>&1
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=$eku"
    [ -n "$san" ] && echo "subjectAltName=$san"
  } > "$n.ext"
  openssl x509 -req -in "$n.csr" -CA "$ca.crt" -CAkey "$ca.key" -CAcreateserial -out "$n.crt" \
    -days 3650 -extfile "$n.ext" >/dev/null 2>&1
  rm -f "$n.csr" "$n.ext"
}

cert apiserver "/CN=kube-apiserver" \
  "DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:127.0.0.1,IP:$host_ip,IP:10.96.0.1" serverAuth
cert admin "/O=system:masters/CN=kubernetes-admin"
CA=webhook-client-ca cert apiserver-webhook-client "/CN=kube-apiserver-webhook-client"
cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
cert controller-manager "/CN=system:kube-controller-manager"
cert scheduler "/CN=system:kube-scheduler"
cert webhook "/CN=dispatch-local-webhooks" "DNS:localhost,IP:127.0.0.1" serverAuth
for c in jobset kueue trainer; do cert "$c" "/CN=$c-controller"; done
# The user the bootstrap ClusterRoleBinding system:node-proxier names.
cert kube-proxy "/CN=system:kube-proxy"
for n in "${nodes[@]}"; do
  node=${n%%=*} ip=${n#*=}
  cert "node-$node" "/O=system:nodes/CN=system:node:$node"
  cert "kubelet-$node" "/CN=$node" "DNS:$node,IP:$ip" serverAuth
done
