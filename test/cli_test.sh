#!/usr/bin/env bash
# cli_test.sh SENTRY TEST_BIN_DIR
#
# Behaviour of the `sentry run` command line:
#   - missing program: 127 and exactly one line on stderr
#   - unknown flag, no program: 125 (usage errors)
#   - exit status propagation: 42, 139 (SIGSEGV), 134 (SIGABRT)
#   - stdin pass-through (small and 1 MiB, binary-safe)
#   - --env and argument pass-through
# Exits 77 (CTest: skipped) when SENTRY does not exist yet.
set -u
# shellcheck source=test/lib.sh
. "$(dirname "$0")/lib.sh"
usage_unless [ $# -eq 2 ] -- "SENTRY TEST_BIN_DIR"
SENTRY=$1
BIN=$2
require_sentry "$SENTRY"
SENTRY=$(readlink -f "$SENTRY")
BIN=$(readlink -f "$BIN")
make_tmp cli_test
ulimit -c 0
CHECK_OUT_BYTES=300

# sentry ARGS...: runs `timeout SENTRY ARGS` with stdin from $IN (default
# /dev/null); sets $status, $tmp/out, $tmp/err.
IN=/dev/null
sentry() { capture 60 "$SENTRY" "$@"; }

sentry run -- /nonexistent/program
check "run -- /nonexistent exits 127" eq "$status" 127
check "run -- /nonexistent prints exactly one line on stderr" eq "$(lines "$tmp/err")" 1
check "run -- /nonexistent prints nothing on stdout" eq "$(lines "$tmp/out")" 0

sentry run --bogus-flag -- /bin/true
check "run --bogus-flag exits 125" eq "$status" 125

sentry run
check "run with no program exits 125" eq "$status" 125
sentry run --
check "run -- with no program exits 125" eq "$status" 125
sentry
check "no subcommand exits 125" eq "$status" 125
sentry bogus-subcommand
check "unknown subcommand exits 125" eq "$status" 125

sentry run -- "$BIN/hello.glibc"
check "hello: exit 0" eq "$status" 0
check "hello: output" eq "$(cat "$tmp/out")" "hello, world"

sentry run -- "$BIN/exit_code.glibc"
check "exit_code.glibc: exit status 42" eq "$status" 42
check "exit_code.glibc: output flushed" eq "$(cat "$tmp/out")" "exiting with 42"
sentry run -- "$BIN/exit_code.musl"
check "exit_code.musl: exit status 42" eq "$status" 42
sentry run -- "$BIN/segv.glibc"
check "segv.glibc: exit status 139 (SIGSEGV)" eq "$status" 139
sentry run -- "$BIN/segv.musl"
check "segv.musl: exit status 139 (SIGSEGV)" eq "$status" 139
sentry run -- "$BIN/abort.glibc"
check "abort.glibc: exit status 134 (SIGABRT)" eq "$status" 134

IN=$tmp/hi
echo hi >"$IN"
sentry run -- "$BIN/cat.glibc"
check "stdin pass-through: echo hi | sentry run -- cat" eq "$(cat "$tmp/out")" "hi"
echo hi | timeout 60 "$SENTRY" run -- "$BIN/cat.musl" >"$tmp/out" 2>"$tmp/err"
status=$?
check "stdin from a pipe: echo hi | sentry run -- cat.musl" eq "$(cat "$tmp/out")/$status" "hi/0"
IN=$tmp/big
head -c $((1 << 20)) /dev/urandom >"$IN"
sentry run -- "$BIN/cat.glibc"
check "1 MiB of binary stdin comes back unchanged" cmp -s "$IN" "$tmp/out"
IN=/dev/null

sentry run --env=SBX_ALPHA=from-flag -- "$BIN/args_env_auxv.glibc" one "two words"
check "--env and arguments reach the program" \
  grep -qx 'SBX_ALPHA=from-flag' "$tmp/out"
check "arguments with spaces survive" grep -qx 'argv\[2\]: "two words"' "$tmp/out"

passed
