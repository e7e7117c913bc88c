#!/usr/bin/env bash
# Install what the local cluster needs from Debian's packages, when it is missing.
set -euo pipefail
need=()
command -v containerd >/dev/null || need+=(containerd)
command -v runc >/dev/null || need+=(runc)
[ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
[ -x /bin/busybox ] || need+=(busybox-static)
command -v iptables >/dev/null || need+=(iptables)
command -v openssl >/dev/null || need+=(openssl)
command -v curl >/dev/null || need+=(curl)
command -v gcc >/dev/null || need+=(gcc)
[ -f /usr/lib/x86_64-linux-gnu/libc.a ] || need+=(libc6-dev)
command -v ip >/dev/null || need+=(iproute2)
# The admission controller's image, built with no container engine (controller-image.sh).
command -v mmdebstrap >/dev/null || need+=(mmdebstrap)
command -v nsenter >/dev/null || need+=(util-linux)
command -v go >/dev/null || { echo "[local] error: Go 1.26 or newer is needed to build the cluster (go: not found)" >&2; exit 1; }
python3 -c 'import yaml' 2>/dev/null || need+=(python3-yaml)
[ ${#need[@]} -eq 0 ] && exit 0
echo "[local] installing Debian packages: ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
# policy-rc.d keeps the packages from starting their own daemons.
printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d.dispatch
chmod +x /usr/sbin/policy-rc.d.dispatch
had_policy=0; [ -e /usr/sbin/policy-rc.d ] && had_policy=1
[ $had_policy = 1 ] || cp /usr/sbin/policy-rc.d.dispatch /usr/sbin/policy-rc.d
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
[ $had_policy = 1 ] || rm -f /usr/sbin/policy-rc.d
rm -f /usr/sbin/policy-rc.d.dispatch
