#!/usr/bin/env bash
# bench/sandboxd.sh — a whole sandbox, end to end: `sandboxctl run --rm --
# /bin/true` against sandboxd with a warm pool and with the pool disabled
# (--pool-size=0: every create starts a Sentry), next to `runsc
# --network=none do true` (Debian's runsc, ptrace platform) and native
# fork+exec+wait of /bin/true, in one run. Prints p50 and p99 wall time
# per run (ms) and the ratio to native, then where a warm run's time goes
# (the client's calls, the daemon's create steps and the Sentry's start
# steps, medians of `sandboxctl run --timings`).
#
# Runs of the configurations are interleaved (one of each per round) so
# that drift on a noisy machine hits all alike. With the warm pool the
# daemon gets POOL_WAIT seconds between runs to refill (outside the timed
# part): the figure is a create that finds a warm Sentry; the hit rate is
# printed from the daemon's metrics.
#
# Environment:
#   N=100                runs per configuration
#   POOL_SIZE=2          warm pool size of the "warm" daemon
#   POOL_WAIT=0.15       seconds between runs (pool refill)
#   SANDBOXD=… SANDBOXCTL=… SENTRY=… RUNSC=runsc   binaries
#   RUNSC_FLAGS          default "--platform=ptrace --network=none"
#   BASE_BIN=DIR         also a warm daemon of another build (DIR holds its
#                        sandboxd, sandboxctl and sentry, e.g. copies from
#                        the tree before a change): one more row, interleaved
#                        with the others, and its own steps table
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
N=${N:-100}
POOL_SIZE=${POOL_SIZE:-2}
POOL_WAIT=${POOL_WAIT:-0.15}
SANDBOXD=${SANDBOXD:-$ROOT/out/bin/sandboxd}
SANDBOXCTL=${SANDBOXCTL:-$ROOT/out/bin/sandboxctl}
SENTRY=${SENTRY:-$ROOT/out/bin/sentry}
RUNSC=${RUNSC:-runsc}
# shellcheck disable=SC2206
RUNSC_FLAGS=(${RUNSC_FLAGS:---platform=ptrace --network=none})
TIMEOUT=${BENCH_TIMEOUT:-60}
BASE_BIN=${BASE_BIN:-}

for b in "$SANDBOXD" "$SANDBOXCTL" "$SENTRY" ${BASE_BIN:+"$BASE_BIN/sandboxd" "$BASE_BIN/sandboxctl" "$BASE_BIN/sentry"}; do
  [ -x "$b" ] || { echo "$b not found; build first (see bench/README.md)" >&2; exit 1; }
done
tmp=$(mktemp -d "${TMPDIR:-/tmp}/bench_sandboxd.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do stop_pid "$p"; done
  rm -rf "$tmp"
}
trap cleanup EXIT

# start_daemon NAME POOL_SIZE METRICS_PORT [BIN_DIR]
start_daemon() {
  local daemon=$SANDBOXD sentry=$SENTRY ctl=$SANDBOXCTL
  # The sandboxes go with the daemon (a BASE_BIN build may predate the flag).
  local -a kill_flag=(--shutdown-kill)
  if [ -n "${4:-}" ]; then
    daemon=$4/sandboxd sentry=$4/sentry ctl=$4/sandboxctl
    "$daemon" --help 2>&1 | grep -q -- --shutdown-kill || kill_flag=()
  fi
  "$daemon" --sentry="$sentry" --socket="$tmp/$1.sock" --state-dir="$tmp/$1.state" \
    --cgroup-parent="bench-sandboxd-$1-$$" --pool-size="$2" "${kill_flag[@]}" \
    --metrics-address="127.0.0.1:$3" 2>"$tmp/$1.log" &
  pids+=($!)
  wait_for_daemon "$ctl" "$tmp/$1.sock" && return 0
  echo "sandboxd ($1) did not start:" >&2
  cat "$tmp/$1.log" >&2
  exit 1
}
metrics_port=$((20000 + $$ % 20000))
start_daemon warm "$POOL_SIZE" "$metrics_port"
start_daemon cold 0 $((metrics_port + 1))
[ -n "$BASE_BIN" ] && start_daemon base "$POOL_SIZE" $((metrics_port + 2)) "$BASE_BIN"
sleep 1  # the warm pool fills

configs=(native warm cold)
[ -n "$BASE_BIN" ] && configs+=(base)
if command -v "$RUNSC" >/dev/null 2>&1; then
  configs+=(runsc)
else
  echo "note: runsc not found: its row says n/a" >&2
fi

# A run that hangs is killed by a watchdog outside the timed part: a
# `timeout` wrapper around each run would add its own fork and exec
# (~1 ms here) to every row. `one` tells it the running pid and when it
# started; it looks once a second (a timed `read` on a FIFO nobody writes:
# no process per second).
mkfifo "$tmp/tick"
watchdog() {
  local pid start now
  exec 9<>"$tmp/tick"
  while :; do
    read -r -t 1 -u 9 _
    [ -s "$tmp/running" ] || continue
    read -r pid start <"$tmp/running" || continue
    now=${EPOCHREALTIME%.*}
    if ((now - ${start%.*} > TIMEOUT)); then kill -9 "$pid" 2>/dev/null; fi
  done
}
watchdog &
pids+=($!)

# one CONFIG: runs /bin/true once that way, appends its wall time (ms) to
# $tmp/CONFIG, or "fail".
one() {
  local t0 t1 rc
  local -a cmd
  case $1 in
    native) cmd=(/bin/true) ;;
    warm) cmd=("$SANDBOXCTL" --socket="$tmp/warm.sock" run --rm --rootfs=/ -- /bin/true) ;;
    cold) cmd=("$SANDBOXCTL" --socket="$tmp/cold.sock" run --rm --rootfs=/ -- /bin/true) ;;
    base) cmd=("$BASE_BIN/sandboxctl" --socket="$tmp/base.sock" run --rm --rootfs=/ -- /bin/true) ;;
    runsc) cmd=("$RUNSC" "${RUNSC_FLAGS[@]}" do /bin/true) ;;
  esac
  t0=$EPOCHREALTIME
  "${cmd[@]}" </dev/null >/dev/null 2>>"$tmp/$1.err" &
  echo "$! $t0" >"$tmp/running"
  wait "$!"
  rc=$?
  t1=$EPOCHREALTIME
  : >"$tmp/running"
  if [ "$rc" -eq 0 ]; then
    awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f\n", (b - a) * 1000 }' >>"$tmp/$1"
  else
    echo fail >>"$tmp/$1"
  fi
}

echo "sandboxd end to end: $N runs of each, interleaved (this takes a while)" >&2
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
for _ in $(seq 1 "$N"); do
  for c in "${configs[@]}"; do
    one "$c"
    case $c in warm | base) sleep "$POOL_WAIT" ;; esac
  done
done
echo "load average $load_start at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end"


# p99 FILE: the 99th percentile (nearest rank) of the numeric lines.
p99() {
  grep -v fail "$1" 2>/dev/null | sort -g | awk '{a[NR]=$1} END {if (NR==0) print "n/a"; else {i=int(NR*0.99+0.999); if (i>NR) i=NR; print a[i]}}'
}
fails() { grep -c fail "$1" 2>/dev/null || true; }

native50=$(median "$tmp/native")
native99=$(p99 "$tmp/native")
printf '\n%-36s %10s %10s %10s %10s %6s\n' "config (wall time of one run, ms)" p50 p99 "p50 x nat" "p99 x nat" fails
for c in native warm cold runsc ${BASE_BIN:+base}; do
  case $c in
    native) what="native fork+exec+wait /bin/true" ;;
    warm) what="sandboxctl run --rm (warm pool)" ;;
    cold) what="sandboxctl run --rm (--pool-size=0)" ;;
    base) what="same, warm, BASE_BIN's build" ;;
    runsc) what="runsc ${RUNSC_FLAGS[*]} do true" ;;
  esac
  if [ ! -f "$tmp/$c" ]; then
    printf '%-36s %10s %10s %10s %10s %6s\n' "$what" n/a n/a n/a n/a -
    continue
  fi
  p50=$(median "$tmp/$c")
  p99v=$(p99 "$tmp/$c")
  printf '%-36s %10s %10s %10s %10s %6s\n' "$what" "$p50" "$p99v" \
    "$(ratio "$p50" "$native50")" "$(ratio "$p99v" "$native99")" "$(fails "$tmp/$c")"
done

# Pool hits of the warm daemon, from its metrics.
m=$(curl -s "http://127.0.0.1:$metrics_port/metrics" 2>/dev/null)
hits=$(printf '%s\n' "$m" | awk '/^sandboxd_create_seconds_count/ && /pool="hit"/ {s+=$2} END {print s+0}')
misses=$(printf '%s\n' "$m" | awk '/^sandboxd_create_seconds_count/ && /pool="miss"/ {s+=$2} END {print s+0}')
echo "warm daemon: $hits creates from the pool, $misses misses"

# Where a warm run's time goes: medians of 20 runs with --timings
# (interleaved with BASE_BIN's when given). Besides sandboxctl's own steps
# (with SANDBOXCTL_T0, the process's start to main() and main() to the
# call), the run's wall time from bash (wall.run) and what is in no step:
# wall.after_call, from the end of the call to bash's wait returning
# (sandboxctl's exit, the kernel's teardown of its threads and address
# space, bash's wakeup).
# timed_run CTL SOCKET FILE: one run with --timings, its lines into FILE.
timed_run() {
  local t0 t1
  t0=$EPOCHREALTIME
  SANDBOXCTL_T0=$t0 "$1" --socket="$2" run --rm --rootfs=/ --timings -- /bin/true 2>"$tmp/one" >/dev/null
  t1=$EPOCHREALTIME
  awk -v a="$t0" -v b="$t1" '
    {print}
    $3 == "client.t0_to_main" || $3 == "client.main_to_call" ||
      $3 == "client.create_attach_run_exit" || $3 == "client.create" ||
      $3 == "client.attach_run_exit" {in_steps += $4}
    END {
      w = (b - a) * 1000
      printf "sandboxctl: timing: wall.run %.3f ms\n", w
      printf "sandboxctl: timing: wall.after_call %.3f ms\n", w - in_steps
    }' "$tmp/one" >>"$3"
}
for _ in $(seq 1 20); do
  timed_run "$SANDBOXCTL" "$tmp/warm.sock" "$tmp/timings"
  sleep "$POOL_WAIT"
  if [ -n "$BASE_BIN" ]; then
    timed_run "$BASE_BIN/sandboxctl" "$tmp/base.sock" "$tmp/timings.base"
    sleep "$POOL_WAIT"
  fi
done
for f in timings ${BASE_BIN:+timings.base}; do
  echo
  printf '%-48s %10s\n' "step of a warm run (median of 20)${f#timings}" ms
  awk '/^sandboxctl: timing: / {print $3}' "$tmp/$f" | awk '!seen[$0]++' | while read -r step; do
    awk -v s="$step" '$1 == "sandboxctl:" && $3 == s {print $4}' "$tmp/$f" >"$tmp/step"
    printf '%-48s %10s\n' "$step" "$(median "$tmp/step")"
  done
done
echo "load average $(cut -d' ' -f1-3 /proc/loadavg) after the steps"

for c in warm cold runsc base; do
  [ -s "$tmp/$c.err" ] && { echo "stderr of failed $c runs (first lines):"; head -3 "$tmp/$c.err"; }
done
exit 0
