#!/usr/bin/env bash
# bench/fork_cpu.sh — CPU time per fork, fork+exec (static) and fork+exec of
# /bin/true, pinned to one CPU (taskset -c 0), natively and under one or more
# sentry binaries, interleaved rounds, medians. The CPU time is perf stat's
# task-clock of the whole process tree (the Sentry, its template and stubs,
# the program), which other jobs on the machine inflate much less than wall
# time: use it to compare two builds (A/B) on a busy machine. Wall-time
# figures are bench/workloads.sh's.
#
#   bench/fork_cpu.sh [SENTRY...]      default: out/bin/sentry
#
# Environment: ROUNDS=5; BENCH_WORKLOADS=… (default out/bin/bench_workloads).
# Needs perf(1) and permission to count the process's own events.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${BENCH_WORKLOADS:-$ROOT/out/bin/bench_workloads}
ROUNDS=${ROUNDS:-5}
sentries=()
for s in "$@"; do sentries+=("$(readlink -f "$s")"); done  # runs from a temp dir
[ ${#sentries[@]} = 0 ] && sentries=("$ROOT/out/bin/sentry")
configs=(native "${sentries[@]}")
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fork_cpu.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"

# mode|argument|native N|sandbox N|what
ops=("fork||2000|300|fork + _exit + waitpid"
  "forkexec||1000|100|fork + execve (static) + waitpid"
  "forkexec|/bin/true|1000|100|fork + execve /bin/true + waitpid")
for _ in $(seq 1 "$ROUNDS"); do
  for i in "${!configs[@]}"; do
    c=${configs[$i]}
    for o in "${ops[@]}"; do
      IFS='|' read -r mode arg nn ns _ <<<"$o"
      n=$ns prefix=("$c" run --rootfs=/ --)
      [ "$c" = native ] && n=$nn prefix=()
      ms=$(cd "$tmp" && perf stat -x, -e task-clock -- taskset -c 0 \
        "${prefix[@]}" "$BIN" "$mode" "$n" $arg 2>&1 >/dev/null |
        awk -F, '/task-clock/{print $1}')
      if [ -n "$ms" ]; then v=$(awk -v m="$ms" -v n="$n" 'BEGIN{printf "%.0f", m*1e6/n}'); else v=fail; fi
      echo "$v" >>"$tmp/$i.$mode${arg//\//_}"
    done
  done
done

echo "fork_cpu — $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), median of $ROUNDS"
printf '%-36s %12s' "CPU ns per operation, taskset -c 0" native
for i in "${!sentries[@]}"; do printf ' %12s %7s' "sentry#$((i + 1))" "x nat"; done
echo
for o in "${ops[@]}"; do
  IFS='|' read -r mode arg _ _ what <<<"$o"
  key=$mode${arg//\//_}
  nat=$(median "$tmp/0.$key")
  printf '%-36s %12s' "$what" "$nat"
  for i in "${!sentries[@]}"; do
    v=$(median "$tmp/$((i + 1)).$key")
    printf ' %12s %7s' "$v" "$(ratio "$v" "$nat")"
  done
  echo
done
for i in "${!sentries[@]}"; do echo "sentry#$((i + 1)): ${sentries[$i]}"; done
