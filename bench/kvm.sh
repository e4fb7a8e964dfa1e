#!/usr/bin/env bash
# bench/kvm.sh — the kvm platform against systrap, and against its own
# previous behaviours, in one run. Four tables:
#
#  1. getpid round trip (ns/call, bench_getpid): native, systrap, kvm, and
#     kvm with the FPU state loaded and saved on every Switch
#     (--kvm-fpu=eager, the behaviour before the lazy xsave).
#  2. fork/exec-heavy work: bench_workloads fork and forkexec (ns/op) and
#     the wall time of `sh -c 'for i in 1 2 3 4 5; do ls / | wc -l; done'`:
#     systrap, kvm, and kvm flushing the whole shadow MMU on every stale
#     page-table entry (--kvm-shadow=flush, the behaviour before the zaps).
#  3. `sentry run -- /bin/true`, wall (ms): systrap, kvm with the vCPU pool
#     made in the background (default) and made on the path
#     (--kvm-vcpu-pool=eager).
#  4. Through sandboxd with a warm pool, `sandboxctl run --rm -- /bin/true`
#     (ms, wall; the daemon's create and Start call from --timings; and the
#     rest, sandboxctl's own start, channel and exit): systrap, kvm, kvm
#     with the eager pool (a wrapper adds the flag to `sentry serve`).
#
# Every figure is a median; the configurations of a table run interleaved
# (one of each per round). Ratios are to the first row of the table.
# Prints the load (uptime) at the start and the end: figures of a loaded
# machine are only comparable within this run.
#
# Environment:
#   REPS=7             rounds of tables 1-3
#   N=30               runs per configuration of table 4
#   N_GETPID=20000     getpid calls per run in the sandbox (native: 50x)
#   N_FORK=200         fork/forkexec operations per run
#   POOL_WAIT=0.3      seconds between table-4 runs (the pool refills)
#   SENTRY=… SANDBOXD=… SANDBOXCTL=… BENCH_GETPID=… BENCH_WORKLOADS=…
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
REPS=${REPS:-7}
N=${N:-30}
N_GETPID=${N_GETPID:-20000}
N_FORK=${N_FORK:-200}
POOL_WAIT=${POOL_WAIT:-0.3}
SENTRY=${SENTRY:-$ROOT/out/bin/sentry}
SANDBOXD=${SANDBOXD:-$ROOT/out/bin/sandboxd}
SANDBOXCTL=${SANDBOXCTL:-$ROOT/out/bin/sandboxctl}
GETPID=${BENCH_GETPID:-$ROOT/out/bin/bench_getpid}
WORKLOADS=${BENCH_WORKLOADS:-$ROOT/out/bin/bench_workloads}
TIMEOUT=${BENCH_TIMEOUT:-120}

for b in "$SENTRY" "$GETPID" "$WORKLOADS"; do
  [ -x "$b" ] || { echo "$b not found; build first (see bench/README.md)" >&2; exit 1; }
done
tmp=$(mktemp -d "${TMPDIR:-/tmp}/bench_kvm.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do stop_pid "$p"; done
  rm -rf "$tmp"
}
trap cleanup EXIT

if ! sentry_probe "$SENTRY" --platform=kvm; then
  echo "the kvm platform is not usable here: $probe_why" >&2
  exit 1
fi
echo "load at start: $(uptime)"

# timed FILE CMD...: appends the wall time of CMD (ms), or "fail".
timed() {
  local out=$1 t0 t1
  shift
  t0=$EPOCHREALTIME
  if timeout -k 5 "$TIMEOUT" "$@" </dev/null >/dev/null 2>>"$tmp/errors"; then
    t1=$EPOCHREALTIME
    awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f\n", (b - a) * 1000 }' >>"$out"
  else
    echo fail >>"$out"
  fi
}

# figure FILE KEY CMD...: appends the value printed after KEY, or "fail".
figure() {
  local out=$1 key=$2 v
  shift 2
  v=$(timeout -k 5 "$TIMEOUT" "$@" </dev/null 2>>"$tmp/errors" | awk -v k="$key" '$1 == k {print $2}' | tail -1)
  echo "${v:-fail}" >>"$out"
}

# table TITLE UNIT NAME...: one row per NAME (file $tmp/NAME), ratio to the
# first.
table() {
  local title=$1 unit=$2 first
  shift 2
  first=$(median "$tmp/$1")
  printf '\n%-52s %10s %12s %8s\n' "$title" "$unit" "spread" "ratio"
  for n in "$@"; do
    printf '%-52s %10s %12s %8s\n' "${n#*.}" "$(median "$tmp/$n")" "$(spread "$tmp/$n")" \
      "$(ratio "$(median "$tmp/$n")" "$first")"
  done
}

S="$SENTRY run"
K="$SENTRY run --platform=kvm"
loop='for i in 1 2 3 4 5; do ls / | wc -l; done'
echo "tables 1-3: $REPS interleaved rounds (this takes a while)" >&2
for _ in $(seq 1 "$REPS"); do
  figure "$tmp/g.native" ns_per_call "$GETPID" $((N_GETPID * 50))
  figure "$tmp/g.systrap" ns_per_call $S -- "$GETPID" "$N_GETPID"
  figure "$tmp/g.kvm" ns_per_call $K -- "$GETPID" "$N_GETPID"
  figure "$tmp/g.kvm --kvm-fpu=eager" ns_per_call $K --kvm-fpu=eager -- "$GETPID" "$N_GETPID"

  figure "$tmp/f.systrap" ns_per_op $S -- "$WORKLOADS" fork "$N_FORK"
  figure "$tmp/f.kvm" ns_per_op $K -- "$WORKLOADS" fork "$N_FORK"
  figure "$tmp/f.kvm --kvm-shadow=flush" ns_per_op $K --kvm-shadow=flush -- "$WORKLOADS" fork "$N_FORK"
  figure "$tmp/x.systrap" ns_per_op $S -- "$WORKLOADS" forkexec "$N_FORK"
  figure "$tmp/x.kvm" ns_per_op $K -- "$WORKLOADS" forkexec "$N_FORK"
  figure "$tmp/x.kvm --kvm-shadow=flush" ns_per_op $K --kvm-shadow=flush -- "$WORKLOADS" forkexec "$N_FORK"
  timed "$tmp/l.systrap" $S --rootfs=/ -- /bin/sh -c "$loop"
  timed "$tmp/l.kvm" $K --rootfs=/ -- /bin/sh -c "$loop"
  timed "$tmp/l.kvm --kvm-shadow=flush" $K --kvm-shadow=flush --rootfs=/ -- /bin/sh -c "$loop"

  timed "$tmp/t.systrap" $S -- /bin/true
  timed "$tmp/t.kvm (pool in the background)" $K -- /bin/true
  timed "$tmp/t.kvm --kvm-vcpu-pool=eager" $K --kvm-vcpu-pool=eager -- /bin/true
done

table "1. getpid round trip" ns/call g.native g.systrap g.kvm "g.kvm --kvm-fpu=eager"
table "2a. fork + _exit + wait" ns/op f.systrap f.kvm "f.kvm --kvm-shadow=flush"
table "2b. fork + exec + wait (static)" ns/op x.systrap x.kvm "x.kvm --kvm-shadow=flush"
table "2c. sh -c 'for i in 1..5; do ls / | wc -l; done'" ms l.systrap l.kvm "l.kvm --kvm-shadow=flush"
table "3. sentry run -- /bin/true" ms t.systrap "t.kvm (pool in the background)" \
  "t.kvm --kvm-vcpu-pool=eager"

# Table 4: warm pools through sandboxd.
if [ -x "$SANDBOXD" ] && [ -x "$SANDBOXCTL" ]; then
  # A Sentry that makes its vCPU pool on the start path.
  cat >"$tmp/sentry-eager" <<EOF
#!/bin/sh
cmd=\$1
shift
exec "$SENTRY" "\$cmd" --kvm-vcpu-pool=eager "\$@"
EOF
  chmod +x "$tmp/sentry-eager"
  # start_daemon NAME SENTRY PLATFORMS
  start_daemon() {
    "$SANDBOXD" --sentry="$2" --platforms="$3" --socket="$tmp/$1.sock" \
      --state-dir="$tmp/$1.state" --cgroup-parent="bench-kvm-$1-$$" --pool-size=2 \
      --shutdown-kill 2>"$tmp/$1.log" &
    pids+=($!)
    wait_for_daemon "$SANDBOXCTL" "$tmp/$1.sock" && return 0
    echo "sandboxd ($1) did not start:" >&2
    head -5 "$tmp/$1.log" >&2
    return 1
  }
  start_daemon systrap "$SENTRY" systrap && start_daemon kvm "$SENTRY" kvm &&
    start_daemon eager "$tmp/sentry-eager" kvm && {
    sleep 2  # the pools fill
    echo "table 4: $N interleaved rounds" >&2
    for _ in $(seq 1 "$N"); do
      for d in systrap kvm eager; do
        p=kvm
        [ $d = systrap ] && p=systrap
        t0=$EPOCHREALTIME
        if timeout -k 5 "$TIMEOUT" "$SANDBOXCTL" --socket="$tmp/$d.sock" run --rm --timings \
          --rootfs=/ --platform=$p -- /bin/true </dev/null >/dev/null 2>"$tmp/timing.$d"; then
          t1=$EPOCHREALTIME
          awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f\n", (b - a) * 1000 }' >>"$tmp/w.$d"
          # The warm-pool create as the daemon times it: taking the Sentry
          # from the pool (daemon.create_total.pool_hit or .pool_miss) and
          # its Start call (spec and fds over the control channel).
          awk '/^sandboxctl: timing: / && ($3 ~ /^daemon.create_total/ || $3 == "daemon.start.sentry_call") {s += $4; n++} END {if (n == 2) printf "%.2f\n", s}' "$tmp/timing.$d" >>"$tmp/c.$d"
          # The rest of the wall time: sandboxctl's own start, its channel
          # to the daemon, and its exit (the --rm removal is the daemon's,
          # after the exit status went out).
          awk -v w="$(tail -1 "$tmp/w.$d")" '/^sandboxctl: timing: / && $3 == "client.create_attach_run_exit" {s += $4} END {printf "%.2f\n", w - s}' "$tmp/timing.$d" >>"$tmp/d.$d"
          cat "$tmp/timing.$d" >>"$tmp/timings.$d"
        else
          echo fail >>"$tmp/w.$d"
          head -3 "$tmp/timing.$d" >>"$tmp/errors"
        fi
        sleep "$POOL_WAIT"
      done
    done
    mv "$tmp/w.eager" "$tmp/w.kvm --kvm-vcpu-pool=eager" 2>/dev/null
    mv "$tmp/c.eager" "$tmp/c.kvm --kvm-vcpu-pool=eager" 2>/dev/null
    mv "$tmp/d.eager" "$tmp/d.kvm --kvm-vcpu-pool=eager" 2>/dev/null
    table "4a. sandboxctl run --rm, warm pool (wall)" ms w.systrap w.kvm "w.kvm --kvm-vcpu-pool=eager"
    table "4b. the daemon's create + Start call (--timings)" ms c.systrap c.kvm "c.kvm --kvm-vcpu-pool=eager"
    table "4c. the rest: sandboxctl's start, channel and exit" ms d.systrap d.kvm "d.kvm --kvm-vcpu-pool=eager"
  }
else
  echo "note: no sandboxd/sandboxctl: table 4 left out" >&2
fi
echo
echo "load at end: $(uptime)"
if [ -s "$tmp/errors" ]; then
  echo "stderr of the runs (first lines):"
  head -5 "$tmp/errors"
fi
exit 0
