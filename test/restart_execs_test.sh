#!/usr/bin/env bash
# restart_execs_test.sh SANDBOXD SANDBOXCTL SENTRY
#
# A daemon restart loses nothing of many exec'd processes (daemon/README.md,
# "Restarts"): a sandbox runs more of them than one control message has
# room for descriptors (Reattach hands their output ends back in pieces),
# each having printed to stdout and stderr; after kill -9 of sandboxd and a
# restart, they all print again and exit, and for every one of them
# `logs --pid` has what it printed before and after the restart and
# `wait --pid` its exit code.
# NEXECS (default 100) sets how many.
# Exits 77 (CTest: skipped) until the binaries exist.
set -u
# shellcheck source=test/lib.sh
. "$(dirname "$0")/lib.sh"
usage_unless [ $# -eq 3 ] -- "SANDBOXD SANDBOXCTL SENTRY"
require_built "$@"
SANDBOXD=$(readlink -f "$1")
SANDBOXCTL=$(readlink -f "$2")
SENTRY=$(readlink -f "$3")
NEXECS=${NEXECS:-100}
make_tmp restart_execs_test "${KEEP:-0}"
CHECK_OUT_BYTES=400

# Every Sentry the state directory records is killed at exit, whatever
# happened to the daemons.
kill_recorded() {
  local f
  for f in "$tmp"/state/sentries/*; do
    [ -e "$f" ] && kill -9 "$(basename "$f")" 2>/dev/null
  done
  return 0
}
on_exit kill_recorded

daemon_pid=
daemon() {
  "$SANDBOXD" --sentry="$SENTRY" --socket="$tmp/d.sock" --state-dir="$tmp/state" \
    --pool-size=1 --shutdown-kill 2>>"$tmp/d.log" &
  daemon_pid=$!
  on_exit "stop_pid $daemon_pid"
  wait_for_daemon "$SANDBOXCTL" "$tmp/d.sock"
}
ctl() { capture 60 "$SANDBOXCTL" --socket="$tmp/d.sock" "$@"; }

daemon || { echo "not ok - sandboxd did not start"; cat "$tmp/d.log"; exit 1; }
ctl run -d --name=host --rootfs=/ -- /bin/sleep 100000
check "sandbox started" eq "$status" 0
# Process i prints "before i" on stdout and stderr, waits until
# /tmp/go.G exists (G = i % 10: the daemon keeps the last 16 processes
# that ended, so they are let go and looked at ten at a time), then prints
# "after i" on both and exits with i % 100 + 1.
pids=()
started=0
for i in $(seq 1 "$NEXECS"); do
  ctl exec -d host -- /bin/sh -c \
    "echo before $i; echo before $i >&2; while [ ! -e /tmp/go.$((i % 10)) ]; do sleep 2; done; echo after $i; echo after $i >&2; exit $((i % 100 + 1))"
  pid=$(head -1 "$tmp/out")
  if [ "$status" = 0 ] && [ -n "$pid" ]; then
    started=$((started + 1))
    pids[i]=$pid
  else
    cat "$tmp/err"
  fi
done
check "$NEXECS exec -d started" eq "$started" "$NEXECS"

# Their "before" lines have reached the daemon's logs.
before_logged() {
  local i
  for i in $(seq 1 "$NEXECS"); do
    "$SANDBOXCTL" --socket="$tmp/d.sock" logs --pid="${pids[i]}" host 2>&1 |
      grep -c "^before $i\$" | grep -qx 2 || return 1
  done
}
ok=0
for _ in $(seq 1 30); do
  before_logged && { ok=1; break; }
  sleep 1
done
check "before the restart: every process's two 'before' lines are in its log" eq "$ok" 1

kill -9 "$daemon_pid"
wait "$daemon_pid" 2>/dev/null
daemon || { echo "not ok - sandboxd did not start again"; cat "$tmp/d.log"; exit 1; }
check "restarted: host RUNNING" eq \
  "$("$SANDBOXCTL" --socket="$tmp/d.sock" ps | awk '$1 == "host" { print $2 }')" running

bad_code=0
bad_log=0
for g in $(seq 0 9); do
  # Let group g go on: its processes print their "after" lines and exit.
  ctl exec host -- /bin/touch /tmp/go.$g
  [ "$status" = 0 ] || echo "# touch /tmp/go.$g: $status $(head -c 200 "$tmp/err")"
  for i in $(seq 1 "$NEXECS"); do
    [ $((i % 10)) = "$g" ] && [ -n "${pids[i]:-}" ] || continue
    ctl wait --pid="${pids[i]}" host
    if [ "$status" != $((i % 100 + 1)) ]; then
      bad_code=$((bad_code + 1))
      [ "$bad_code" -le 3 ] && echo "# process $i (pid ${pids[i]}): wait --pid gave $status, not $((i % 100 + 1)): $(head -c 200 "$tmp/err")"
    fi
    ctl logs --pid="${pids[i]}" host
    cat "$tmp/out" "$tmp/err" >"$tmp/log.$i"
    if [ "$(grep -c "^before $i\$" "$tmp/log.$i")" != 2 ] ||
      [ "$(grep -c "^after $i\$" "$tmp/log.$i")" != 2 ]; then
      bad_log=$((bad_log + 1))
      [ "$bad_log" -le 3 ] && echo "# process $i (pid ${pids[i]}): its log: $(tr '\n' '|' <"$tmp/log.$i")"
    fi
  done
done
check "after the restart: every exec'd process's exit code (wrong: $bad_code)" eq "$bad_code" 0
check "after the restart: every log has 'before' and 'after' on both streams (wrong: $bad_log)" \
  eq "$bad_log" 0
grep -i 'exec.d processes\|descriptors' "$tmp/d.log" | head -5 | sed 's/^/# daemon: /'

passed
