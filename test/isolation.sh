#!/usr/bin/env bash
# isolation.sh SENTRY PROG [ARGS...]
#
# Runs an isolation test program (test/isolation/*.c) inside the sandbox:
# copies PROG into a fresh, otherwise empty rootfs directory and runs
#   SENTRY run --rootfs=DIR --cwd=/ -- /NAME canary=PID secret=PATH ARGS...
# where canary is a host process started for the test (it must survive) and
# secret a host file outside the rootfs (it must stay unreadable/unchanged).
#
# Passes (exit 0) when the program exits 0 with no FAIL line, or, for
# programs allowed to be killed (ISOLATION_ACCEPT_STATUS="137 ..."), exits with
# one of those statuses with no FAIL line printed before; and the canary is
# alive and the secret file unchanged afterwards.
# Exits 77 (CTest: skipped) when SENTRY does not exist yet.
#
# ISOLATION_NATIVE=1 runs PROG natively instead (demonstration only: the
# checks are expected to FAIL there; never use it for mmap_reserved).
set -u
# shellcheck source=test/lib.sh
. "$(dirname "$0")/lib.sh"
usage_unless [ $# -ge 2 ] -- "SENTRY PROG [ARGS...]"
SENTRY=$1
PROG=$2
shift 2
NATIVE=${ISOLATION_NATIVE:-0}
ACCEPT=${ISOLATION_ACCEPT_STATUS:-}
TIMEOUT=${ISOLATION_TIMEOUT:-120}

[ "$NATIVE" = 1 ] || require_sentry "$SENTRY"
if [ ! -x "$PROG" ]; then
  echo "FAIL: test program not found: $PROG"
  exit 1
fi
PROG=$(readlink -f "$PROG")
SENTRY=$(readlink -f "$SENTRY")
name=$(basename "$PROG")

make_tmp "isolation.$name"
root=$tmp/rootfs
outside=$tmp/outside
mkdir -p "$root" "$outside"
cp "$PROG" "$root/$name"
secret=$outside/secret.txt
echo "host secret $$ $RANDOM" >"$secret"
secret_sum=$(sha256sum <"$secret")

sleep 600 &
canary=$!
on_exit "stop_pid $canary"
ulimit -c 0

args=("canary=$canary" "secret=$secret" "$@")
if [ "$NATIVE" = 1 ]; then
  cmd=("$PROG" "${args[@]}" no-pid1-kill)
else
  cmd=("$SENTRY" run --rootfs="$root" --cwd=/ -- "/$name" "${args[@]}")
fi
# In a session of its own: every host process the run makes keeps that
# session id (nothing in the sandbox may call setsid on the host), so any
# left after it (an untracked stub clone) is found by it below.
{
  (cd "$tmp" && exec setsid --wait sh -c 'echo $$ >"$0"; exec "$@"' \
    "$tmp/sid" timeout -k 5 "$TIMEOUT" "${cmd[@]}") </dev/null >"$tmp/stdout" 2>"$tmp/stderr"
  status=$?
} 2>/dev/null

echo "command: ${cmd[*]}"
echo "--- stdout"
cat "$tmp/stdout"
if [ -s "$tmp/stderr" ]; then
  echo "--- stderr"
  head -c 4000 "$tmp/stderr"
fi
echo "--- exit status $status"

fail=0
if grep -q '^FAIL' "$tmp/stdout"; then
  echo "FAIL: the program reported failing checks"
  fail=1
fi
if [ "$status" = 0 ]; then
  if ! grep -q '^PASS' "$tmp/stdout"; then
    echo "FAIL: exit 0 but no PASS line"
    fail=1
  fi
else
  accepted=0
  for s in $ACCEPT; do [ "$s" = "$status" ] && accepted=1; done
  if [ $accepted = 1 ]; then
    echo "note: exit status $status is accepted for this test"
  else
    echo "FAIL: exit status $status${ACCEPT:+ (accepted: 0 $ACCEPT)}"
    fail=1
  fi
fi
if ! kill -0 "$canary" 2>/dev/null; then
  echo "FAIL: the host canary process $canary was killed"
  fail=1
elif grep -q '^State:.*[tT]' "/proc/$canary/status" 2>/dev/null; then
  echo "FAIL: the host canary process $canary was stopped"
  kill -CONT "$canary" 2>/dev/null
  fail=1
elif ! grep -q '^TracerPid:[[:space:]]*0$' "/proc/$canary/status" 2>/dev/null; then
  echo "FAIL: the host canary process $canary is being traced"
  fail=1
fi
sid=$(cat "$tmp/sid" 2>/dev/null)
if [ -n "$sid" ]; then
  sleep 0.3
  left=()
  for st in /proc/[0-9]*/stat; do
    # Field 6 (session), after the parenthesised command name.
    fields=$(sed 's/^.*) //' "$st" 2>/dev/null) || continue
    set -- $fields
    [ "${4:-}" = "$sid" ] && left+=("$(basename "$(dirname "$st")")")
  done
  if [ ${#left[@]} -gt 0 ]; then
    echo "FAIL: host processes of the sandbox left after it ended: ${left[*]}"
    for p in "${left[@]}"; do kill -9 "$p" 2>/dev/null; done
    fail=1
  fi
fi
if [ "$(sha256sum <"$secret")" != "$secret_sum" ]; then
  echo "FAIL: the host secret file was modified"
  fail=1
fi
if [ "$(ls -A "$root")" != "$name" ]; then
  echo "FAIL: the rootfs directory on the host changed: $(ls -A "$root" | tr '\n' ' ')"
  fail=1
fi
if [ $fail = 0 ]; then
  echo "PASS: isolation.${name}"
  exit 0
fi
exit 1
