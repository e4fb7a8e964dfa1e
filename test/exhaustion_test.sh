#!/usr/bin/env bash
# exhaustion_test.sh SANDBOXD SANDBOXCTL SENTRY BINDIR
#
# The Sentry survives host exhaustion (test/programs/{fork,thread,mem}_bomb.c,
# built into BINDIR as *.glibc):
#   - `sentry run --pids=5|200`: fork and thread bombs see EAGAIN, every
#     child and thread is reaped, the Sentry exits with the bomb's status
#   - `sentry run` inside a host pids cgroup smaller than the bomb wants
#     (where this host lets us make one): the host's refusals (a Sentry
#     thread, a stub process, a stub worker for a spinning thread) become
#     EAGAIN, the bomb joins what it got and exits 0, never an abort
#   - `sentry run --memory`: the Sentry's OOM killer: a bomb init exits
#     137 with "out of memory"; a bomb child is killed by SIGKILL and its
#     parent says so and allocates on; RLIMIT_AS gives mmap ENOMEM
#   - `sentry run` with a low RLIMIT_NOFILE of its own: an fd-hungry
#     program sees EMFILE/ENFILE/ENOMEM, never an abort, and works after
#   - through sandboxd (--pids=5|200): the same bombs, while a bystander
#     sandbox is created, run and checked beside them, and after them
#   - memory bombs under --memory=64m (a cgroup): the init bomb exits 137
#     with the reason in the exit status (run's stderr, inspect), a bomb
#     child's parent reports it; the daemon and a bystander keep working
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
  for bomb in fork_bomb thread_bomb "thread_bomb spin"; do
    set -- $bomb
    capture 180 sh -c 'echo $$ >"$1/cgroup.procs" && shift && exec "$@"' \
      sh "$cg" "$SENTRY" run --rootfs=/ -- "$BIN/$1.glibc" 0.5 ${2:-}
    check "host pids.max=40, $bomb: the Sentry did not abort" no_abort "$tmp/err"
    # The host's refusal (of a Sentry thread, a stub process, or a stub
    # worker for a thread that spins) is the clone's EAGAIN: the bomb
    # joins what it got and exits 0, never killed.
    check "host pids.max=40, $bomb: exit 0" eq "$status" 0
    check "host pids.max=40, $bomb: EAGAIN" contains "$tmp/out" "first failure EAGAIN"
    check "host pids.max=40, $bomb: all joined or reaped" \
      grep -qE 'joined all|reaped all' "$tmp/out"
    echo "# host pids.max=40, $bomb: $(grep -E 'threads|children|forks' "$tmp/out" | head -1)"
  done
  set --
else
  echo "# no v1 pids cgroup to make here: host refusal checks skipped"
fi

# The Sentry's OOM killer (--memory: the application's share of it is the
# limit less the Sentry's reserve; no cgroup here, the accounting alone).
capture 180 "$SENTRY" run --rootfs=/ --memory=$((96 << 20)) -- "$BIN/mem_bomb.glibc" 1024
check "sentry run --memory=96m mem_bomb (init): exit 137" eq "$status" 137
check "sentry run --memory=96m mem_bomb (init): the reason" \
  contains "$tmp/err" "out of memory: init was killed"
check "sentry run --memory=96m mem_bomb (init): no abort" no_abort "$tmp/err"
capture 180 "$SENTRY" run --rootfs=/ --memory=$((96 << 20)) -- "$BIN/mem_bomb.glibc" 1024 child
check "sentry run --memory=96m mem_bomb child: exit 0" eq "$status" 0
check "sentry run --memory=96m mem_bomb child: killed by SIGKILL" \
  contains "$tmp/out" "child killed by signal 9"
check "sentry run --memory=96m mem_bomb child: the parent allocates after" \
  contains "$tmp/out" "parent allocates after"
check "sentry run --memory=96m mem_bomb child: the kill is logged" \
  contains "$tmp/err" "out of memory: the sandbox's memory limit"
capture 120 "$SENTRY" run --rootfs=/ -- "$BIN/mem_bomb.glibc" 1024 rlimit
check "RLIMIT_AS 64 MiB: mmap fails with ENOMEM (exit 0)" eq "$status" 0
check "RLIMIT_AS 64 MiB: ENOMEM" contains "$tmp/out" "mem_bomb: ENOMEM after"

# The host's descriptors: the Sentry's own RLIMIT_NOFILE low (the program
# may raise its own to 4096): every refusal is the program's EMFILE,
# ENFILE or ENOMEM, and everything works afterwards.
capture 180 prlimit --nofile=160:4096 "$SENTRY" run --rootfs=/ -- "$BIN/fd_bomb.glibc"
check "RLIMIT_NOFILE 160: fd_bomb exit 0" eq "$status" 0
check "RLIMIT_NOFILE 160: fd_bomb works after" contains "$tmp/out" "works after"
check "RLIMIT_NOFILE 160: no abort" no_abort "$tmp/err"
grep 'fd_bomb:' "$tmp/err" | sed 's/^/# /'

# kvm: the host refuses a vCPU (KVM_CREATE_VCPU past KVM_CAP_MAX_VCPUS,
# 1024 on most hosts): each task holds one, so a thread bomb meets the
# refusal, which must be the clone's EAGAIN, counted in
# KvmStats.vcpus_refused, with every thread joined.
if sentry_probe "$SENTRY" --platform=kvm; then
  max_vcpus=$(/usr/bin/python3 -c 'import fcntl, os
print(fcntl.ioctl(os.open("/dev/kvm", os.O_RDWR), 0xAE03, 66))' 2>/dev/null || echo "?")
  capture 300 "$SENTRY" run --platform=kvm --rootfs=/ --pids=8192 \
    --stats-json="$tmp/kvm.json" -- "$BIN/thread_bomb.glibc" 0.5
  check "kvm thread_bomb (KVM_CAP_MAX_VCPUS $max_vcpus): exit 0" eq "$status" 0
  check "kvm thread_bomb: EAGAIN" contains "$tmp/out" "first failure EAGAIN"
  check "kvm thread_bomb: all joined" contains "$tmp/out" "joined all"
  check "kvm thread_bomb: no abort" no_abort "$tmp/err"
  refused=$(/usr/bin/python3 -c 'import json, sys
print(int(json.load(open(sys.argv[1]))["kvm"].get("vcpus_refused", 0)))' "$tmp/kvm.json" 2>/dev/null || echo 0)
  check "kvm thread_bomb: the host's vCPU refusals counted ($refused)" ge "$refused" 1
  grep 'thread_bomb:' "$tmp/out" | sed 's/^/# /'
else
  echo "SKIP kvm vCPU refusal: $probe_why"
fi

# Through the daemon, with a bystander beside every bomb.
ctl() { capture 120 "$SANDBOXCTL" --socket="$SOCK" "$@"; }
start_bg "$tmp/daemon.log" "$SANDBOXD" --sentry="$SENTRY" --socket="$SOCK" \
  --state-dir="$tmp/state" --pool-size=1 --platforms=systrap \
  --cgroup-parent="exhaustion-test-$$" --metrics-address=127.0.0.1:0 \
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
  # A bomb init: the Sentry's OOM killer, not the host's (which would end
  # the Sentry): 137 with the reason; inspect keeps it.
  "$SANDBOXCTL" --socket="$SOCK" run --memory=64m -- \
    "$BIN/mem_bomb.glibc" 1024 >"$tmp/bomb.out" 2>"$tmp/bomb.err" &
  bomb_pid=$!
  sleep 0.5
  bystander "beside a mem_bomb (--memory=64m)"
  wait $bomb_pid
  status=$?
  cp "$tmp/bomb.err" "$tmp/err"
  check "sandboxd --memory=64m mem_bomb: exit 137" eq "$status" 137
  check "sandboxd --memory=64m mem_bomb: the reason" \
    contains "$tmp/bomb.err" "out of memory"
  oom_id=$(sed -n 's/^sandboxctl: sandbox \([^:]*\): out of memory.*/\1/p' "$tmp/bomb.err" | head -1)
  if [ -n "$oom_id" ]; then
    ctl inspect "$oom_id"
    check "sandboxd --memory=64m mem_bomb: inspect shows the reason" \
      contains "$tmp/out" '"reason": "out of memory'
    ctl rm "$oom_id"
  else
    check "sandboxd --memory=64m mem_bomb: the sandbox id in the reason" false
  fi
  ctl run --rm --memory=64m -- "$BIN/mem_bomb.glibc" 1024 child
  check "sandboxd --memory=64m mem_bomb child: exit 0" eq "$status" 0
  check "sandboxd --memory=64m mem_bomb child: killed by SIGKILL" \
    contains "$tmp/out" "child killed by signal 9"
  bystander "after a mem_bomb"
  # The Sentries' OOM kills reach /metrics (SentryStats.oom_kills, asked
  # for when each sandbox is destroyed).
  metrics=$(sed -n 's|.*metrics at \(http://[^ ]*/metrics\).*|\1|p' "$tmp/daemon.log" | head -1)
  oom_kills=$(/usr/bin/python3 -c 'import sys, urllib.request
for l in urllib.request.urlopen(sys.argv[1], timeout=10).read().decode().splitlines():
    if l.startswith("sandboxd_oom_kills_total "): print(int(float(l.split()[1])))' \
    "$metrics" 2>/dev/null)
  check "/metrics: sandboxd_oom_kills_total ${oom_kills:-absent} >= 2" ge "${oom_kills:-0}" 2
fi
check "the daemon lives" kill -0 "$bg_pid"
check "no Sentry aborted" no_abort "$tmp/daemon.log"
passed
