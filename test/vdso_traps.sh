#!/usr/bin/env bash
# vdso_traps.sh SENTRY VDSO_PROGRAM
#
# Proves that the sandbox's vDSO serves time without trapping to the Sentry:
# `VDSO_PROGRAM loop N` (test/programs/vdso.c) makes N calls each of
# clock_gettime(MONOTONIC), clock_gettime(REALTIME), gettimeofday and time
# through libc; under `sentry run --strace` the time system calls that reach
# the Sentry are counted. With the default vDSO there must be (almost) none;
# with --vdso=syscall (the vDSO's fallback path) every call must show up,
# which shows that the count would catch a vDSO that traps.
# Exits 77 (CTest: skipped) when SENTRY does not exist yet.
set -u
# shellcheck source=test/lib.sh
. "$(dirname "$0")/lib.sh"
usage_unless [ $# -eq 2 ] -- "SENTRY VDSO_PROGRAM"
SENTRY=$1
PROG=$(readlink -f "$2")
require_sentry "$SENTRY"
N=${VDSO_TRAPS_N:-25000}
make_tmp vdso_traps

# count_traps FLAGS...: the number of time system calls the Sentry served.
count_traps() {
  if ! timeout 300 "$SENTRY" run --strace "$@" -- "$PROG" loop "$N" \
      >"$tmp/out" 2>"$tmp/err"; then
    echo "FAIL: sentry run $* exited with status $?" >&2
    tail -5 "$tmp/err" >&2
    return 1
  fi
  # grep -c prints 0 but fails when nothing matches.
  grep -cE '\] (clock_gettime|gettimeofday|time)\(' "$tmp/err" || true
}

fails=0
traps=$(count_traps) || exit 1
if [ "$traps" -le 5 ]; then
  echo "PASS: $((4 * N)) time calls through the vDSO, $traps trapped"
else
  echo "FAIL: $((4 * N)) time calls through the vDSO, $traps trapped (want <= 5)"
  fails=1
fi
traps=$(count_traps --vdso=syscall) || exit 1
if [ "$traps" -ge $((4 * N)) ]; then
  echo "PASS: with --vdso=syscall all $((4 * N)) calls trapped ($traps)"
else
  echo "FAIL: with --vdso=syscall only $traps of $((4 * N)) calls trapped"
  fails=1
fi
exit $fails
