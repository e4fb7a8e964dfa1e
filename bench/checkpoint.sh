#!/usr/bin/env bash
# Checkpoint and restore of an idle sandbox and of one with a dirtied heap,
# sentry against Debian's runsc (bench/README.md). One command, one run of
# each, ratios sentry/runsc.
#
#   sentry: `sentry run --checkpoint-after --image --timings` (the
#   checkpoint's stages, in the Sentry: no process start) and `sentry
#   restore --timings --restore-stats`: the restore's own stages on a
#   prewarmed Sentry (Restore call to the first instruction) and, for the
#   heap, the page loader's duration (async) or the eager read.
#   runsc: `runsc run -detach` of a bundle whose root is / (read-only),
#   then the wall time of `runsc checkpoint` and of `runsc restore -detach`
#   (commands: their process start is in it).
#
# The program is read from TMP through that root (no tmpfs on /tmp).
#
# Environment: SENTRY [out/bin/sentry] RUNSC [runsc] KEEP [] (1: keep TMP)
#   RUNSC_FLAGS [--platform=ptrace --network=none] HEAP_MIB [1024]
#   HEAP_AFTER [10] (seconds from start to the heap's checkpoint)
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/bench/lib.sh"
SENTRY=${SENTRY:-$ROOT/out/bin/sentry}
RUNSC=${RUNSC:-runsc}
# shellcheck disable=SC2206
RUNSC_FLAGS=(${RUNSC_FLAGS:---platform=ptrace --network=none})
HEAP_MIB=${HEAP_MIB:-1024}
HEAP_AFTER=${HEAP_AFTER:-10}
[ -x "$SENTRY" ] || { echo "no $SENTRY: build first" >&2; exit 1; }
TMP=$(mktemp -d /tmp/bench_checkpoint.XXXXXX)
ids=()
cleanup() {
  for id in "${ids[@]}"; do
    "$RUNSC" --root="$TMP/runsc" "${RUNSC_FLAGS[@]}" delete --force "$id" \
      >/dev/null 2>&1
  done
  [ -n "${KEEP:-}" ] || rm -rf "$TMP"
}
trap cleanup EXIT

# The program: idle sleeps; heap dirties HEAP_MIB MiB first. Both print
# "ready", then end one second after a gap in the wall clock (the restore).
cat >"$TMP/prog.py" <<'EOF'
import os, sys, time
mib = int(sys.argv[1])
heap = bytearray(os.urandom(1 << 20)) * mib if mib else b""
print("ready", flush=True)
last = time.time()
while True:
    time.sleep(0.05)
    now = time.time()
    if now - last > 0.5:
        time.sleep(1)
        sys.exit(0)
    last = now
EOF

# ratio A B: A/B with three significant digits (bench/lib.sh's has one
# decimal, too coarse for 0.04x).
ratio() {
  awk -v a="$1" -v b="$2" 'BEGIN { if (a ~ /^[0-9.]+$/ && b ~ /^[0-9.]+$/ &&
    b > 0) printf "%.3gx", a / b; else print "n/a" }'
}
now_ms() { date +%s%N | awk '{ printf "%.1f", $1 / 1e6 }'; }
# stage_total FILE WHAT: the "total=" of the "sentry: WHAT timings:" line.
stage_total() {
  sed -n "s/^sentry: $2 timings:.* total=\([0-9.]*\)ms/\1/p" "$1" | head -1 |
    grep . || echo n/a
}
load_ms() {
  sed -n 's/.*restore pages at exit:.* load=\([0-9.]*\)ms.*/\1/p' "$1" |
    head -1 | grep . || echo n/a
}

# sentry_case NAME MIB AFTER
sentry_case() {
  local img=$TMP/$1.img
  "$SENTRY" run --rootfs=/ --checkpoint-after="$3" --image="$img" \
    --timings -- /usr/bin/python3 "$TMP/prog.py" "$2" \
    >"$TMP/$1.run.out" 2>"$TMP/$1.run.err" </dev/null
  s_ckpt[$1]=$(stage_total "$TMP/$1.run.err" checkpoint)
  grep -q ready "$TMP/$1.run.out" || s_ckpt[$1]="n/a(no ready)"
  sleep 1
  "$SENTRY" restore --rootfs=/ --image="$img" --timings --restore-stats \
    >/dev/null 2>"$TMP/$1.rs.err" </dev/null
  s_rest[$1]=$(stage_total "$TMP/$1.rs.err" restore)
  s_prewarm[$1]=$(stage_total "$TMP/$1.rs.err" prewarm)
  s_load[$1]=$(load_ms "$TMP/$1.rs.err")
  s_line[$1]=$(grep "restore timings" "$TMP/$1.rs.err")
  "$SENTRY" restore --rootfs=/ --image="$img" --timings \
    --restore-pages=eager >/dev/null 2>"$TMP/$1.eager.err" </dev/null
  s_eager[$1]=$(stage_total "$TMP/$1.eager.err" restore)
  s_size[$1]=$(du -sm "$img" | cut -f1)
  rm -rf "$img"
}

# runsc_case NAME MIB AFTER_S
runsc_case() {
  local b=$TMP/$1.bundle id="bench-ckpt-$1-$$" t0 t1
  local -a rf=(--root="$TMP/runsc" "${RUNSC_FLAGS[@]}")
  mkdir -p "$b"
  python3 - "$b/config.json" "$TMP/prog.py" "$2" <<'EOF'
import json, sys
c = {"ociVersion": "1.0.0",
     "process": {"terminal": False, "user": {"uid": 0, "gid": 0},
                 "args": ["/usr/bin/python3", sys.argv[2], sys.argv[3]],
                 "env": ["PATH=/usr/bin:/bin"], "cwd": "/"},
     "root": {"path": "/", "readonly": True},
     "hostname": "bench",
     "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}],
     "linux": {"namespaces": [{"type": t} for t in
                              ["pid", "ipc", "uts", "mount", "network"]]}}
json.dump(c, open(sys.argv[1], "w"))
EOF
  ids+=("$id" "$id-r")
  timeout 60 "$RUNSC" "${rf[@]}" run -bundle "$b" -detach "$id" \
    >"$TMP/$1.runsc.out" 2>"$TMP/$1.runsc.err" </dev/null || {
    r_ckpt[$1]="n/a(run: $(tail -c 120 "$TMP/$1.runsc.err"))"
    r_rest[$1]=n/a
    return
  }
  for _ in $(seq 1 $((${3} * 10))); do
    grep -q ready "$TMP/$1.runsc.out" && break
    sleep 0.1
  done
  sleep 0.5
  t0=$(now_ms)
  timeout 120 "$RUNSC" "${rf[@]}" checkpoint --image-path="$TMP/$1.rimg" \
    "$id" >"$TMP/$1.ck.err" 2>&1
  local rc=$?
  t1=$(now_ms)
  if [ $rc -ne 0 ]; then
    r_ckpt[$1]="n/a(checkpoint: $(tail -c 120 "$TMP/$1.ck.err"))"
    r_rest[$1]=n/a
    return
  fi
  r_ckpt[$1]=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  r_size[$1]=$(du -sm "$TMP/$1.rimg" | cut -f1)
  sleep 1
  t0=$(now_ms)
  timeout 120 "$RUNSC" "${rf[@]}" restore --image-path="$TMP/$1.rimg" \
    -bundle "$b" -detach "$id-r" >"$TMP/$1.rs.out" 2>&1 </dev/null
  rc=$?
  t1=$(now_ms)
  if [ $rc -ne 0 ]; then
    r_rest[$1]="n/a(restore: $(tail -c 120 "$TMP/$1.rs.out"))"
  else
    r_rest[$1]=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  fi
  "$RUNSC" "${rf[@]}" kill "$id-r" KILL >/dev/null 2>&1
  rm -rf "$TMP/$1.rimg"
}

declare -A s_ckpt s_rest s_prewarm s_load s_line s_eager s_size r_ckpt \
  r_rest r_size
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
sentry_case idle 0 1s
sentry_case heap "$HEAP_MIB" "${HEAP_AFTER}s"
if command -v "$RUNSC" >/dev/null 2>&1; then
  runsc_case idle 0 10
  runsc_case heap "$HEAP_MIB" "$HEAP_AFTER"
else
  for c in idle heap; do r_ckpt[$c]="n/a(no runsc)"; r_rest[$c]=n/a; done
fi

printf '| %-34s | %12s | %12s | %8s |\n' "ms (one run)" sentry runsc \
  "s/runsc"
printf '|%s|%s|%s|%s|\n' ------------------------------------ \
  -------------- -------------- ----------
for c in idle heap; do
  what=$c
  [ "$c" = heap ] && what="heap ${HEAP_MIB} MiB"
  printf '| %-34s | %12s | %12s | %8s |\n' "$what: checkpoint" \
    "${s_ckpt[$c]}" "${r_ckpt[$c]}" "$(ratio "${s_ckpt[$c]}" "${r_ckpt[$c]}")"
  printf '| %-34s | %12s | %12s | %8s |\n' "$what: restore, first instruction" \
    "${s_rest[$c]}" "${r_rest[$c]}" "$(ratio "${s_rest[$c]}" "${r_rest[$c]}")"
  printf '| %-34s | %12s | %12s | %8s |\n' "$what: restore, eager pages" \
    "${s_eager[$c]}" "${r_rest[$c]}" "$(ratio "${s_eager[$c]}" "${r_rest[$c]}")"
  printf '| %-34s | %12s | %12s | %8s |\n' "$what: async pages loaded after" \
    "${s_load[$c]}" "" ""
  printf '| %-34s | %12s | %12s | %8s |\n' "$what: image MiB" \
    "${s_size[$c]:-n/a}" "${r_size[$c]:-n/a}" ""
done
for c in idle heap; do
  echo "sentry $c: prewarm (before the image) ${s_prewarm[$c]} ms;" \
    "${s_line[$c]#sentry: }"
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
