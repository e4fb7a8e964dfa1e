#!/usr/bin/env bash
# bench/run.sh — one command, three tables.
#
# 1. The cost of a trivial system call (raw getpid) natively, under
#    `sentry run` (systrap, and kvm where it is usable), and under gVisor's `runsc --network=none do` (Debian's
#    runsc, ptrace platform); each unpinned and pinned to one CPU
#    (taskset -c 0); the median of several repetitions and the ratio to
#    native with the same pinning.
# 2. "Where a sentry getpid goes": the pieces of a systrap round trip,
#    measured by microbenchmarks in the same run (interleaved with table 1):
#    (a) a seccomp SIGSYS trap answered in the handler, (b) the same with the
#    stub's register and xsave copies, (c) a shared-memory spin hand-over
#    between two cores, (d) futex wake/wait round trips across cores and on
#    one core; then the sentry's figures split into those pieces, with what
#    is left over attributed to the Sentry's own work.
# 3. clock_gettime(CLOCK_MONOTONIC) through libc natively, under the sentry
#    (served by the Sentry's vDSO, no trap), under the sentry with
#    --vdso=syscall (every call traps) and under runsc; unpinned, median and
#    ratio to native, interleaved with the runs above.
#
# Builds nothing: uses out/bin/{bench_getpid,bench_sigsys,bench_pingpong,
# bench_clock_gettime,sentry} as built by cmake (see bench/README.md). Missing or failing
# configurations are reported in the tables, not fatal.
#
# 3. Workloads of real programs (bench/workloads.sh; WORKLOADS=0 skips it).
#
# Environment:
#   REPS=9          repetitions per configuration (median reported)
#   N_NATIVE=2000000   getpid calls per native run
#   N_SANDBOX=20000    getpid calls per sentry/runsc run
#   BENCH_GETPID=…  SENTRY=…  RUNSC=runsc   binaries to use
#   SENTRY_FLAGS="--platform=systrap"       extra `sentry run` flags
#   KVM=1              0: no `sentry run --platform=kvm` row
#   PATCHED=1          0: no `sentry run --systrap-patch=on` row ("patched")
#   BASE_BIN=DIR       also rows "base" and "base-pat" for DIR/sentry (another
#                      build), interleaved with this build's
#   RUNSC_FLAGS="--platform=ptrace --network=none"
#   BREAKDOWN=1        0: skip table 2 and its microbenchmarks
#   N_TRAP=100000      trapped getpid calls per bench_sigsys run
#   N_SPIN=200000      round trips per spin hand-over run
#   N_FUTEX=20000      round trips per same-core futex run
#   N_FUTEX_X=5000     round trips per cross-core futex run (slow here)
#   BENCH_SIGSYS=…  BENCH_PINGPONG=…        binaries to use
#   CLOCK=1            0: skip table 3
#   N_CLOCK=1000000    clock_gettime calls per run (native, sentry, runsc)
#   N_CLOCK_TRAP=20000 calls per run with --vdso=syscall
#   BENCH_CLOCK=…      binary to use
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
BENCH=${BENCH_GETPID:-$ROOT/out/bin/bench_getpid}
SENTRY=${SENTRY:-$ROOT/out/bin/sentry}
RUNSC=${RUNSC:-runsc}
REPS=${REPS:-9}
N_NATIVE=${N_NATIVE:-2000000}
N_SANDBOX=${N_SANDBOX:-20000}
# shellcheck disable=SC2206
SENTRY_FLAGS=(${SENTRY_FLAGS:-})
# shellcheck disable=SC2206
RUNSC_FLAGS=(${RUNSC_FLAGS:---platform=ptrace --network=none})
TIMEOUT=${BENCH_TIMEOUT:-300}
SIGSYS=${BENCH_SIGSYS:-$ROOT/out/bin/bench_sigsys}
PINGPONG=${BENCH_PINGPONG:-$ROOT/out/bin/bench_pingpong}
BREAKDOWN=${BREAKDOWN:-1}
CLOCK_BENCH=${BENCH_CLOCK:-$ROOT/out/bin/bench_clock_gettime}
CLOCK=${CLOCK:-1}
N_CLOCK=${N_CLOCK:-1000000}
N_CLOCK_TRAP=${N_CLOCK_TRAP:-20000}
N_TRAP=${N_TRAP:-100000}
N_SPIN=${N_SPIN:-200000}
N_FUTEX=${N_FUTEX:-20000}
N_FUTEX_X=${N_FUTEX_X:-5000}
# systrap's spin window (platforms/systrap/systrap.cc kSpinMicros), in ns: a
# round trip that takes longer than this has slept on a futex somewhere.
SPIN_WINDOW_NS=20000

if [ ! -x "$BENCH" ]; then
  echo "bench_getpid not found at $BENCH; build it first:" >&2
  echo "  cmake -S $ROOT -B $ROOT/out/build -G Ninja && ninja -C $ROOT/out/build" >&2
  exit 1
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/bench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# The configurations: name|command prefix (the benchmark and N are appended).
configs=()
configs+=("native|")
if [ -x "$SENTRY" ]; then
  configs+=("sentry|$SENTRY run ${SENTRY_FLAGS[*]} --")
  # Syscall patching (platforms/systrap/README.md): the hot site enters the
  # stub without a signal. PATCHED=0 skips the row.
  if [ "${PATCHED:-1}" != 0 ]; then
    configs+=("patched|$SENTRY run ${SENTRY_FLAGS[*]} --systrap-patch=on --")
  fi
else
  echo "note: no sentry at $SENTRY: its rows will say n/a" >&2
  configs+=("sentry|MISSING")
fi
# Another build's sentry (BASE_BIN=DIR holding its sentry), interleaved
# with this one's, for before/after comparisons in one run.
if [ -n "${BASE_BIN:-}" ]; then
  if [ -x "$BASE_BIN/sentry" ]; then
    configs+=("base|$BASE_BIN/sentry run ${SENTRY_FLAGS[*]} --")
    if [ "${PATCHED:-1}" != 0 ]; then
      configs+=("base-pat|$BASE_BIN/sentry run ${SENTRY_FLAGS[*]} --systrap-patch=on --")
    fi
  else
    echo "note: no sentry in BASE_BIN=$BASE_BIN: its rows will say n/a" >&2
    configs+=("base|MISSING")
  fi
fi
# The KVM platform, where its probe passes (PVM on this kind of
# machine); KVM=0 skips the row.
if [ "${KVM:-1}" != 0 ] && [ -x "$SENTRY" ]; then
  if sentry_probe "$SENTRY" --platform=kvm; then
    configs+=("kvm|$SENTRY run --platform=kvm --")
  else
    echo "note: kvm platform not usable: $probe_why: its rows will say n/a" >&2
    configs+=("kvm|MISSING")
  fi
fi
if command -v "$RUNSC" >/dev/null 2>&1; then
  configs+=("runsc|$RUNSC ${RUNSC_FLAGS[*]} do")
else
  echo "note: runsc not found: its rows will say n/a" >&2
  configs+=("runsc|MISSING")
fi

# run_one NAME PIN PREFIX: appends one ns/call figure (or "fail") to a file.
run_one() {
  local name=$1 pin=$2 prefix=$3 n=$N_SANDBOX out
  [ "$name" = native ] && n=$N_NATIVE
  local -a cmd=()
  [ "$pin" = pinned ] && cmd+=(taskset -c 0)
  # shellcheck disable=SC2206
  [ -n "$prefix" ] && cmd+=($prefix)
  cmd+=("$BENCH" "$n")
  out=$(cd "$tmp" && timeout -k 5 "$TIMEOUT" "${cmd[@]}" </dev/null 2>"$tmp/err.$name.$pin")
  local v
  v=$(printf '%s\n' "$out" | awk '/^ns_per_call /{print $2}' | tail -1)
  if [ -z "$v" ]; then
    v=fail
    echo "$name/$pin failed: $(head -c 300 "$tmp/err.$name.$pin" | tr '\n' ' ')" >>"$tmp/errors"
  fi
  echo "$v" >>"$tmp/$name.$pin"
}

# The microbenchmarks of table 2: key|command. Their own pinning is part of
# the command (bench_pingpong pins its two processes itself).
micros=()
if [ "$BREAKDOWN" != 0 ]; then
  if [ -x "$SIGSYS" ] && [ -x "$PINGPONG" ]; then
    # The xsave image size of this machine's signal frames (what the stub
    # copies), for the payload of the (c+) row: that image plus 23 registers.
    xsave=$(timeout 30 "$SIGSYS" copy 1000 2>/dev/null | awk '/^xsave_bytes /{print $2}')
    xsave=${xsave:-0}
    payload=$((xsave + 23 * 8))
    micros+=("trap.unpinned|$SIGSYS trap $N_TRAP")
    micros+=("trap.pinned|taskset -c 0 $SIGSYS trap $N_TRAP")
    micros+=("copy.unpinned|$SIGSYS copy $N_TRAP")
    micros+=("copy.pinned|taskset -c 0 $SIGSYS copy $N_TRAP")
    micros+=("spin.cross|$PINGPONG spin 0 1 $N_SPIN")
    micros+=("spinload.cross|$PINGPONG spin 0 1 $((N_SPIN / 4)) $payload")
    micros+=("futex.cross|$PINGPONG futex 0 1 $N_FUTEX_X")
    micros+=("futex.same|$PINGPONG futex 0 0 $N_FUTEX")
  else
    echo "note: no bench_sigsys/bench_pingpong in $ROOT/out/bin: table 2 will say n/a" >&2
  fi
fi

# run_micro KEY "COMMAND": appends one ns figure (or "fail") to $tmp/m.KEY.
run_micro() {
  local key=$1 out v
  # shellcheck disable=SC2206
  local -a cmd=($2)
  out=$(cd "$tmp" && timeout -k 5 "$TIMEOUT" "${cmd[@]}" </dev/null 2>"$tmp/err.m.$key")
  v=$(printf '%s\n' "$out" | awk '/^ns_per_(call|roundtrip) /{print $2}' | tail -1)
  if [ -z "$v" ]; then
    v=fail
    echo "$key failed: $(head -c 300 "$tmp/err.m.$key" | tr '\n' ' ')" >>"$tmp/errors"
  fi
  echo "$v" >>"$tmp/m.$key"
}

# Table 3: key|command prefix|N (the benchmark and N are appended).
clocks=()
if [ "$CLOCK" != 0 ]; then
  if [ -x "$CLOCK_BENCH" ]; then
    clocks+=("native||$N_CLOCK")
    if [ -x "$SENTRY" ]; then
      clocks+=("sentry|$SENTRY run ${SENTRY_FLAGS[*]} --|$N_CLOCK")
      clocks+=("sentry-trap|$SENTRY run ${SENTRY_FLAGS[*]} --vdso=syscall --|$N_CLOCK_TRAP")
    fi
    command -v "$RUNSC" >/dev/null 2>&1 &&
      clocks+=("runsc|$RUNSC ${RUNSC_FLAGS[*]} do|$N_CLOCK")
  else
    echo "note: no bench_clock_gettime in $ROOT/out/bin: table 3 is skipped" >&2
  fi
fi

# run_clock KEY PREFIX N: appends one ns/call figure (or "fail") to $tmp/c.KEY.
run_clock() {
  local key=$1 out v
  local -a cmd=()
  # shellcheck disable=SC2206
  [ -n "$2" ] && cmd+=($2)
  cmd+=("$CLOCK_BENCH" "$3")
  out=$(cd "$tmp" && timeout -k 5 "$TIMEOUT" "${cmd[@]}" </dev/null 2>"$tmp/err.c.$key")
  v=$(printf '%s\n' "$out" | awk '/^ns_per_call /{print $2}' | tail -1)
  if [ -z "$v" ]; then
    v=fail
    echo "clock/$key failed: $(head -c 300 "$tmp/err.c.$key" | tr '\n' ' ')" >>"$tmp/errors"
  fi
  echo "$v" >>"$tmp/c.$key"
}

# Interleave repetitions so that drift on a noisy machine hits all equally.
for _ in $(seq 1 "$REPS"); do
  for c in "${configs[@]}"; do
    name=${c%%|*}
    prefix=${c#*|}
    [ "$prefix" = MISSING ] && continue
    for pin in unpinned pinned; do run_one "$name" "$pin" "$prefix"; done
  done
  for m in ${micros[@]+"${micros[@]}"}; do run_micro "${m%%|*}" "${m#*|}"; done
  for c in ${clocks[@]+"${clocks[@]}"}; do
    rest=${c#*|}
    run_clock "${c%%|*}" "${rest%|*}" "${rest##*|}"
  done
done

echo "getpid syscall cost — $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs, kernel $(uname -r)"
echo "native N=$N_NATIVE, sandboxes N=$N_SANDBOX, median of $REPS runs"
[ -x "$SENTRY" ] && echo "sentry: $SENTRY run ${SENTRY_FLAGS[*]}"
[ -n "${BASE_BIN:-}" ] && echo "base:   $BASE_BIN/sentry run ${SENTRY_FLAGS[*]}"
command -v "$RUNSC" >/dev/null 2>&1 && echo "runsc:  $($RUNSC --version 2>/dev/null | head -1), flags: ${RUNSC_FLAGS[*]}"
echo
printf '%-8s %-9s %14s %12s %8s  %s\n' config cpus "ns/call" "x native" "ok runs" "range (ns)"
printf '%-8s %-9s %14s %12s %8s  %s\n' ------ ---- ------- -------- ------- ----------
for c in "${configs[@]}"; do
  name=${c%%|*}
  for pin in unpinned pinned; do
    f=$tmp/$name.$pin
    m=$(median "$f")
    base=$(median "$tmp/native.$pin")
    ok=$(grep -vc fail "$f" 2>/dev/null || true)
    ok=${ok:-0}
    if [ "$m" = n/a ] || [ "$base" = n/a ]; then ratio=n/a; else ratio=$(awk -v a="$m" -v b="$base" 'BEGIN{printf "%.1f", a/b}'); fi
    label=$pin
    [ "$pin" = pinned ] && label="taskset 0"
    printf '%-8s %-9s %14s %12s %8s  %s\n' "$name" "$label" "$m" "$ratio" "$ok/$REPS" "$(spread "$f")"
  done
done

if [ "$BREAKDOWN" != 0 ]; then
  echo
  echo "where a sentry getpid goes — pieces measured in the same run, ns, median of $REPS"
  echo "(a),(b): N=$N_TRAP trapped getpids; (c): N=$N_SPIN round trips; (d): N=$N_FUTEX_X across, $N_FUTEX same core"
  echo
  printf '%-5s %-52s %-9s %9s %8s  %s\n' row what cpus ns "ok runs" "range (ns)"
  printf '%-5s %-52s %-9s %9s %8s  %s\n' --- ---- ---- -- ------- ----------
  row() { # row LABEL WHAT CPUS FILE
    local ok
    ok=$(grep -vc fail "$4" 2>/dev/null || true)
    printf '%-5s %-52s %-9s %9s %8s  %s\n' "$1" "$2" "$3" "$(median "$4")" "${ok:-0}/$REPS" "$(spread "$4")"
  }
  row "(a)" "SIGSYS trap, handler sets rax (signal+sigreturn)" unpinned "$tmp/m.trap.unpinned"
  row "(a)" "" "taskset 0" "$tmp/m.trap.pinned"
  row "(b)" "(a) + stub copies: 23 regs + ${xsave:-?} B xsave, out+back" unpinned "$tmp/m.copy.unpinned"
  row "(b)" "" "taskset 0" "$tmp/m.copy.pinned"
  row "(c)" "hand-over: spin on a shared word, round trip" "0 <-> 1" "$tmp/m.spin.cross"
  row "(c+)" "(c) with each side copying the ${payload:-?} B slot" "0 <-> 1" "$tmp/m.spinload.cross"
  row "(d)" "futex wake/wait round trip, across cores" "0 <-> 1" "$tmp/m.futex.cross"
  row "(d)" "futex wake/wait round trip, same core" "0 + 0" "$tmp/m.futex.same"
  row "" "sentry getpid (table 1)" unpinned "$tmp/sentry.unpinned"
  row "" "sentry getpid (table 1)" "taskset 0" "$tmp/sentry.pinned"
  echo
  # The arithmetic. Unpinned, the Sentry and the stub each spin on their own
  # core: a round trip is one trap, the stub's copies, two one-way spin
  # hand-overs (= one round trip of (c)) and the Sentry's work. Pinned,
  # spinning is off: the two hand-overs are futex wakeups, each with a
  # context switch on the one core (= one round trip of (d) same core).
  # Whatever the pieces do not explain is "rest": the Sentry's own work
  # (dispatch, its copies of the slot, cross-core cache misses on it, ...).
  # The third line counts the slot's trip between the cores too: (c+) has
  # both sides copy the slot in and out around each hand-over, as the stub
  # and the Sentry do, so its rest is the Sentry's work minus its copies.
  # breakdown LABEL TOTAL NAME VALUE [NAME VALUE...]: TOTAL = parts + rest.
  breakdown() {
    awk -v win="$SPIN_WINDOW_NS" '
      function num(x) { return x ~ /^-?[0-9.]+$/ }
      BEGIN {
        label = ARGV[1]; t = ARGV[2]; ok = num(t); rest = t
        line = ""
        for (i = 3; i + 1 < ARGC; i += 2) {
          if (!num(ARGV[i + 1])) { ok = 0; missing = missing " " ARGV[i]; continue }
          rest -= ARGV[i + 1]
          line = line sprintf("%s %.0f (%.0f%%) + ", ARGV[i], ARGV[i + 1], 100 * ARGV[i + 1] / t)
        }
        if (!ok) { printf "%-17s n/a (no figure for:%s%s)\n", label, num(t) ? "" : " sentry", missing; exit }
        printf "%-17s %.0f ns = %sSentry work (rest) %.0f (%.0f%%)\n", label, t, line, rest, 100 * rest / t
        if (label == "sentry unpinned" && rest > win)
          printf "%-17s rest > systrap spin window (%d ns): hand-overs slept on futexes (other core busy?); compare (d) across cores\n", "", win
      }' "$@"
  }
  diff_() { awk -v x="$1" -v y="$2" 'BEGIN { if (x ~ /^[0-9.]+$/ && y ~ /^[0-9.]+$/) print x - y; else print "n/a" }'; }
  su=$(median "$tmp/sentry.unpinned"); sp=$(median "$tmp/sentry.pinned")
  au=$(median "$tmp/m.trap.unpinned"); ap=$(median "$tmp/m.trap.pinned")
  bu=$(median "$tmp/m.copy.unpinned"); bp=$(median "$tmp/m.copy.pinned")
  breakdown "sentry unpinned" "$su" "trap (a)" "$au" "copies (b-a)" "$(diff_ "$bu" "$au")" \
    "hand-over (c)" "$(median "$tmp/m.spin.cross")"
  breakdown "sentry pinned" "$sp" "trap (a)" "$ap" "copies (b-a)" "$(diff_ "$bp" "$ap")" \
    "2 ctx switches (d same core)" "$(median "$tmp/m.futex.same")"
  breakdown "unpinned via (c+)" "$su" "trap (a)" "$au" "hand-over + slot copies (c+)" "$(median "$tmp/m.spinload.cross")"
fi

if [ ${#clocks[@]} -gt 0 ]; then
  echo
  echo "clock_gettime(CLOCK_MONOTONIC) through libc, unpinned, median of $REPS"
  echo "(N=$N_CLOCK; sentry-trap: --vdso=syscall, every call traps, N=$N_CLOCK_TRAP)"
  echo
  printf '%-12s %14s %12s %8s  %s\n' config "ns/call" "x native" "ok runs" "range (ns)"
  printf '%-12s %14s %12s %8s  %s\n' ------ ------- -------- ------- ----------
  base=$(median "$tmp/c.native")
  for c in "${clocks[@]}"; do
    key=${c%%|*}
    m=$(median "$tmp/c.$key")
    ok=$(grep -vc fail "$tmp/c.$key" 2>/dev/null || true)
    if [ "$m" = n/a ] || [ "$base" = n/a ]; then ratio=n/a; else ratio=$(awk -v a="$m" -v b="$base" 'BEGIN{printf "%.1f", a/b}'); fi
    printf '%-12s %14s %12s %8s  %s\n' "$key" "$m" "$ratio" "${ok:-0}/$REPS" "$(spread "$tmp/c.$key")"
  done
fi

if [ -s "$tmp/errors" ]; then
  echo
  echo "failures:"
  sort "$tmp/errors" | uniq -c | head -20
fi

# Table 3: the workloads of real programs (bench/workloads.sh).
if [ "${WORKLOADS:-1}" != 0 ]; then
  echo
  "$ROOT/bench/workloads.sh"
fi
