#!/usr/bin/env bash
# compare.sh SENTRY PROG [ARGS...]
#
# Runs PROG natively and as `SENTRY run -- PROG ARGS`, with stdin from
# /dev/null (or $COMPARE_STDIN) and stdout/stderr captured to files, and
# compares stdout, stderr and the exit status. Prints a unified diff and exits
# 1 on any mismatch; exits 0 when both runs agree. Exits 77 (CTest: skipped)
# when SENTRY does not exist yet, unless COMPARE_REQUIRE_SENTRY=1.
#
# Both runs get the same fixed test variables (SBX_*): natively through
# `env -i`, in the sandbox through --env=K=V.
#
# Environment knobs:
#   COMPARE_SENTRY_FLAGS   extra flags for `sentry run` (e.g. --platform=systrap)
#   COMPARE_IGNORE_STDERR  program names (without .variant) whose stderr is not
#                          compared (default: "abort segv")
#   COMPARE_TIMEOUT        seconds per run (default 120)
#   COMPARE_STDIN          file to use as stdin (default /dev/null)
#   COMPARE_NAME           the program name when the file name is not <prog>.<variant>
#   COMPARE_BIND_CWD       program names that run in a directory of their own,
#                          bind-mounted (writable) in the sandbox at the same
#                          path; the files each run leaves there (as the host
#                          sees them) are appended to its stdout
#                          (default: "mmap_shared_file")
#   COMPARE_KEEP=1         keep the temp directory with the captured outputs
set -u
# shellcheck source=test/lib.sh
. "$(dirname "$0")/lib.sh"
usage_unless [ $# -ge 2 ] -- "SENTRY PROG [ARGS...]"
SENTRY=$1
shift
PROG=$1
shift

require_sentry "$SENTRY"
if [ ! -x "$PROG" ]; then
  echo "FAIL: test program not found: $PROG (build the test programs first)"
  exit 1
fi
PROG=$(readlink -f "$PROG")
SENTRY=$(readlink -f "$SENTRY")
name=$(basename "$PROG")
base=${COMPARE_NAME:-${name%%.*}} # hello.glibc -> hello
TIMEOUT=${COMPARE_TIMEOUT:-120}
STDIN=${COMPARE_STDIN:-/dev/null}
IGNORE_STDERR=${COMPARE_IGNORE_STDERR:-abort segv}
# shellcheck disable=SC2206
SENTRY_FLAGS=(${COMPARE_SENTRY_FLAGS:-})

# On the KVM platform, a host without a usable KVM skips the test with the
# platform's own one-line reason (its probe decides, not /dev/kvm's
# presence).
for f in "${SENTRY_FLAGS[@]}"; do
  if [ "$f" = "--platform=kvm" ]; then
    sentry_probe "$SENTRY" --platform=kvm || skip "the kvm platform is not usable here: $probe_why"
  fi
  if [ "$f" = "--systrap-patch=on" ]; then
    sentry_probe "$SENTRY" --systrap-patch=on || skip "syscall patching is not available here: $probe_why"
  fi
done

# The fixed environment both runs see.
TEST_ENV=("SBX_ALPHA=alpha" "SBX_SPACES=a b  c" "SBX_EMPTY=")
ENV_FLAGS=()
for kv in "${TEST_ENV[@]}"; do ENV_FLAGS+=("--env=$kv"); done

make_tmp "compare.$base" "${COMPARE_KEEP:-0}"
ulimit -c 0 # no core files from the crash tests

# run OUT_PREFIX CMD...: runs CMD in $tmp; sets $status. The outer 2>/dev/null
# swallows bash's own "Segmentation fault" job reports (not the program's
# stderr, which goes to the file).
RUN_DIR=$tmp
BIND_FLAGS=()
for p in ${COMPARE_BIND_CWD:-mmap_shared_file}; do
  if [ "$p" = "$base" ]; then
    RUN_DIR=$tmp/bind
    BIND_FLAGS=("--volume=$RUN_DIR:$RUN_DIR" "--cwd=$RUN_DIR")
  fi
done
run() {
  local out=$1
  shift
  rm -rf "$tmp/bind"
  mkdir -p "$RUN_DIR"
  {
    (cd "$RUN_DIR" && exec timeout -k 5 "$TIMEOUT" "$@") <"$STDIN" >"$out.stdout" 2>"$out.stderr"
    status=$?
  } 2>/dev/null
  if [ "$RUN_DIR" != "$tmp" ]; then
    local f
    for f in "$RUN_DIR"/*; do
      [ -f "$f" ] || continue
      printf 'host file %s: %s bytes, sha256 %s, text: %s\n' "${f##*/}" \
        "$(stat -c %s "$f")" "$(sha256sum <"$f" | cut -c1-16)" \
        "$(tr -c '[:alnum:]-' ' ' <"$f" | tr -s ' ')" >>"$out.stdout"
    done
  fi
}

run "$tmp/native" env -i "${TEST_ENV[@]}" "$PROG" "$@"
native_status=$status
run "$tmp/sandbox" "$SENTRY" run "${SENTRY_FLAGS[@]}" "${BIND_FLAGS[@]}" "${ENV_FLAGS[@]}" -- "$PROG" "$@"
sandbox_status=$status

fail=0
if [ "$native_status" = 124 ]; then
  echo "FAIL: native run timed out after ${TIMEOUT}s (test program broken?)"
  fail=1
fi
if grep -q '^RESULT: FAIL' "$tmp/native.stdout"; then
  echo "FAIL: the native run itself reports failures; the test program is wrong on this host:"
  grep ': FAIL' "$tmp/native.stdout" | sed 's/^/  /'
  fail=1
fi
if [ "$sandbox_status" = 124 ]; then
  echo "FAIL: sandbox run timed out after ${TIMEOUT}s"
fi
if [ "$native_status" != "$sandbox_status" ]; then
  echo "FAIL: exit status differs: native=$native_status sandbox=$sandbox_status"
  fail=1
fi
if ! diff -u --label "native stdout" --label "sandbox stdout" "$tmp/native.stdout" "$tmp/sandbox.stdout" >"$tmp/stdout.diff"; then
  echo "FAIL: stdout differs:"
  head -c 20000 "$tmp/stdout.diff"
  fail=1
fi
compare_stderr=1
for p in $IGNORE_STDERR; do
  if [ "$p" = "$base" ]; then compare_stderr=0; fi
done
if [ $compare_stderr = 1 ]; then
  if ! diff -u --label "native stderr" --label "sandbox stderr" "$tmp/native.stderr" "$tmp/sandbox.stderr" >"$tmp/stderr.diff"; then
    echo "FAIL: stderr differs:"
    head -c 20000 "$tmp/stderr.diff"
    fail=1
  fi
fi

if [ $fail = 0 ]; then
  echo "PASS: $name (exit status $native_status, $(wc -c <"$tmp/native.stdout") bytes of stdout)"
  exit 0
fi
if [ $compare_stderr = 0 ] && [ -s "$tmp/sandbox.stderr" ]; then
  echo "(sandbox stderr, not compared:)"
  head -c 4000 "$tmp/sandbox.stderr"
fi
echo "command: $(printf '%q ' "$SENTRY" run "${SENTRY_FLAGS[@]}" "${BIND_FLAGS[@]}" "${ENV_FLAGS[@]}" -- "$PROG" "$@")"
[ "${COMPARE_KEEP:-0}" = 1 ] && echo "outputs kept in $tmp"
exit 1
