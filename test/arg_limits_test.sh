#!/usr/bin/env bash
# arg_limits_test.sh SANDBOXD SANDBOXCTL SENTRY
#
# argv and environment through the API take what Linux's execve takes:
#   - ~1.5 MiB of environment (12 strings of 120 KiB, --env-file) reaches
#     the program whole
#   - one string of 200 KiB (more than MAX_ARG_STRLEN, 128 KiB) is refused
#     with an error that names the field and says E2BIG
# Exits 77 (CTest: skipped) until the binaries exist.
set -u
# shellcheck source=test/lib.sh
. "$(dirname "$0")/lib.sh"
usage_unless [ $# -eq 3 ] -- "SANDBOXD SANDBOXCTL SENTRY"
require_built "$@"
SANDBOXD=$(readlink -f "$1")
SANDBOXCTL=$(readlink -f "$2")
SENTRY=$(readlink -f "$3")
make_tmp arg_limits_test
SOCK=$tmp/sandboxd.sock
CHECK_OUT_BYTES=300
ctl() { capture 120 "$SANDBOXCTL" --socket="$SOCK" "$@"; }
start_bg "$tmp/daemon.log" "$SANDBOXD" --sentry="$SENTRY" --socket="$SOCK" \
  --state-dir="$tmp/state" --pool-size=1 --platforms=systrap \
  --cgroup-parent="arg-limits-test-$$" \
  --default-rootfs=/ --shutdown-kill
wait_for_daemon "$SANDBOXCTL" "$SOCK"

value=$(head -c $((120 * 1024)) /dev/zero | tr '\0' v)
for i in $(seq 0 11); do echo "V$i=$value"; done >"$tmp/big.env"
ctl run --rm --env-file="$tmp/big.env" -- /bin/sh -c 'echo ${#V0} ${#V11}'
check "1.5 MiB of environment: exit 0" eq "$status" 0
check "1.5 MiB of environment: every string whole" \
  eq "$(cat "$tmp/out")" "122880 122880"

echo "LONG=$(head -c $((200 * 1024)) /dev/zero | tr '\0' x)" >"$tmp/long.env"
ctl run --rm --env-file="$tmp/long.env" -- /bin/true
check "a 200 KiB string: refused" ge "$status" 1
check "a 200 KiB string: the field is named" contains "$tmp/err" "env\[0\]"
check "a 200 KiB string: E2BIG" contains "$tmp/err" "E2BIG"
passed
