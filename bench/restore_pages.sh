#!/usr/bin/env bash
# The page-loading benchmark of a restore (bench/README.md): runs
# bench_restore_pages in a sandbox, checkpoints it once its region is
# written, restores it with the loader's rate limited like a network disk,
# and prints, per row, the hot threads' rate after the restore relative to
# before it (0-5 s, 0-20 s) and the per-call latency of the first 20 s.
# Rows: hot threads x walker off/on x --restore-wait=shared/exclusive.
#
# With NATIVE=1 it runs the same program natively and makes the gap with
# SIGSTOP/SIGCONT (no pages to load: the program's own baseline).
#
# Environment (defaults in brackets):
#   SENTRY [out/bin/sentry]  PROG [out/bin/bench_restore_pages]
#   SIZE_MIB [4096]  THREADS ["8 32"]  WALKER ["off on"]
#   WAITS ["shared exclusive"]  RATE [131000000] (bytes/s; 0: no limit)
#   AFTER [20] (seconds measured after the restore)
#   NATIVE [0]
#
# Per row: `sentry run --checkpoint-after=CKPT_AFTER --image=DIR -- PROG`
# (the program must have printed "ready" and warmed up by then: the row
# says "no ready" otherwise), then `sentry restore --image=DIR
# --restore-wait=shared|exclusive --restore-rate=RATE --restore-stats`,
# whose output is appended to the run's; --restore-wait and --restore-rate
# are mm::AsyncLoadOptions::wait and ::rate_limit
# (sentry/mm/async_loader.h). The "load s" column is the loader's own
# duration (its counters at exit).
#   CKPT_AFTER [15s]
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SENTRY=${SENTRY:-$ROOT/out/bin/sentry}
PROG=${PROG:-$ROOT/out/bin/bench_restore_pages}
SIZE_MIB=${SIZE_MIB:-4096}
THREADS=${THREADS:-"8 32"}
WALKER=${WALKER:-"off on"}
WAITS=${WAITS:-"shared exclusive"}
RATE=${RATE:-131000000}
AFTER=${AFTER:-20}
NATIVE=${NATIVE:-0}
CKPT_AFTER=${CKPT_AFTER:-15s}

[ -x "$PROG" ] || { echo "no $PROG: build it (ninja -C out/build)" >&2; exit 1; }
TMP=$(mktemp -d /tmp/sbx_restore_pages.XXXXXX)
trap '[ -n "${KEEP:-}" ] || rm -rf "$TMP"' EXIT

# wait_ready FILE PID: until the program printed its "ready" line and had
# a second of warm-up (its pre-checkpoint rate).
wait_ready() {
  for _ in $(seq 1 600); do
    grep -q "restore_pages: ready" "$1" 2>/dev/null && { sleep 3; return 0; }
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.2
  done
  return 1
}

# field FILE KEY: the value of "KEY=value" in FILE, "n/a" if absent.
field() { sed -n "s/^$2[=<]*//p" "$1" | head -1 | grep . || echo n/a; }

# load_s FILE: the page loader's duration in seconds (--restore-stats).
load_s() {
  sed -n 's/.*restore pages at exit:.* load=\([0-9.]*\)ms.*/\1/p' "$1" |
    awk '{ printf "%.1f", $1 / 1000 }' | grep . || echo n/a
}

row() {  # row LABEL OUTFILE
  printf '| %-36s | %8s | %8s | %8s | %8s | %9s | %7s | %6s |\n' "$1" \
    "$(field "$2" ratio_0_5s)" "$(field "$2" ratio_0_20s)" \
    "$(field "$2" latency_p50_ns)" "$(field "$2" latency_p99_ns)" \
    "$(field "$2" latency_p999_ns)" "$(field "$2" restore_gap_ms)" \
    "$(load_s "$2")"
}

echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '| %-36s | %8s | %8s | %8s | %8s | %9s | %7s | %6s |\n' row \
  "0-5 s" "0-20 s" "p50 ns" "p99 ns" "p99.9 ns" "gap ms" "load s"
printf '|%s|%s|%s|%s|%s|%s|%s|%s|\n' -------------------------------------- \
  ---------- ---------- ---------- ---------- ----------- --------- --------
for t in $THREADS; do
  for w in $WALKER; do
    args=(--size="$SIZE_MIB" --threads="$t" --after="$AFTER")
    [ "$w" = on ] && args+=(--walker)
    if [ "$NATIVE" = 1 ]; then
      out=$TMP/native-$t-$w
      "$PROG" "${args[@]}" >"$out" 2>&1 &
      pid=$!
      if wait_ready "$out" "$pid"; then
        kill -STOP "$pid"; sleep 1; kill -CONT "$pid"
      fi
      wait "$pid"
      row "native $t hot, walker $w" "$out"
      continue
    fi
    [ -x "$SENTRY" ] || { echo "no $SENTRY" >&2; exit 1; }
    for mode in $WAITS; do
      img=$TMP/img-$t-$w-$mode
      out=$TMP/run-$t-$w-$mode
      mkdir -p "$img"
      "$SENTRY" run --rootfs=/ --checkpoint-after="$CKPT_AFTER" \
        --image="$img" -- "$PROG" "${args[@]}" >"$out" 2>&1 </dev/null
      if ! grep -q "restore_pages: ready" "$out" ||
        [ ! -s "$img/manifest.pb" ]; then
        row "sentry $t hot, walker $w, $mode (no ready)" "$out"
        rm -rf "$img"
        continue
      fi
      # The restored program goes on writing to the same output.
      "$SENTRY" restore --rootfs=/ --image="$img" --restore-wait="$mode" \
        --restore-rate="$RATE" --restore-stats >>"$out" 2>&1 </dev/null
      row "sentry $t hot, walker $w, $mode" "$out"
      rm -rf "$img"
    done
  done
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
