#!/usr/bin/env bash
# bench/run.sh — one command, one table: the cost of a trivial system call
# (raw getpid) natively, under `sentry run`, and under gVisor's
# `runsc --network=none do` (Debian's runsc, ptrace platform); each unpinned
# and pinned to one CPU (taskset -c 0); the median of several repetitions and
# the ratio to native with the same pinning.
#
# Builds nothing: uses out/bin/bench_getpid and out/bin/sentry as built by
# cmake (see bench/README.md). Missing or failing configurations are reported
# in the table, not fatal.
#
# Environment:
#   REPS=5          repetitions per configuration (median reported)
#   N_NATIVE=2000000   getpid calls per native run
#   N_SANDBOX=20000    getpid calls per sentry/runsc run
#   BENCH_GETPID=…  SENTRY=…  RUNSC=runsc   binaries to use
#   SENTRY_FLAGS="--platform=systrap"       extra `sentry run` flags
#   RUNSC_FLAGS="--platform=ptrace --network=none"
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BENCH=${BENCH_GETPID:-$ROOT/out/bin/bench_getpid}
SENTRY=${SENTRY:-$ROOT/out/bin/sentry}
RUNSC=${RUNSC:-runsc}
REPS=${REPS:-5}
N_NATIVE=${N_NATIVE:-2000000}
N_SANDBOX=${N_SANDBOX:-20000}
# shellcheck disable=SC2206
SENTRY_FLAGS=(${SENTRY_FLAGS:-})
# shellcheck disable=SC2206
RUNSC_FLAGS=(${RUNSC_FLAGS:---platform=ptrace --network=none})
TIMEOUT=${BENCH_TIMEOUT:-300}

if [ ! -x "$BENCH" ]; then
  echo "bench_getpid not found at $BENCH; build it first:" >&2
  echo "  cmake -S $ROOT -B $ROOT/build -G Ninja && cmake --build $ROOT/build --target bench_getpid" >&2
  exit 1
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/bench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# The configurations: name|command prefix (the benchmark and N are appended).
configs=()
configs+=("native|")
if [ -x "$SENTRY" ]; then
  configs+=("sentry|$SENTRY run ${SENTRY_FLAGS[*]} --")
else
  echo "note: no sentry at $SENTRY: its rows will say n/a" >&2
  configs+=("sentry|MISSING")
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

# Interleave repetitions so that drift on a noisy machine hits all equally.
for rep in $(seq 1 "$REPS"); do
  for c in "${configs[@]}"; do
    name=${c%%|*}
    prefix=${c#*|}
    [ "$prefix" = MISSING ] && continue
    for pin in unpinned pinned; do run_one "$name" "$pin" "$prefix"; done
  done
done

median() { # median of the numeric lines of file $1 ("fail" lines ignored)
  grep -v fail "$1" 2>/dev/null | sort -g | awk '{a[NR]=$1} END {if (NR==0) print "n/a"; else if (NR%2) print a[(NR+1)/2]; else printf "%.1f\n", (a[NR/2]+a[NR/2+1])/2}'
}
spread() {
  grep -v fail "$1" 2>/dev/null | sort -g | awk 'NR==1{lo=$1} {hi=$1} END {if (NR) printf "%s..%s", lo, hi; else print "-"}'
}

echo "getpid syscall cost — $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs, kernel $(uname -r)"
echo "native N=$N_NATIVE, sandboxes N=$N_SANDBOX, median of $REPS runs"
[ -x "$SENTRY" ] && echo "sentry: $SENTRY run ${SENTRY_FLAGS[*]}"
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
if [ -s "$tmp/errors" ]; then
  echo
  echo "failures:"
  sort "$tmp/errors" | uniq -c | head -20
fi
