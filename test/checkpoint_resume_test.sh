#!/usr/bin/env bash
# checkpoint_resume_test.sh SENTRY
#
# Calls that a checkpoint finds half done (test/checkpoint/resume.py,
# which checkpoints itself at a point it chooses: `sentry run
# --checkpoint-dir`, then `sentry restore` of the image):
#   - data: blocking writes that moved part of their data (a pipe, a
#     writev, a stream socket with an 8 KiB send buffer) and a
#     recv(MSG_WAITALL) that got part of its data: the saved run and the
#     restored copy each read every byte once (a call executed again
#     after the restore would send that part twice, or lose it);
#   - procfs_pipe: a pipe reopened O_RDWR through /proc/self/fd is saved,
#     its queued data and both ends working after; /proc/self/maps read
#     across the checkpoint still has [stack];
#   - timeouts: nanosleep, poll, select, epoll_wait and FUTEX_WAIT with
#     3 s relative timeouts checkpointed 1 s in end about 2 s after the
#     checkpoint in the restored copy, not 3 s;
#   - cpu_timeouts: clock_nanosleep on CLOCK_PROCESS_CPUTIME_ID and on
#     another thread's CPU clock, 3 s relative, checkpointed at 1 s of
#     CPU time, end about 2 s of CPU time after it, not 3 s;
#   - clocks: restored 2 s after the save (and again 1 s later), the
#     copy's CLOCK_MONOTONIC, CLOCK_BOOTTIME and /proc/uptime go on from
#     the save, CLOCK_REALTIME follows the host, the vDSO agrees with the
#     system call, absolute timers (a CLOCK_MONOTONIC timerfd and
#     clock_nanosleep, a CLOCK_REALTIME timerfd) end at their deadlines;
#   - unlinked: a file made in the overlay, a rootfs file copied up and
#     one only read, all removed while open, keep their data across the
#     checkpoint;
# every case without and with --systrap-patch=on (cases NAME.patch; the
# program makes each blocking call's site hot first, so that it is patched).
# Each run prints one "NAME ok" line per check that holds.
# Exits 77 (CTest: skipped) when SENTRY does not exist yet.
set -u
# shellcheck source=test/lib.sh
. "$(dirname "$0")/lib.sh"
usage_unless [ $# -eq 1 ] -- "SENTRY"
SENTRY=$1
require_sentry "$SENTRY"
here=$(cd "$(dirname "$0")" && pwd)
make_tmp checkpoint_resume "${KEEP:-0}"
PY=/usr/bin/python3
[ -x "$PY" ] || skip "$PY not installed"
PROG=$here/checkpoint/resume.py

# Each case runs without and with --systrap-patch=on (a patched syscall
# enters the Sentry through the stub's call, not a trap: the half-done
# call must be found and resumed the same way), the latter where that
# mode's probe passes.
modes=("")
if sentry_probe "$SENTRY" --systrap-patch=on; then
  modes+=("--systrap-patch=on")
else
  echo "# --systrap-patch=on not usable here, its runs are skipped: $probe_why"
fi

# Each case prints one line per check, "NAME ok" when it holds.
for mode in "${modes[@]}"; do
for spec in data:4 procfs_pipe:2 timeouts:5 cpu_timeouts:2 unlinked:3 clocks:9; do
  want=${spec#*:}
  base=${spec%:*}
  case=$base${mode:+.patch}
  # The flags of this mode, for run and restore alike.
  flags=()
  [ -n "$mode" ] && flags=("$mode")
  mkdir -p "$tmp/$case.ck"
  capture 60 "$SENTRY" run --rootfs=/ "${flags[@]}" --checkpoint-dir="$tmp/$case.ck" -- \
    "$PY" "$PROG" "$base"
  cp "$tmp/out" "$tmp/$case.orig"
  cp "$tmp/err" "$tmp/$case.orig.err"
  check "$case: the saved run exits 0 ($(head -c 300 "$tmp/$case.orig.err"))" \
    eq "$status" 0
  check "$case: the saved run says resume" \
    grep -qx "side resume" "$tmp/$case.orig.err"
  check "$case: the saved run's checks pass" \
    eq "$(grep -c ' ok$' "$tmp/$case.orig")" "$want"
  grep -v ' ok$' "$tmp/$case.orig" | head -5 | sed 's/^/#   saved: /'
  # clocks: the restore comes 2 s after the save, which the restored
  # copy's CLOCK_MONOTONIC must not count (its CLOCK_REALTIME does); a
  # second restore of the image, below, must see the same.
  [ "$base" = clocks ] && sleep 2
  capture 60 "$SENTRY" restore --rootfs=/ "${flags[@]}" --image="$tmp/$case.ck/sandbox.1"
  cp "$tmp/out" "$tmp/$case.rest"
  check "$case: the restored copy exits 0 ($(head -c 300 "$tmp/err"))" \
    eq "$status" 0
  check "$case: the restored copy says restore" grep -qx "side restore" "$tmp/err"
  check "$case: the restored copy's output is the saved run's" \
    cmp -s "$tmp/$case.rest" "$tmp/$case.orig"
  check "$case: the restored copy's checks pass" \
    eq "$(grep -c ' ok$' "$tmp/$case.rest")" "$want"
  grep -v ' ok$' "$tmp/$case.rest" | head -5 | sed 's/^/#   restored: /'
  if [ "$base" = clocks ]; then
    sleep 1
    capture 60 "$SENTRY" restore --rootfs=/ "${flags[@]}" --image="$tmp/$case.ck/sandbox.1"
    check "$case: a second restore of the image exits 0 ($(head -c 300 "$tmp/err"))" \
      eq "$status" 0
    check "$case: a second restore's checks pass" \
      eq "$(grep -c ' ok$' "$tmp/out")" "$want"
    grep -v ' ok$' "$tmp/out" | head -5 | sed 's/^/#   restored again: /'
  fi
done
done

echo "1..$n"
if [ "$fails" -ne 0 ]; then
  echo "$fails of $n checks failed"
  exit 1
fi
exit 0
