#!/usr/bin/env bash
# exhaustion_test.sh SANDBOXD SANDBOXCTL SENTRY BINDIR
#
# The Sentry survives host exhaustion (test/programs/{fork,thread,mem}_bomb.c,
# built into BINDIR as *.glibc):
#   - `sentry run --pids=5|200`: fork and thread bombs see EAGAIN, every
#     child and thread is reaped, the Sentry exits with the bomb's status
#   - `sentry run` inside a host pids cgroup smaller than the bomb wants
#     (where this host lets us make one): the host's refusals become
#     EAGAIN or a killed process with its reason, never an abort
#   - through sandboxd (--pids=5|200): the same bombs, while a bystander
#     sandbox is created, run and checked beside them, and after them
#   - a memory bomb under --memory=64m: ENOMEM or SIGKILL for the bomb,
#     the daemon and a bystander keep working
# Exits 77 (CTest: skipped) until the binaries exist.
set -u
# shellcheck source=test/lib.sh
. "$(dirname "$0")/lib.sh"
usage_unless [ $# -eq 4 ] -- "SANDBOXD SANDBOXCTL SENTRY BINDIR"
require_built "$1" "$2" "$3"
SANDBOXD=$(readlink -f "$1")
SANDBOXCTL=$(readlink -f "$2")
SENTRY=$(readlink -f "$3")
BIN=$(readlink -f "$4")
make_tmp exhaustion_test "${KEEP_TMP:-0}"
SOCK=$tmp/sandboxd.sock
CHECK_OUT_BYTES=400
aborted() { grep -qE 'terminate called|system_error|Segmentation|Aborted' "$1"; }
no_abort() { ! aborted "$1"; }

for pids in 5 200; do
  for bomb in fork_bomb thread_bomb; do
    capture 120 "$SENTRY" run --rootfs=/ --pids=$pids -- "$BIN/$bomb.glibc" 0.5
    check "sentry run --pids=$pids $bomb: exit 0" eq "$status" 0
    check "sentry run --pids=$pids $bomb: EAGAIN" \
      contains "$tmp/out" "first failure EAGAIN"
    check "sentry run --pids=$pids $bomb: no abort" no_abort "$tmp/err"
  done
done

# The host refuses before the sandbox's limit does: a pids cgroup (v1) of
# 40 tasks around a `sentry run` without --pids.
cg=/sys/fs/cgroup/pids/exhaustion-host-$$
if mkdir "$cg" 2>/dev/null; then
  on_exit "rmdir $cg 2>/dev/null"
  echo 40 >"$cg/pids.max"
  for bomb in fork_bomb thread_bomb; do
    capture 120 sh -c 'echo $$ >"$1/cgroup.procs" && shift && exec "$@"' \
      sh "$cg" "$SENTRY" run --rootfs=/ -- "$BIN/$bomb.glibc" 0.5
    check "host pids.max=40, $bomb: the Sentry did not abort" no_abort "$tmp/err"
    # The fork bomb sees EAGAIN; a thread bomb whose stub worker the host
    # refuses is killed with the reason on stderr (SIGKILL: 137).
    check "host pids.max=40, $bomb: exit 0 or a killed bomb" \
      grep -qxE '0|137' <<<"$status"
    if [ "$status" = 137 ]; then
      check "host pids.max=40, $bomb: the reason is logged" \
        contains "$tmp/err" "host refused"
    fi
  done
else
  echo "# no v1 pids cgroup to make here: host refusal checks skipped"
fi

# Through the daemon, with a bystander beside every bomb.
ctl() { capture 120 "$SANDBOXCTL" --socket="$SOCK" "$@"; }
start_bg "$tmp/daemon.log" "$SANDBOXD" --sentry="$SENTRY" --socket="$SOCK" \
  --state-dir="$tmp/state" --pool-size=1 --platforms=systrap \
  --cgroup-parent="exhaustion-test-$$" \
  --default-rootfs=/ --shutdown-kill
wait_for_daemon "$SANDBOXCTL" "$SOCK"
bystander() { # bystander WHEN
  ctl run --rm -- /bin/echo "bystander $1"
  check "bystander $1: exit 0" eq "$status" 0
  check "bystander $1: output" eq "$(cat "$tmp/out")" "bystander $1"
}
cgroups=1
ctl run --rm --pids=5 -- /bin/true
if grep -q "without cgroups" "$tmp/err"; then
  cgroups=0
  echo "# this daemon has no cgroups: limits through sandboxd skipped"
fi
if [ $cgroups = 1 ]; then
  for pids in 5 200; do
    for bomb in fork_bomb thread_bomb; do
      "$SANDBOXCTL" --socket="$SOCK" run --rm --pids=$pids -- \
        "$BIN/$bomb.glibc" 3 >"$tmp/bomb.out" 2>"$tmp/bomb.err" &
      bomb_pid=$!
      sleep 0.5
      bystander "beside a $bomb (--pids=$pids)"
      wait $bomb_pid
      bomb_status=$?
      status=$bomb_status
      cp "$tmp/bomb.out" "$tmp/out"
      cp "$tmp/bomb.err" "$tmp/err"
      check "sandboxd --pids=$pids $bomb: exit 0" eq "$bomb_status" 0
      check "sandboxd --pids=$pids $bomb: EAGAIN" \
        contains "$tmp/bomb.out" "first failure EAGAIN"
      bystander "after a $bomb (--pids=$pids)"
    done
  done
  ctl run --rm --memory=64m -- "$BIN/mem_bomb.glibc" 1024
  check "sandboxd --memory=64m mem_bomb: ENOMEM or killed (got $status)" \
    grep -qxE '0|137' <<<"$status"
  if [ "$status" = 0 ]; then
    check "sandboxd --memory=64m mem_bomb: ENOMEM" contains "$tmp/out" ENOMEM
  fi
  bystander "after a mem_bomb"
fi
check "the daemon lives" kill -0 "$bg_pid"
check "no Sentry aborted" no_abort "$tmp/daemon.log"
passed
