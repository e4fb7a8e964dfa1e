#!/usr/bin/env bash
# limits_test.sh SENTRY
#
# The sandbox's limits as its programs see them (`sentry run --cpus=N
# --memory=BYTES --pids=N`, what `sentry serve` takes from spec.limits),
# with the host's own nproc, free and sh (`--rootfs=/`, read-only):
#   - nproc and /proc/cpuinfo show N CPUs (never more than the host has)
#   - free -b and /proc/meminfo show MemTotal = BYTES, MemFree below it
#   - a fork beyond --pids fails (EAGAIN: sh says it cannot fork)
# and, without flags, the host's CPU count and memory.
# Exits 77 (CTest: skipped) when SENTRY does not exist yet.
set -u
# shellcheck source=test/lib.sh
. "$(dirname "$0")/lib.sh"
usage_unless [ $# -eq 1 ] -- "SENTRY"
SENTRY=$1
require_sentry "$SENTRY"
# This suite's checks compare a value with the one wanted and say both.
check() { # check DESCRIPTION GOT WANT
  if [ "$2" = "$3" ]; then
    echo "ok: $1"
  else
    echo "FAIL: $1: got '$2', want '$3'"
    fails=$((fails + 1))
  fi
}
insandbox() { # insandbox FLAGS... -- 'SHELL COMMANDS'
  timeout -k 5 60 "$SENTRY" run --rootfs=/ "$@" </dev/null 2>&1
}

host_cpus=$(nproc)
check "nproc without a limit is the host's" \
  "$(insandbox -- /usr/bin/nproc)" "$host_cpus"
check "nproc with --cpus=1" "$(insandbox --cpus=1 -- /usr/bin/nproc)" 1
check "/proc/cpuinfo with --cpus=1" \
  "$(insandbox --cpus=1 -- /bin/grep -c ^processor /proc/cpuinfo)" 1
check "nproc with --cpus=0.2 (a fraction: one CPU)" "$(insandbox --cpus=0.2 -- /usr/bin/nproc)" 1
check "nproc with more CPUs than the host's" \
  "$(insandbox --cpus=4096 -- /usr/bin/nproc)" "$host_cpus"

mem=$((256 * 1024 * 1024))
check "free -b total with --memory" \
  "$(insandbox --memory=$mem -- /usr/bin/free -b | awk '/^Mem:/ {print $2}')" "$mem"
check "MemTotal with --memory" \
  "$(insandbox --memory=$mem -- /bin/grep MemTotal /proc/meminfo | awk '{print $2}')" \
  "$((mem / 1024))"
free_kb=$(insandbox --memory=$mem -- /bin/grep MemFree /proc/meminfo | awk '{print $2}')
check "MemFree below MemTotal" "$([ "${free_kb:-0}" -gt 0 ] && [ "$free_kb" -lt $((mem / 1024)) ] && echo yes)" yes

# sh is one task; with --pids=2 one child at a time can run, a second
# concurrent one cannot be forked.
out=$(insandbox --pids=2 -- /bin/sh -c '/bin/true && echo one-child; sleep 1 & sleep 1 & wait')
check "one child within --pids=2" "$(echo "$out" | grep -c one-child)" 1
check "a fork beyond --pids=2 fails" "$(echo "$out" | grep -ci 'cannot fork')" 1
out=$(insandbox -- /bin/sh -c 'sleep 0 & sleep 0 & wait; echo forked')
check "no limit without --pids" "$out" forked

if [ $fails -ne 0 ]; then
  echo "$fails check(s) failed"
  exit 1
fi
echo "all checks passed"
