#!/bin/sh
# busybox ash has ${v//p/r} and $EPOCHREALTIME; $HOSTNAME comes from Kubernetes.
# shellcheck disable=SC3028,SC3060
# chaos/ledger.sh: the program every job of the fault suite runs. It appends to a ledger
# file on the host one JSON line when it starts, a heartbeat every 100 ms while it runs, a
# line when it receives TERM and a line when it exits. The checker (chaos/checker.py)
# trusts nothing else for "what ran when".
#
# Written for busybox ash (the job image is busybox): only builtins, usleep and /proc.
# A pod runs it as `sh -c "$(cat ledger.sh)"` (chaos.ledger.command()), so it needs no
# file in the image or volume of its own.
#
# Environment:
#   LEDGER              the ledger file (default /ledger/ledger.jsonl), on a hostPath volume
#   DISPATCH_ATTEMPT    <job>.<submission>.<attempt>.<A>.<J>, set by the admission webhook
#   DISPATCH_EPOCH      submission * 1000000 + A + J
#   HOSTNAME            the pod's name (else `hostname`, which in a pod is the same)
#   POD_UID             optional, the pod's UID (downward API metadata.uid): with it the
#                       checker tells apart two pods of one name, rank and identity
#   JOBSET_UID          optional, the UID of the JobSet that made the pod (downward API,
#                       its label jobset.sigs.k8s.io/jobset-uid): a JobSet re-made under
#                       the same name is another execution
#   JOB_COMPLETION_INDEX or PET_NODE_RANK   the rank
#   NODE_NAME           optional, the node (from the downward API)
#   LEDGER_RUN_SECONDS  how long to run before exiting 0 (default 5; decimals allowed;
#                       0 runs until TERM)
#   LEDGER_EARLY_RANK   optional: this rank runs LEDGER_EARLY_SECONDS (default 1) instead,
#                       and exits 0 while the others run on (ranks end at different times)
#   LEDGER_TERM_LINGER  seconds to linger after TERM (default 0: exit at once), as a
#                       checkpoint on TERM does: it writes the term line, beats on for that
#                       long, then exits 143; a second TERM changes nothing
#   LEDGER_FAIL_ONCE    1: when J (DISPATCH_ATTEMPT's last field) is 0, the rank
#                       LEDGER_FAIL_RANK (default 0) exits 1 after LEDGER_FAIL_AFTER
#                       seconds (default 0.3), so that JobSet restarts the job (J > 0)
#
# Clocks. The ordering clock is CLOCK_REALTIME in microseconds, read from ash's
# $EPOCHREALTIME (gettimeofday, no fork). busybox offers no sub-millisecond monotonic
# clock to a pod: `date` has no %N, /proc/uptime (CLOCK_BOOTTIME) counts centiseconds,
# and /proc/timer_list (CLOCK_MONOTONIC in ns) is root-only on the host and masked in
# containers by the runtime. Every node of the local cluster runs on this one machine and
# shares its one realtime clock, so wall time orders every line. Its known weakness is a
# step of the clock (date -s, an NTP step): each line therefore also carries /proc/uptime
# as a coarse monotonic cross-check, and the checker's "clock" verdict refuses to judge a
# history in which wall - uptime moved by more than its tolerance.
#
# Atomic lines. Each line is written by one printf builtin with a single redirection
# `>>`, so the file is opened with O_APPEND and the line, far shorter than PIPE_BUF
# (4096 bytes) and stdio's buffer, goes out in one write(2). On a local filesystem (the
# host directory behind the hostPath) Linux moves the offset to the end and writes under
# the inode's lock in that one call, so lines of concurrent writers never interleave or
# overwrite each other. (This does not hold on NFS.) A trap runs only between commands,
# so a TERM never cuts a line in two; a SIGKILL leaves the last whole line.

LEDGER=${LEDGER:-/ledger/ledger.jsonl}

# Values go into JSON strings: keep only characters that need no escaping.
clean() { v=$1; printf '%s' "${v//[!A-Za-z0-9._:-]/_}"; }
attempt=$(clean "${DISPATCH_ATTEMPT:-}")
epoch=$(clean "${DISPATCH_EPOCH:-}")
pod=$(clean "${HOSTNAME:-$(hostname 2>/dev/null)}")
uid=$(clean "${POD_UID:-}")
jobset=$(clean "${JOBSET_UID:-}")
rank=$(clean "${JOB_COMPLETION_INDEX:-${PET_NODE_RANK:-}}")
node=$(clean "${NODE_NAME:-}")
pid=$$
seq=0
t0=0  # this process's start line's wall_us: with pod and pid, it names the process

# Seconds with up to six decimals ("2", "0.3") -> microseconds.
to_us() {
  s=$1; i=${s%%.*}; f=
  case $s in *.*) f=${s#*.} ;; esac
  f=${f}000000; f=${f%"${f#??????}"}
  while :; do case $f in 0?*) f=${f#0} ;; *) break ;; esac; done
  printf '%s' "$(( ${i:-0} * 1000000 + f ))"
}

# now: wall_us (CLOCK_REALTIME, µs) and up_cs (/proc/uptime, centiseconds).
now() {
  t=$EPOCHREALTIME
  read -r up _ < /proc/uptime
  wall_us=${t%.*}${t#*.}
  up_cs=${up%.*}${up#*.}
  while :; do case $up_cs in 0?*) up_cs=${up_cs#0} ;; *) break ;; esac; done
}

# emit KIND [EXTRA]: append one line. EXTRA is more JSON members, starting with a comma.
emit() {
  now
  [ "$t0" = 0 ] && t0=$wall_us
  seq=$((seq + 1))
  printf '{"kind":"%s","attempt":"%s","epoch":"%s","pod":"%s","uid":"%s","jobset":"%s","rank":"%s","node":"%s","pid":%s,"started_us":%s,"seq":%s,"wall_us":%s,"uptime_cs":%s%s}\n' \
    "$1" "$attempt" "$epoch" "$pod" "$uid" "$jobset" "$rank" "$node" "$pid" "$t0" "$seq" \
    "$wall_us" "$up_cs" "${2:-}" >> "$LEDGER"
}

finish() { emit exit ",\"status\":$1"; exit "$1"; }

linger_us=$(to_us "${LEDGER_TERM_LINGER:-0}")
linger_until=  # set by the first TERM when lingering: the loop exits 143 at that time

on_term() {
  [ -n "${sleeper:-}" ] && kill "$sleeper" 2>/dev/null
  [ -n "$linger_until" ] && return  # already lingering
  emit term
  [ "$linger_us" -gt 0 ] || finish 143
  linger_until=$(( wall_us + linger_us ))
}
trap on_term TERM

emit start

run_s=${LEDGER_RUN_SECONDS:-5}
if [ -n "${LEDGER_EARLY_RANK:-}" ] && [ "$rank" = "$LEDGER_EARLY_RANK" ]; then
  run_s=${LEDGER_EARLY_SECONDS:-1}
fi
run_us=$(to_us "$run_s")
fail_at=
if [ "${LEDGER_FAIL_ONCE:-0}" = 1 ] && [ "${DISPATCH_ATTEMPT##*.}" = 0 ] &&
   [ "$rank" = "${LEDGER_FAIL_RANK:-0}" ]; then
  fail_at=$(( t0 + $(to_us "${LEDGER_FAIL_AFTER:-0.3}") ))
fi

# Beat k is due at t0 + k * 100 ms: sleep to that tick, not for 100 ms, so the cadence
# does not drift. The sleep runs in the background and `wait` returns at once on TERM.
k=0
while :; do
  k=$((k + 1))
  now
  due=$(( t0 + k * 100000 ))
  if [ "$due" -gt "$wall_us" ]; then
    usleep $(( due - wall_us )) &
    sleeper=$!
    wait "$sleeper"
    sleeper=
  fi
  emit beat
  if [ -n "$linger_until" ]; then  # lingering on TERM: only the linger ends it
    if [ "$wall_us" -ge "$linger_until" ]; then finish 143; fi
    continue
  fi
  if [ -n "$fail_at" ] && [ "$wall_us" -ge "$fail_at" ]; then finish 1; fi
  if [ "$run_us" -gt 0 ] && [ "$(( wall_us - t0 ))" -ge "$run_us" ]; then finish 0; fi
done
