#!/usr/bin/env bash
# bench/workloads.sh — what real programs do, natively, under the sentry and
# under gVisor's runsc (Debian's package, ptrace platform), in one run.
#
# Table 1: per-operation cost inside the sandbox (bench_workloads, static),
# unpinned and pinned to one CPU (taskset -c 0: the program, the Sentry and
# its stubs, or runsc, share one core): pipe ping-pong between two processes
# and between two threads, fork+wait, fork+exec+wait (static, /bin/true),
#   open+read+close of a host file (the read-only rootfs), create+write+
#   close+unlink in /tmp (the overlay's tmpfs). (clock_gettime has its own
#   table in bench/run.sh.)
# Table 2: start-up, wall time of a whole sandbox run from the host:
#   `/bin/true` and `python3 -c pass` from the host's Debian root.
# Each figure is the median of REPS runs; runs of the configurations are
# interleaved so that drift on a noisy machine hits all of them alike.
# Ratios are to native in the same run.
#
# Environment:
#   REPS=5                  repetitions (median reported)
#   SENTRY=… RUNSC=runsc    binaries; SENTRY_FLAGS, RUNSC_FLAGS extra flags
#   BENCH_WORKLOADS=…       the bench_workloads binary (out/bin)
#   QUICK=1                 tenth of the iteration counts (a smoke run)
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${BENCH_WORKLOADS:-$ROOT/out/bin/bench_workloads}
SENTRY=${SENTRY:-$ROOT/out/bin/sentry}
RUNSC=${RUNSC:-runsc}
REPS=${REPS:-5}
TIMEOUT=${BENCH_TIMEOUT:-300}
# shellcheck disable=SC2206
SENTRY_FLAGS=(${SENTRY_FLAGS:-})
# shellcheck disable=SC2206
RUNSC_FLAGS=(${RUNSC_FLAGS:---platform=ptrace --network=none})
div=1
[ "${QUICK:-0}" = 1 ] && div=10

if [ ! -x "$BIN" ]; then
  echo "bench_workloads not found at $BIN; build first (see bench/README.md)" >&2
  exit 1
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/workloads.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

configs=("native|")
if [ -x "$SENTRY" ]; then
  configs+=("sentry|$SENTRY run --rootfs=/ ${SENTRY_FLAGS[*]} --")
else
  echo "note: no sentry at $SENTRY: its columns say n/a" >&2
fi
if command -v "$RUNSC" >/dev/null 2>&1; then
  configs+=("runsc|$RUNSC ${RUNSC_FLAGS[*]} do")
else
  echo "note: runsc not found: its columns say n/a" >&2
fi

# mode|what|native N|sandbox N|extra argument   (operations per run)
ops=(
  "pipe|pipe ping-pong, 2 processes|$((100000 / div))|$((5000 / div))"
  "pipe-threads|pipe ping-pong, 2 threads|$((100000 / div))|$((5000 / div))"
  "fork|fork + _exit + waitpid|$((2000 / div))|$((200 / div))"
  "forkexec|fork + execve (static) + waitpid|$((1000 / div))|$((100 / div))"
  "forkexec|fork + execve /bin/true + waitpid|$((1000 / div))|$((100 / div))|/bin/true"
  "open|open + read 4 KiB + close (rootfs)|$((100000 / div))|$((5000 / div))"
  "tmpfile|creat + write 4 KiB + close + unlink (/tmp)|$((50000 / div))|$((2000 / div))"
)
# name|what|command (appended to the config's prefix)
starts=(
  "true|/bin/true|/bin/true"
  "python|python3 -c pass|/usr/bin/python3 -c pass"
)

run_op() { # CONFIG PIN PREFIX KEY MODE N [ARG]
  local out v
  local -a cmd=()
  [ "$2" = pinned ] && cmd+=(taskset -c 0)
  # shellcheck disable=SC2206
  cmd+=($3 "$BIN" "$5" "$6" ${7:-})
  out=$(cd "$tmp" && timeout -k 5 "$TIMEOUT" "${cmd[@]}" </dev/null 2>"$tmp/err")
  v=$(printf '%s\n' "$out" | awk '/^ns_per_op /{print $2}' | tail -1)
  if [ -z "$v" ]; then
    v=fail
    echo "$1/$2/$4: $(head -c 200 "$tmp/err" | tr '\n' ' ')" >>"$tmp/errors"
  fi
  echo "$v" >>"$tmp/op.$1.$2.$4"
}

run_start() { # CONFIG PREFIX NAME COMMAND
  local t0 t1 rc
  t0=$(date +%s%N)
  # shellcheck disable=SC2086
  (cd "$tmp" && timeout -k 5 "$TIMEOUT" $2 $4 </dev/null >/dev/null 2>"$tmp/err")
  rc=$?
  t1=$(date +%s%N)
  if [ $rc = 0 ]; then
    echo $(((t1 - t0) / 1000)) >>"$tmp/start.$1.$3"
  else
    echo fail >>"$tmp/start.$1.$3"
    echo "$1/$3 exit $rc: $(head -c 200 "$tmp/err" | tr '\n' ' ')" >>"$tmp/errors"
  fi
}

for _ in $(seq 1 "$REPS"); do
  for c in "${configs[@]}"; do
    name=${c%%|*} prefix=${c#*|}
    for pin in unpinned pinned; do
      for o in "${ops[@]}"; do
        IFS='|' read -r mode _ nn ns arg <<<"$o"
        n=$ns
        [ "$name" = native ] && n=$nn
        run_op "$name" "$pin" "$prefix" "$mode${arg//\//_}" "$mode" "$n" "$arg"
      done
    done
    for s in "${starts[@]}"; do
      IFS='|' read -r sname _ cmd <<<"$s"
      run_start "$name" "$prefix" "$sname" "$cmd"
    done
  done
done

# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"

echo "workloads — $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs, kernel $(uname -r), median of $REPS"
[ -x "$SENTRY" ] && echo "sentry: $SENTRY run --rootfs=/ ${SENTRY_FLAGS[*]}"
command -v "$RUNSC" >/dev/null 2>&1 && echo "runsc:  $($RUNSC --version 2>/dev/null | head -1), flags: ${RUNSC_FLAGS[*]}"
echo
for pin in unpinned pinned; do
  label="per operation (ns), unpinned"
  [ "$pin" = pinned ] && label="per operation (ns), taskset -c 0"
  printf '%-44s %12s %12s %8s %12s %8s %10s\n' "$label" native sentry "x nat" runsc "x nat" "runsc/sen"
  for o in "${ops[@]}"; do
    IFS='|' read -r mode what _ _ arg <<<"$o"
    key=$mode${arg//\//_}
    nat=$(median "$tmp/op.native.$pin.$key")
    sen=$(median "$tmp/op.sentry.$pin.$key")
    rs=$(median "$tmp/op.runsc.$pin.$key")
    printf '%-44s %12s %12s %8s %12s %8s %10s\n' "$what" "$nat" "$sen" "$(ratio "$sen" "$nat")" \
      "$rs" "$(ratio "$rs" "$nat")" "$(ratio "$rs" "$sen")"
  done
  echo
done
printf '%-44s %12s %12s %8s %12s %8s %10s\n' "start-up, wall (µs), unpinned" native sentry "x nat" runsc "x nat" "runsc/sen"
for s in "${starts[@]}"; do
  IFS='|' read -r sname what _ <<<"$s"
  nat=$(median "$tmp/start.native.$sname")
  sen=$(median "$tmp/start.sentry.$sname")
  rs=$(median "$tmp/start.runsc.$sname")
  printf '%-44s %12s %12s %8s %12s %8s %10s\n' "$what" "$nat" "$sen" "$(ratio "$sen" "$nat")" \
    "$rs" "$(ratio "$rs" "$nat")" "$(ratio "$rs" "$sen")"
done
if [ -s "$tmp/errors" ]; then
  echo
  echo "failures:"
  sort "$tmp/errors" | uniq -c | head -20
fi
