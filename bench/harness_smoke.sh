#!/usr/bin/env bash
# Smoke run of bench/harness.sh: two short configurations, native and the
# sentry's adaptive fast path; checks that the table comes out with a row per
# run and every sandbox reporting. No timing asserts (the machine is shared).
#
#   harness_smoke.sh SENTRY WORKLOAD_BINARY
#
# Exits 77 (CTest: skipped) when a binary is missing or there is no cgroup
# cpu controller we may use (not root); under Bazel (TEST_SRCDIR set), which
# has no "skipped", it says why and passes instead.
set -u
sentry=$1 workload=$2
here=$(cd "$(dirname "$0")" && pwd)
skip() {
  echo "SKIP: $*"
  if [ -n "${TEST_SRCDIR:-}" ]; then exit 0; fi
  exit 77
}
[ -x "$sentry" ] || skip "no sentry at $sentry"
[ -x "$workload" ] || skip "no workload at $workload"
[ "$(id -u)" = 0 ] || skip "needs root for cgroups"
probe=$(awk '$3 == "cgroup" && $4 ~ /(^|,)cpu(,|$)/ {print $2; exit}' /proc/mounts)
if [ -n "$probe" ]; then
  mkdir "$probe/sbx-harness-probe-$$" 2>/dev/null || skip "cannot create a cgroup in $probe"
  rmdir "$probe/sbx-harness-probe-$$"
fi

out=$(SENTRY=$sentry HARNESS_WORKLOAD=$workload HARNESS_SECONDS=${HARNESS_SECONDS:-4} \
  HARNESS_CONFIGS="tick10ms:2:1 getppid:1:0.5" HARNESS_MODES="native adaptive" \
  "$here/harness.sh" 2>&1)
rc=$?
echo "$out"
case $out in *"no cgroup cpu controller"* | *"cannot enable the cpu controller"*) skip "no cgroup cpu controller" ;; esac
fail() { echo "FAIL: $*"; exit 1; }
[ $rc = 0 ] || fail "harness.sh exited $rc"
grep -q '^workload .* ovh/app .* cs/s' <<<"$out" || fail "no table header"
for row in "tick10ms +2 +1 native +2/2" "tick10ms +2 +1 adaptive +2/2" \
  "getppid +1 +0.5 native +1/1" "getppid +1 +0.5 adaptive +1/1"; do
  grep -Eq "^$row +[0-9]+ " <<<"$out" || fail "no complete row '$row'"
done
grep -q '^failures:' <<<"$out" && fail "runs failed"
echo PASS
