#!/usr/bin/env bash
# Smoke run of bench/servers.sh: every configuration, a few seconds each
# (1000 redis requests, 1 s of wrk, 1 s of iperf3 each way); checks only
# that the table comes out with every row and that native and both
# sandboxd columns have a figure in each (runsc's columns may say "fail":
# Debian's runsc is the peer, not the subject). No timing asserts (the
# machine is shared). Its ports are the bench's plus 50 (SERVERS_PORT_OFFSET),
# so that a bench run at the same time does not collide with it.
#
#   servers_smoke.sh SANDBOXD SANDBOXCTL SENTRY
#
# Exits 77 (CTest: skipped) when a binary or a server program is missing
# or not root (runsc and the netstack namespace need it); under Bazel
# (TEST_SRCDIR set), which has no "skipped", it says why and passes
# instead.
set -u
sandboxd=$1 sandboxctl=$2 sentry=$3
here=$(cd "$(dirname "$0")" && pwd)
skip() {
  echo "SKIP: $*"
  if [ -n "${TEST_SRCDIR:-}" ]; then exit 0; fi
  exit 77
}
for b in "$sandboxd" "$sandboxctl" "$sentry"; do [ -x "$b" ] || skip "no $b"; done
for p in redis-server redis-benchmark redis-cli nginx wrk curl pasta iperf3 ip runsc; do
  PATH=$PATH:/usr/sbin command -v "$p" >/dev/null || skip "no $p (tools/install_deps.sh)"
done
[ "$(id -u)" = 0 ] || skip "needs root (runsc, a network namespace for its netstack)"

out=$(SANDBOXD=$sandboxd SANDBOXCTL=$sandboxctl SENTRY=$sentry REDIS_N=1000 WRK_SECONDS=1 \
  IPERF_SECONDS=1 SERVERS_WAIT=120 SERVERS_PORT_OFFSET=${SERVERS_PORT_OFFSET:-50} "$here/servers.sh" 2>&1)
rc=$?
echo "$out"
fail() { echo "FAIL: $*"; exit 1; }
[ $rc = 0 ] || fail "servers.sh exited $rc"
grep -q '^| requests/s or Mbit/s (ratio to native) | native | sandboxd, sandbox mode' <<<"$out" ||
  fail "no table header"
num='[0-9][0-9.]*'
for row in "redis-benchmark SET" "redis-benchmark GET" "nginx 10 KiB, wrk 1 conn" \
  "nginx 10 KiB, wrk 100 conns" "iperf3 upload" "iperf3 download"; do
  line=$(grep -F "| $row" <<<"$out") || fail "no row '$row'"
  # native | sandbox mode | host mode | runsc host | runsc netstack
  grep -Eq "^\| $row[^|]* \| $num \| $num \([0-9.]+\) \| $num \([0-9.]+\) \| [^|]+ \| [^|]+ \|$" \
    <<<"$line" || fail "row '$row' lacks a native or sandboxd figure: $line"
done
echo PASS
