# shellcheck shell=bash
# shellcheck disable=SC2034  # the variables set here are read by the suites
# Helpers shared by the shell suites of test/ (and, through bench/lib.sh,
# by the bench scripts). Sourced, not run:
#
#   . "$(dirname "$0")/lib.sh"
#
# Every helper works under `set -u`. The state they share is in plain
# variables the suites read: $tmp (the suite's temporary directory),
# $status (the exit status of the last captured command), $n and $fails
# (checks run and failed). Sourcing defines functions and leaves a $tmp,
# $n or $fails the script already set as it was; it sets no trap.

# --- arguments and skips ---------------------------------------------------

# usage_unless CONDITION... -- USAGE: prints "usage: $0 USAGE" to stderr and
# exits 2 unless CONDITION (a command, e.g. `[ $# -eq 2 ]`) holds.
usage_unless() {
  local -a cond=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do cond+=("$1"); shift; done
  shift
  "${cond[@]}" && return 0
  echo "usage: $0 $*" >&2
  exit 2
}

# skip WHY: the suite cannot run here; CTest counts exit 77 as skipped.
skip() {
  echo "SKIP: $*"
  exit 77
}

# require_sentry SENTRY: skips (77) when SENTRY is not an executable; with
# COMPARE_REQUIRE_SENTRY=1 (the Bazel lane, where the binary is always
# built) a missing binary fails (1) instead.
require_sentry() {
  [ -x "$1" ] && return 0
  echo "SKIP: sentry binary not found or not executable: $1"
  [ "${COMPARE_REQUIRE_SENTRY:-0}" = 1 ] && exit 1
  exit 77
}

# require_built BINARY...: skips (77) unless every BINARY is executable.
require_built() {
  local b
  for b in "$@"; do
    [ -x "$b" ] || skip "$b not built"
  done
}

# sentry_probe SENTRY FLAG...: whether `SENTRY run FLAG... -- /bin/true`
# works here (the platform's own probe decides, e.g. for --platform=kvm or
# --systrap-patch=on). On failure $probe_why holds the first line of its
# stderr.
probe_why=${probe_why:-}
sentry_probe() {
  local sentry=$1 why
  shift
  if why=$("$sentry" run "$@" -- /bin/true 2>&1 >/dev/null </dev/null); then
    probe_why=
    return 0
  fi
  probe_why=$(printf '%s' "$why" | head -1)
  return 1
}

# platforms_here SENTRY: sets $platforms for sandboxd's --platforms:
# "systrap,kvm" where the kvm platform's probe passes, else "systrap" and
# a line saying why the kvm checks are skipped.
platforms=${platforms:-}
platforms_here() {
  platforms=systrap
  if sentry_probe "$1" --platform=kvm; then
    platforms=systrap,kvm
  else
    echo "SKIP kvm checks: the kvm platform is not usable here: $probe_why"
  fi
}

# --- the temporary directory and clean-up ----------------------------------

# make_tmp NAME: a fresh directory $tmp under $TMPDIR, removed at exit
# (after the on_exit actions) unless KEEP is 1 (make_tmp NAME 1).
lib_exit_actions=()
lib_keep_tmp=0
tmp=${tmp:-}
make_tmp() {
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
  lib_keep_tmp=${2:-0}
  trap lib_on_exit EXIT
}

# on_exit COMMAND: runs COMMAND (a string, eval'd) at exit, the last
# registered first, before $tmp is removed.
on_exit() {
  lib_exit_actions+=("$1")
  trap lib_on_exit EXIT
}

lib_on_exit() {
  local i
  for ((i = ${#lib_exit_actions[@]} - 1; i >= 0; i--)); do
    eval "${lib_exit_actions[$i]}"
  done
  if [ -n "$tmp" ] && [ "$lib_keep_tmp" != 1 ]; then rm -rf "$tmp"; fi
}

# stop_pid PID: kills PID (if it still runs) and reaps it. Quiet.
stop_pid() {
  [ -n "$1" ] || return 0
  kill "$1" 2>/dev/null
  wait "$1" 2>/dev/null
  return 0
}

# start_bg LOG COMMAND...: starts COMMAND in the background with stderr to
# LOG, stops it at exit; its pid is $bg_pid.
bg_pid=${bg_pid:-}
start_bg() {
  local log=$1
  shift
  "$@" 2>"$log" &
  bg_pid=$!
  on_exit "stop_pid $bg_pid"
}

# wait_for_daemon SANDBOXCTL SOCKET: waits up to 10 s until a sandboxd
# answers `ps` on SOCKET; fails if none does.
wait_for_daemon() {
  local _
  for _ in $(seq 1 200); do
    [ -S "$2" ] && "$1" --socket="$2" ps >/dev/null 2>&1 && return 0
    sleep 0.05
  done
  return 1
}

# --- running commands and checking what they did ---------------------------

# capture SECONDS COMMAND...: runs COMMAND under timeout with stdin from $IN
# (default /dev/null), stdout to $tmp/out and stderr to $tmp/err; sets
# $status. The outer 2>/dev/null swallows bash's own job reports
# ("Segmentation fault"), not the command's stderr.
capture() {
  local secs=$1
  shift
  {
    timeout -k 5 "$secs" "$@" <"${IN:-/dev/null}" >"$tmp/out" 2>"$tmp/err"
    status=$?
  } 2>/dev/null
}

# check DESCRIPTION COMMAND...: one TAP-like check, "ok N - ..." when
# COMMAND succeeds, else "not ok N - ..." followed, when CHECK_OUT_BYTES is
# set (and CHECK_ERR_BYTES, default the same), by $status and the first
# bytes of $tmp/out and $tmp/err.
n=${n:-0}
fails=${fails:-0}
check() {
  local what=$1
  shift
  n=$((n + 1))
  if "$@"; then
    echo "ok $n - $what"
  else
    echo "not ok $n - $what"
    if [ -n "${CHECK_OUT_BYTES:-}" ]; then
      echo "  status=$status"
      echo "  stdout: $(head -c "$CHECK_OUT_BYTES" "$tmp/out" | tr '\n' '|')"
      echo "  stderr: $(head -c "${CHECK_ERR_BYTES:-$CHECK_OUT_BYTES}" "$tmp/err" | tr '\n' '|')"
    fi
    fails=$((fails + 1))
  fi
}

# passed: prints "PASSED/RUN passed"; succeeds when no check failed.
passed() {
  echo "$((n - fails))/$n passed"
  [ "$fails" -eq 0 ]
}

# Conditions for check.
eq() { [ "$1" = "$2" ]; }
ge() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 >= b + 0) }'; }
lines() { wc -l <"$1" | tr -d ' '; }
contains() { grep -q -- "$2" "$1"; }
not_contains() { ! grep -q -- "$2" "$1"; }
not_contains_word() { ! grep -qwE -- "$2" "$1"; }
# until_true SECS COMMAND...: polls COMMAND every 0.1 s for SECS.
until_true() {
  local secs=$1 _
  shift
  for _ in $(seq 1 $((secs * 10))); do
    "$@" && return 0
    sleep 0.1
  done
  return 1
}
