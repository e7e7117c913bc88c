#!/usr/bin/env bash
# Build the admission controller's image, localhost/dispatch-admission:kind, from the working
# tree with no container engine, as the Docker archive that `ctr -n k8s.io images import` reads.
# Usage: controller-image.sh [--print-path] [OUT_DIR]   (default: $CACHE/images)
# Prints the archive's path, OUT_DIR/dispatch-admission-HASH.tar, on stdout; logs go to stderr.
# --print-path: print the path the current tree's archive has, build nothing.
# HASH covers all that goes in: the copied sources (pyproject.toml, README.md,
# dispatch_kubeflow/, admission/), deploy/admission/Dockerfile, this script, mkimage.py and the
# Debian suite and packages; an archive already there is reused at once, older ones are removed.
# Steps, each logged to OUT_DIR/logs/controller-image-STEP.log:
#   base   mmdebstrap: a Debian rootfs with python3 (kept as OUT_DIR/admission-base-HASH.tar,
#          keyed on the suite, packages and options, so a source change skips it)
#   venv   mmdebstrap on that rootfs, its hooks: python3 -m venv /venv, pip install of the
#          sources with [admission], then pip and setuptools removed from /venv as the
#          read-only container never runs them (step "pip"), then `dispatch-admission --help`
#          and an import of every admission module as user 65532 (step "smoke")
#   pack   mkimage.py rootfs: one layer, fixed timestamps; User, Env and Entrypoint from the
#          Dockerfile's final stage, so this image and a `docker build` of it run alike
# Environment: DEBIAN_MIRROR (http://deb.debian.org/debian), DEBIAN_SECURITY_MIRROR
# (http://deb.debian.org/debian-security), PIP_INDEX_URL (https://pypi.org/simple), PIP_CERT
# (the CA bundle pip trusts, default the host's $SSL_CERT_FILE or ca-certificates.crt, so a
# TLS-intercepting proxy the host trusts works; it is in the rootfs only during the pip step).
# Runs as root (mmdebstrap --mode=root, chroot); mounts exist only while mmdebstrap runs.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"
log() { printf '[image] %s\n' "$*" >&2; }
die() { printf '[image] error: %s\n' "$*" >&2; exit 1; }

REF=localhost/dispatch-admission:kind
DOCKERFILE=$repo/deploy/admission/Dockerfile
SUITE=bookworm
PACKAGES=(python3 python3-venv ca-certificates)
SOURCES=(pyproject.toml README.md dispatch_kubeflow admission)
# What the Dockerfile's base image (python:3.11-slim) gives that our rootfs must too; the
# Dockerfile's own ENV comes on top.
BASE_ENV=(PATH=/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8)
# The base rootfs: no apt, no perl (merged /usr via usr-is-merged rather than usrmerge), and
# no docs, man pages or translations (copyright files stay).
# shellcheck disable=SC2016  # $1 is the hooks' to expand
BASE_OPTS=(
  --mode=root --variant=essential --include="$(IFS=,; echo "${PACKAGES[*]}")"
  --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright'
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*'
  --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/lintian/*'
  --dpkgopt='path-exclude=/usr/share/bash-completion/*'
  --customize-hook='rm -rf "$1"/var/cache/debconf/*-old "$1"/var/lib/dpkg/*-old'
  # The host's resolv.conf and hostname are copied in for the build; keep neither.
  --customize-hook='rm -f "$1/etc/resolv.conf" "$1/etc/hostname"'
)

print_only=0
if [ "${1:-}" = --print-path ]; then print_only=1; shift; fi
[ $# -le 1 ] || die "usage: controller-image.sh [--print-path] [OUT_DIR]"
out_dir=$(realpath -m "${1:-$CACHE/images}")

# The files copied into the build, NUL-separated, relative to the repository, in byte order.
source_files() {
  (cd "$repo" && find "${SOURCES[@]}" \( -name __pycache__ -o -name '*.egg-info' \) -prune \
      -o -type f ! -name '*.pyc' -print0) | LC_ALL=C sort -z
}
base_key=$(printf '%s\n' "$SUITE" "${BASE_OPTS[@]}" | sha256sum | cut -c1-16)
hash=$(
  {
    source_files | (cd "$repo" && xargs -0 sha256sum)
    (cd "$repo" && sha256sum deploy/admission/Dockerfile deploy/local/controller-image.sh \
       deploy/local/mkimage.py)
    echo "base $base_key"
  } | sha256sum | cut -c1-16
)
out=$out_dir/dispatch-admission-$hash.tar
if [ -f "$out" ] || [ $print_only = 1 ]; then
  echo "$out"
  exit 0
fi

[ "$(id -u)" = 0 ] || die "must run as root (mmdebstrap --mode=root, chroot)"
command -v mmdebstrap >/dev/null || die "mmdebstrap is missing (apt-get install mmdebstrap)"
logs=$out_dir/logs
mkdir -p "$out_dir" "$logs"
# One build at a time per OUT_DIR; a second caller waits, then finds the archive.
exec 9>"$out_dir/.controller-image.lock"
flock 9
if [ -f "$out" ]; then
  echo "$out"
  exit 0
fi

# remove_build_dir DIR: unmount whatever is still mounted under DIR (mmdebstrap unmounts on
# its own; this is for when it was killed), then remove DIR, never across a mount.
remove_build_dir() {
  local d=$1 m
  [ -d "$d" ] || return 0
  while read -r m; do
    umount -l "$m" 2>/dev/null || log "could not unmount $m"
  done < <(awk -v p="$d/" 'index($2, p) == 1 {print $2}' /proc/mounts | sort -r)
  if awk -v p="$d/" 'index($2, p) == 1 {found=1} END {exit !found}' /proc/mounts; then
    log "left $d in place: something is still mounted under it"
  else
    rm -rf --one-file-system "$d"
  fi
}
# What a build killed before its cleanup could run left (we hold the lock: none is running).
for d in "$out_dir"/.build-*; do remove_build_dir "$d"; done
tmp=$(mktemp -d "$out_dir/.build-XXXXXX")
# mmdebstrap's own temporary directories too, so that the cleanup below covers them.
export TMPDIR=$tmp
trap 'remove_build_dir "$tmp"' EXIT
# run LOG CMD...: CMD in the background with its output in LOG, waited for. On SIGINT or
# SIGTERM the running step is stopped and waited for before the cleanup removes its files.
child=
run() {
  local logf=$1 rc=0
  shift
  "$@" >"$logf" 2>&1 </dev/null &
  child=$!
  wait "$child" || rc=$?
  child=
  return "$rc"
}
on_signal() {
  if [ -n "$child" ] && kill -0 "$child" 2>/dev/null; then
    log "interrupted: stopping the running step (pid $child) and removing the partial build"
    kill -TERM "$child" 2>/dev/null || true
    wait "$child" 2>/dev/null || true
  fi
  exit "$1"
}
trap 'on_signal 130' INT
trap 'on_signal 143' TERM

# step_failed STEP LOG: name the step and its log, show the log's tail, exit 1 (the EXIT
# trap removes the partial build).
step_failed() {
  printf '[image] error: step %s failed; its log: %s; last lines:\n' "$1" "$2" >&2
  tail -n 25 "$2" | sed 's/^/    /' >&2
  exit 1
}
# last_step LOG DEFAULT: the last "[image] step: NAME" a hook wrote to LOG, else DEFAULT.
last_step() {
  local s
  s=$(sed -n 's/^\[image\] step: \([a-z]*\)$/\1/p' "$1" | tail -n 1)
  echo "${s:-$2}"
}

mirrors=(
  "deb ${DEBIAN_MIRROR:-http://deb.debian.org/debian} $SUITE main"
  "deb ${DEBIAN_MIRROR:-http://deb.debian.org/debian} $SUITE-updates main"
  "deb ${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security} $SUITE-security main"
)
start=$SECONDS

# --- base ------------------------------------------------------------------------------------
base=$out_dir/admission-base-$base_key.tar
if [ -f "$base" ]; then
  log "base rootfs: $base (cached)"
else
  log "base rootfs: mmdebstrap $SUITE with ${PACKAGES[*]}"
  t=$SECONDS
  blog=$logs/controller-image-base.log
  run "$blog" mmdebstrap "${BASE_OPTS[@]}" "$SUITE" "$tmp/base.tar" "${mirrors[@]}" \
    || step_failed base "$blog"
  mv "$tmp/base.tar" "$base"
  log "base rootfs: done in $((SECONDS - t))s, $(du -h "$base" | cut -f1)"
  find "$out_dir" -maxdepth 1 -name 'admission-base-*.tar' ! -name "${base##*/}" -delete
fi

# --- venv, pip, smoke ------------------------------------------------------------------------
mkdir "$tmp/src"
source_files | (cd "$repo" && tar --null -T - -cf -) | tar -C "$tmp/src" -xf -
vlog=$logs/controller-image-venv.log
t=$SECONDS
log "venv: python3 -m venv /venv; pip install \".[admission]\" of the working tree"
# The hooks read these; `env -i` keeps the rest of this environment out of the chroot.
export IMAGE_BASE_TAR=$base IMAGE_SRC=$tmp/src IMAGE_PIP_INDEX=${PIP_INDEX_URL:-https://pypi.org/simple}
export IMAGE_PIP_CERT=${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}
# shellcheck disable=SC2016  # $1 and $IMAGE_* are the hooks' to expand
run "$vlog" mmdebstrap --mode=root --variant=custom --skip=update \
  --setup-hook='mmtarfilter "--path-exclude=/dev/*" < "$IMAGE_BASE_TAR" | tar -C "$1" -xf -' \
  --customize-hook='echo "[image] step: venv" >&2' \
  --customize-hook='chroot "$1" /usr/bin/python3 -m venv /venv' \
  --customize-hook='echo "[image] step: pip" >&2' \
  --customize-hook='cp -a "$IMAGE_SRC" "$1/tmp/src"' \
  --customize-hook='if [ -f "$IMAGE_PIP_CERT" ]; then cp "$IMAGE_PIP_CERT" "$1/tmp/pip-ca.crt";
      else cp "$1/etc/ssl/certs/ca-certificates.crt" "$1/tmp/pip-ca.crt"; fi' \
  --customize-hook='chroot "$1" env -i HOME=/root PATH=/venv/bin:/usr/bin:/bin LANG=C.UTF-8 \
      PIP_INDEX_URL="$IMAGE_PIP_INDEX" PIP_CERT=/tmp/pip-ca.crt PIP_DISABLE_PIP_VERSION_CHECK=1 \
      /venv/bin/pip install --no-cache-dir --progress-bar=off "/tmp/src[admission]"' \
  --customize-hook='chroot "$1" /venv/bin/python -m pip uninstall --yes --quiet pip setuptools' \
  --customize-hook='rm -rf "$1/tmp/src" "$1/tmp/pip-ca.crt" "$1/root/.cache"' \
  --customize-hook='echo "[image] step: smoke" >&2' \
  --customize-hook='chroot --userspec=65532:65532 "$1" env -i HOME=/ LANG=C.UTF-8 \
      PYTHONDONTWRITEBYTECODE=1 /venv/bin/dispatch-admission --help >/dev/null' \
  --customize-hook='chroot --userspec=65532:65532 "$1" env -i HOME=/ LANG=C.UTF-8 \
      PYTHONDONTWRITEBYTECODE=1 /venv/bin/python -c "
import importlib, pkgutil, admission
for m in pkgutil.walk_packages(admission.__path__, \"admission.\"):
    if m.name != \"admission.__main__\":
        importlib.import_module(m.name)
print(\"[image] smoke: imported every admission module\")"' \
  --customize-hook=': > "$1/etc/resolv.conf"; : > "$1/etc/hostname"' \
  "$SUITE" "$tmp/rootfs" "${mirrors[@]}" \
  || step_failed "$(last_step "$vlog" venv)" "$vlog"
log "venv: done in $((SECONDS - t))s (the smoke run of dispatch-admission --help passed)"
if grep -q " $tmp/" /proc/mounts; then die "mmdebstrap left mounts under $tmp"; fi

# --- pack ------------------------------------------------------------------------------------
plog=$logs/controller-image-pack.log
t=$SECONDS
env_args=()
for e in "${BASE_ENV[@]}"; do env_args+=(--env "$e"); done
run "$plog" python3 "$here/mkimage.py" rootfs "$tmp/image.tar" "$tmp/rootfs" "$REF" \
  --dockerfile "$DOCKERFILE" "${env_args[@]}" || step_failed pack "$plog"
mv "$tmp/image.tar" "$out"
find "$out_dir" -maxdepth 1 -name 'dispatch-admission-*.tar' ! -name "${out##*/}" -delete
log "pack: done in $((SECONDS - t))s"
log "$REF: $out ($(du -h "$out" | cut -f1)), built in $((SECONDS - start))s"
echo "$out"
