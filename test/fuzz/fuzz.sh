#!/usr/bin/env bash
# fuzz.sh SENTRY FUZZER [SEED...]
#
# Runs test/fuzz/syscall_fuzz.c (FUZZER, static) inside the sandbox, once
# per SEED (default 1 2 3), as
#   SENTRY run --platform=P --rootfs=DIR -- /syscall_fuzz seed=S seconds=T
# with DIR an otherwise empty rootfs, and sorts what happened:
#   crash  the Sentry died of a signal, or its stderr has an abort or
#          internal-error message (terminate called, Check failed, ...)
#   hang   no new heartbeat ("HB ms calls") for FUZZ_HANG seconds, no exit
#          within the time budget + FUZZ_GRACE, or the fuzzer's own "FUZZ
#          HANG" (a SIGKILLed worker not reaped in 10 s)
#   ok     the fuzzer printed "FUZZ DONE"; its workers' deaths by signal
#          are program deaths, counted apart
# and prints the calls fuzzed, the per-class counts and the failed seeds.
# Exits 1 on any crash or hang, 0 otherwise, 77 when SENTRY is missing.
#
# Environment: FUZZ_PLATFORM (systrap; kvm is skipped with the probe's
# reason where it does not work), FUZZ_SECONDS (per seed, 8),
# FUZZ_WORKERS (3), FUZZ_THREADS (3), FUZZ_HANG (20), FUZZ_GRACE (30),
# FUZZ_ARGS (more fuzzer arguments, e.g. "skip=15"), FUZZ_KEEP=1 keeps the
# outputs (their directory is printed).
#
# The Sentry runs in a host cgroup of its own where one can be made (root,
# cgroup v1 memory and pids controllers): memory.limit 1 GiB, pids 2048,
# and whatever is left in it at the end is killed. An OOM kill there is
# reported as "oom", not as a crash.
set -u
# test/lib.sh: one level up in the tree, beside the script in Bazel's
# runfiles (test/<name>_test).
lib=$(dirname "$0")/../lib.sh
[ -f "$lib" ] || lib=$(dirname "$0")/lib.sh
# shellcheck source=test/lib.sh
. "$lib"
usage_unless [ $# -ge 2 ] -- "SENTRY FUZZER [SEED...]"
require_sentry "$1"
require_built "$2"
SENTRY=$(readlink -f "$1")
FUZZER=$(readlink -f "$2")
shift 2
SEEDS=("$@")
[ ${#SEEDS[@]} -gt 0 ] || SEEDS=(1 2 3)
PLATFORM=${FUZZ_PLATFORM:-systrap}
SECS=${FUZZ_SECONDS:-8}
HANG=${FUZZ_HANG:-20}
GRACE=${FUZZ_GRACE:-30}
read -r -a EXTRA <<<"${FUZZ_ARGS:-}"
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3) || skip "python3 not found"

if ! sentry_probe "$SENTRY" --platform="$PLATFORM"; then
  skip "platform $PLATFORM is not usable here: $probe_why"
fi
make_tmp "fuzz.$PLATFORM" "${FUZZ_KEEP:-0}"
[ "${FUZZ_KEEP:-0}" = 1 ] && echo "outputs kept in $tmp"
root=$tmp/rootfs
mkdir -p "$root"
cp "$FUZZER" "$root/syscall_fuzz"
ulimit -c 0

# The cgroup, where one can be made.
cg_mem= cg_pids=
cg_name=sbx-fuzz-$$
if [ "$(id -u)" = 0 ] && [ -w /sys/fs/cgroup/memory ] &&
  [ -w /sys/fs/cgroup/pids ] &&
  mkdir "/sys/fs/cgroup/memory/$cg_name" 2>/dev/null; then
  cg_mem=/sys/fs/cgroup/memory/$cg_name
  echo $((1 << 30)) >"$cg_mem/memory.limit_in_bytes"
  if mkdir "/sys/fs/cgroup/pids/$cg_name" 2>/dev/null; then
    cg_pids=/sys/fs/cgroup/pids/$cg_name
    echo 2048 >"$cg_pids/pids.max"
  fi
  on_exit cg_cleanup
else
  echo "note: no cgroup of its own for the Sentry (not root or no cgroup v1)"
fi
cg_kill_all() {
  local d p
  for d in $cg_pids $cg_mem; do
    for p in $(cat "$d/cgroup.procs" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
  done
}
cg_cleanup() {
  local i d
  for i in $(seq 1 50); do
    cg_kill_all
    [ -z "$(cat $cg_pids/cgroup.procs $cg_mem/cgroup.procs 2>/dev/null)" ] && break
    sleep 0.1
  done
  for d in $cg_pids $cg_mem; do rmdir "$d" 2>/dev/null; done
}
oom_kills() {
  [ -n "$cg_mem" ] || { echo 0; return; }
  sed -n 's/^oom_kill //p' "$cg_mem/memory.oom_control" 2>/dev/null | grep . || echo 0
}

# What the Sentry (C++, absl) prints when it aborts.
crash_re='terminate called|Check failed|AddressSanitizer|runtime error:'
crash_re+='|Assertion .* failed|stack smashing|double free|corrupted'
crash_re+='|internal error|F[0-9]{4} [0-9:.]+ '

# run_seed SEED: one sandbox run; sets $class, $calls and the summary.
total_calls=0 n_ok=0 n_crash=0 n_hang=0 n_oom=0
deaths_all=
failed=()
run_seed() {
  local seed=$1 out=$tmp/out.$1 err=$tmp/err.$1 st=$tmp/status.$1
  local oom0 pid last_hb=-1 last_change now start
  oom0=$(oom_kills)
  [ -n "$cg_mem" ] && echo 0 >"$cg_mem/memory.max_usage_in_bytes" 2>/dev/null
  (
    [ -n "$cg_mem" ] && echo $BASHPID >"$cg_mem/cgroup.procs"
    [ -n "$cg_pids" ] && echo $BASHPID >"$cg_pids/cgroup.procs"
    # The real wait status: killed by a signal or exited, told apart.
    exec "$PY" -c '
import subprocess, sys
r = subprocess.call(sys.argv[2:])
open(sys.argv[1], "w").write("signal %d\n" % -r if r < 0 else "exit %d\n" % r)
' "$st" "$SENTRY" run --platform="$PLATFORM" --rootfs="$root" --cwd=/ \
      -- /syscall_fuzz seed="$seed" seconds="$SECS" \
      workers="${FUZZ_WORKERS:-3}" threads="${FUZZ_THREADS:-3}" "${EXTRA[@]}"
  ) </dev/null >"$out" 2>"$err" &
  pid=$!
  start=$SECONDS
  last_change=$SECONDS
  class=
  while kill -0 "$pid" 2>/dev/null; do
    sleep 0.5
    now=$(grep -c '^HB ' "$out" 2>/dev/null)
    if [ "$now" != "$last_hb" ]; then
      last_hb=$now
      last_change=$SECONDS
    elif ! grep -q '^FUZZ calls=' "$out" &&
      [ $((SECONDS - last_change)) -ge "$HANG" ]; then
      class=hang
      why="no heartbeat for ${HANG} s"
      break
    fi
    if [ $((SECONDS - start)) -ge $((SECS + GRACE)) ]; then
      class=hang
      why="still running $((SECS + GRACE)) s after the start"
      break
    fi
  done
  if [ "$class" = hang ]; then
    kill -9 "$pid" 2>/dev/null
    cg_kill_all
  fi
  wait "$pid" 2>/dev/null
  local status
  status=$(cat "$st" 2>/dev/null || echo "none")
  calls=$(sed -n 's/^FUZZ calls=\([0-9]*\).*/\1/p' "$out" | tail -1)
  [ -n "$calls" ] || calls=$(awk '$1 == "HB" { c = $3 } END { print c + 0 }' "$out")
  if [ -z "$class" ]; then
    if [ "$(oom_kills)" != "$oom0" ]; then
      class=oom
      why="the host cgroup's OOM killer ($status)"
    elif grep -Eq "$crash_re" "$err"; then
      class=crash
      why="Sentry error on stderr ($status): $(grep -Em1 "$crash_re" "$err" |
        head -c 200)"
    elif [ "${status%% *}" = signal ]; then
      class=crash
      why="the Sentry was killed by signal ${status#signal }"
    elif grep -q '^FUZZ HANG' "$out"; then
      class=hang
      why=$(grep -m1 '^FUZZ HANG' "$out")
    elif grep -q '^FUZZ DONE' "$out" && [ "$status" = "exit 0" ]; then
      class=ok
    elif [ "$status" = "exit 125" ]; then
      class=crash
      why="sentry run failed (125): $(head -c 200 "$err")"
    else
      # The supervisor itself died: a program death, but the run did not
      # fuzz for the time asked; reported, not counted as a Sentry failure.
      class=short
      why="the fuzzer ended early ($status)"
    fi
  fi
  total_calls=$((total_calls + calls))
  local d
  d=$(sed -n 's/^FUZZ deaths *//p' "$out" | tail -1)
  deaths_all="$deaths_all $d"
  printf 'seed %s %s: %s calls, %s' "$seed" "$PLATFORM" "$calls" "$class"
  [ "$class" = ok ] || printf ' (%s)' "$why"
  [ -n "$cg_mem" ] &&
    printf ', peak memory %s MiB' $(($(cat "$cg_mem/memory.max_usage_in_bytes") >> 20))
  echo
  grep '^FUZZ \(calls\|workers\|deaths\|stuck\|unreaped\)' "$out" | sed 's/^/    /'
  case $class in
    ok) n_ok=$((n_ok + 1)) ;;
    short) n_ok=$((n_ok + 1)) ;;
    oom) n_oom=$((n_oom + 1)) ;;
    crash) n_crash=$((n_crash + 1)); failed+=("$seed:crash") ;;
    hang) n_hang=$((n_hang + 1)); failed+=("$seed:hang") ;;
  esac
  if [ "$class" = crash ] || [ "$class" = hang ]; then
    echo "    --- sentry stderr (last 1000 bytes)"
    tail -c 1000 "$err" | sed 's/^/    /'
    echo "    reproduce: $SENTRY run --platform=$PLATFORM --rootfs=DIR --" \
      "/syscall_fuzz seed=$seed seconds=$SECS" \
      "workers=${FUZZ_WORKERS:-3} threads=${FUZZ_THREADS:-3} ${EXTRA[*]}"
  fi
}

echo "fuzzing on $PLATFORM: seeds ${SEEDS[*]}, $SECS s each"
for s in "${SEEDS[@]}"; do run_seed "$s"; done

# Program deaths over all seeds, by signal.
deaths=$(echo "$deaths_all" | tr ' ' '\n' | grep = |
  awk -F= '{ c[$1] += $2 } END { for (k in c) printf "%s=%d ", k, c[k] }')
echo "calls fuzzed: $total_calls"
echo "runs: ${#SEEDS[@]}: ok $n_ok, crash $n_crash, hang $n_hang, oom $n_oom"
echo "program deaths (workers, by signal): ${deaths:-none}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED seeds: ${failed[*]}"
  exit 1
fi
echo "PASS: no Sentry crash or hang"
exit 0
