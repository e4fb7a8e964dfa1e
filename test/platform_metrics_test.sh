#!/usr/bin/env bash
# platform_metrics_test.sh SANDBOXD SANDBOXCTL SENTRY GETPID
#
# The platforms' counters at sandboxd's /metrics (daemon/README.md,
# "platform metrics"), end to end: a real sandboxd serving /metrics,
# sandboxes running GETPID (bench_getpid: N raw getpid syscalls), then:
#   - sentry run --stats-json writes the same counters as JSON
#   - systrap: the hand-over histograms both ways grew by at least one
#     count per syscall; fast-path evaluations counted; a live sandbox has
#     its gauges (id-labelled) after the daemon's stats poll, and they are
#     gone after rm while the counters stay
#   - kvm, where its probe passes: exits by reason (syscall >= N), the VM
#     and vCPU 0 creation times observed, the flavour; where it does not,
#     no sandboxd_kvm_* family at all
# Exits 77 (CTest: skipped) until the binaries exist.
set -u
# shellcheck source=test/lib.sh
. "$(dirname "$0")/lib.sh"
usage_unless [ $# -eq 4 ] -- "SANDBOXD SANDBOXCTL SENTRY GETPID"
require_built "$@"
command -v curl >/dev/null || skip "no curl"
SANDBOXD=$(readlink -f "$1")
SANDBOXCTL=$(readlink -f "$2")
SENTRY=$(readlink -f "$3")
GETPID=$(readlink -f "$4")
make_tmp platform_metrics_test
SOCK=$tmp/sandboxd.sock
ctl() { capture 120 "$SANDBOXCTL" --socket="$SOCK" "$@"; }
# value SERIES: the sample of SERIES (exact text, labels included) in the
# last scrape, 0 when absent.
scrape() { curl -s "http://$metrics/metrics" >"$tmp/metrics"; }
value() {
  awk -v s="$1" '$1 == s { v = $2 } END { print (v == "" ? 0 : v) }' "$tmp/metrics"
}
has() { grep -q -F -- "$1" "$tmp/metrics"; }
plus() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.0f", a + b }'; }

# Without the daemon: sentry run --stats-json.
timeout 120 "$SENTRY" run --stats-json="$tmp/stats.json" -- "$GETPID" 1000 >/dev/null 2>"$tmp/err"
status=$?
check "sentry run --stats-json: exit 0" eq "$status" 0
check "sentry run --stats-json: names the platform" grep -q '"platform":"systrap"' "$tmp/stats.json"
check "sentry run --stats-json: hand-over histograms" grep -q '"latency_log2_ns":\[' "$tmp/stats.json"
timeout 60 "$SENTRY" run --stats-json=/nonexistent/dir/x -- /bin/true >/dev/null 2>"$tmp/err"
check "sentry run --stats-json to a bad path: 125" eq "$?" 125

platforms_here "$SENTRY"
start_bg "$tmp/daemon.log" "$SANDBOXD" --sentry="$SENTRY" --socket="$SOCK" --state-dir="$tmp/state" \
  --pool-size=1 --platforms="$platforms" --no-cgroups --metrics-address=127.0.0.1:0 \
  --default-rootfs=/ --shutdown-kill
wait_for_daemon "$SANDBOXCTL" "$SOCK"
metrics=$(sed -n 's|.*metrics at http://\([^/]*\)/metrics.*|\1|p' "$tmp/daemon.log" | head -1)
if [ -z "$metrics" ]; then
  echo "not ok - sandboxd did not say where its metrics are"
  cat "$tmp/daemon.log"
  exit 1
fi

N=20000
scrape
to_sentry0=$(value 'sandboxd_systrap_handover_seconds_count{to="sentry"}')
to_stub0=$(value 'sandboxd_systrap_handover_seconds_count{to="stub"}')
ctl run --rm -- "$GETPID" "$N"
check "systrap: the getpid loop ran" eq "$status" 0
scrape
to_sentry=$(value 'sandboxd_systrap_handover_seconds_count{to="sentry"}')
to_stub=$(value 'sandboxd_systrap_handover_seconds_count{to="stub"}')
check "systrap: hand-overs to the Sentry counted (>= $N new; $to_sentry0 -> $to_sentry)" \
  ge "$to_sentry" "$(plus "$to_sentry0" "$N")"
check "systrap: hand-overs to the stub counted (>= $N new; $to_stub0 -> $to_stub)" \
  ge "$to_stub" "$(plus "$to_stub0" "$N")"
check "systrap: histogram buckets in seconds, +Inf = count" \
  eq "$(value 'sandboxd_systrap_handover_seconds_bucket{to="sentry",le="+Inf"}')" "$to_sentry"
check "systrap: fast-path evaluations counted" \
  ge "$(value sandboxd_systrap_fastpath_evaluations_total)" 1
check "systrap: run --rm leaves no per-sandbox series" \
  eq "$(grep -c '^sandboxd_systrap_stub_threads_awake{' "$tmp/metrics")" 0

# A live sandbox: its gauges appear at the daemon's next stats poll (5 s).
ctl run -d --name=live -- /bin/sleep 600
check "run -d: started" eq "$status" 0
for _ in $(seq 1 30); do
  scrape
  has 'sandboxd_systrap_stub_threads_awake{id="live"}' && break
  sleep 0.5
done
check "live sandbox: platform info" \
  eq "$(value 'sandboxd_sandbox_platform_info{flavour="",id="live",platform="systrap"}')" 1
check "live sandbox: stub threads awake gauge" has 'sandboxd_systrap_stub_threads_awake{id="live"}'
check "live sandbox: contexts queued gauge" has 'sandboxd_systrap_contexts_queued{id="live"}'
check "live sandbox: fast-path state of both sides" \
  eq "$(grep -c '^sandboxd_systrap_fastpath_spinning{id="live"' "$tmp/metrics")" 2
ctl rm -f live
scrape
check "rm: the sandbox's series are gone" \
  eq "$(grep -c 'id="live"' "$tmp/metrics")" 0
check "rm: the counters stay" ge "$(value 'sandboxd_systrap_handover_seconds_count{to="sentry"}')" "$to_sentry"

if [ "$platforms" = systrap,kvm ]; then
  ctl run --rm --platform=kvm -- "$GETPID" "$N"
  check "kvm: the getpid loop ran" eq "$status" 0
  scrape
  check "kvm: syscall exits (>= $N)" ge "$(value 'sandboxd_kvm_exits_total{reason="syscall"}')" "$N"
  check "kvm: every reason is exported" \
    eq "$(grep -c '^sandboxd_kvm_exits_total{reason=' "$tmp/metrics")" 6
  check "kvm: VM creation observed" ge "$(value sandboxd_kvm_vm_create_seconds_count)" 1
  check "kvm: vCPU 0 creation observed" ge "$(value sandboxd_kvm_vcpu0_create_seconds_count)" 1
  check "kvm: memory slots added" ge "$(value sandboxd_kvm_memslot_adds_total)" 2
else
  scrape
  check "kvm not offered: no sandboxd_kvm_ family exported" \
    eq "$(grep -c '^\(# [A-Z]* \)\?sandboxd_kvm_' "$tmp/metrics")" 0
fi

passed
