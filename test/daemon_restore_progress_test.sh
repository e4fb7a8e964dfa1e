#!/usr/bin/env bash
# daemon_restore_progress_test.sh SANDBOXD SANDBOXCTL SENTRY
#
# A restore's page loading through sandboxd, with the loader rate-limited
# (sandboxd --restore-rate) so that loading a 40 MB image takes seconds:
#   - checkpoint without --leave-running: `ps` says "checkpointed" with
#     the image, `inspect` has the checkpoint record, not a failure
#   - `wait --restored` returns only once every page is loaded: Get shows
#     the load under way while it waits, and done, with every byte
#     loaded, the moment it returns
#   - the loader's figures at /metrics after the restore, and in inspect
#   - `restore -d` prints no progress when stderr is not a terminal, and
#     a progress line when it is (script(1)'s pty)
#   - an attached restore on a terminal: the progress line ends before the
#     program's first output, never shares a line with it
#   - `wait --restored` of a sandbox that was not restored: refused
#   - a load whose pages.img goes short under it: `wait --restored` fails
#     naming pages.img, also once the sandbox has ended (its Sentry gone)
# Exits 77 (CTest: skipped) until the binaries exist.
set -u
# shellcheck source=test/lib.sh
. "$(dirname "$0")/lib.sh"
usage_unless [ $# -eq 3 ] -- "SANDBOXD SANDBOXCTL SENTRY"
require_built "$@"
SANDBOXD=$(readlink -f "$1")
SANDBOXCTL=$(readlink -f "$2")
SENTRY=$(readlink -f "$3")
make_tmp daemon_restore_progress_test "${KEEP:-0}"
SOCK=$tmp/sandboxd.sock
CHECK_OUT_BYTES=400
BIG=40000000      # bytes the sandbox writes to its /tmp (memory)
RATE=8m           # the loader's rate: ~5 s for the image

start_bg "$tmp/daemon.log" "$SANDBOXD" --sentry="$SENTRY" --socket="$SOCK" \
  --state-dir="$tmp/state" --pool-size=1 --no-cgroups --metrics-address=127.0.0.1:0 \
  --default-rootfs=/ --shutdown-kill --restore-rate="$RATE"
wait_for_daemon "$SANDBOXCTL" "$SOCK"
metrics=$(sed -n 's|.*metrics at http://\([^/]*\)/metrics.*|\1|p' "$tmp/daemon.log" | head -1)
ctl() { capture 120 "$SANDBOXCTL" --socket="$SOCK" "$@"; }
state() {
  "$SANDBOXCTL" --socket="$SOCK" ps -a 2>/dev/null | awk -v id="$1" '$1 == id { print $2 }'
}
last() { "$SANDBOXCTL" --socket="$SOCK" logs "$1" 2>/dev/null | tail -1; }
# json ID FIELD: FIELD's value in `inspect ID` (its first occurrence).
json() {
  "$SANDBOXCTL" --socket="$SOCK" inspect "$1" 2>/dev/null |
    sed -n "s/^ *\"$2\": \"*\([^\",]*\)\"*,*$/\1/p" | head -1
}
scrape() { curl -s "http://$metrics/metrics" >"$tmp/metrics"; }
value() {
  awk -v s="$1" '$1 == s { v = $2 } END { print (v == "" ? 0 : v) }' "$tmp/metrics"
}
is_state() { [ "$(state "$1")" = "$2" ]; }
# checkpoint ARGS...: tried again while a task is a vfork child (sh's).
checkpoint() {
  local _
  for _ in $(seq 1 50); do
    ctl checkpoint "$@"
    grep -q "vfork child" "$tmp/err" || return 0
    sleep 0.1
  done
}

# --- a checkpointed sandbox ----------------------------------------------------
ctl run -d --name=big -- /bin/sh -c "head -c $BIG /dev/urandom >/tmp/big; echo ready; sleep 1000"
check "big started" eq "$status" 0
check "big wrote its memory" until_true 60 eval '[ "$(last big)" = ready ]'
checkpoint big --image="$tmp/img"
check "checkpoint (not left running): exit 0" eq "$status" 0
check "checkpointed: ps says so" until_true 30 is_state big checkpointed
ctl ps -a
check "checkpointed: ps names the image" contains "$tmp/out" "image $tmp/img"
check "checkpointed: ps says no failure" not_contains "$tmp/out" "failed"
ctl inspect big
check "checkpointed: inspect has the image" contains "$tmp/out" "\"image_dir\": \"$tmp/img\""
check "checkpointed: inspect has no error" not_contains "$tmp/out" '"error"'
check "checkpointed: STOPPED underneath" contains "$tmp/out" '"state": "SANDBOX_STATE_STOPPED"'
ctl wait --restored big
check "wait --restored of a sandbox not restored: 125" eq "$status" 125
check "wait --restored of a sandbox not restored: says so" contains "$tmp/err" "not restored"

# --- wait --restored: not before the last page ---------------------------------
ctl restore -d --name=r1 --image="$tmp/img"
check "restore -d r1: exit 0" eq "$status" 0
check "restore -d off a terminal: the id alone" eq "$(cat "$tmp/out")" r1
check "restore -d off a terminal: no progress" eq "$(wc -c <"$tmp/err")" 0
begin=$(date +%s.%N)
"$SANDBOXCTL" --socket="$SOCK" wait --restored r1 >"$tmp/wait.out" 2>"$tmp/wait.err" &
wait_pid=$!
# While the wait is under way the load is seen going on.
seen_loading=no
for _ in $(seq 1 200); do
  kill -0 "$wait_pid" 2>/dev/null || break
  ctl inspect r1
  if grep -q '"bytes_loaded"' "$tmp/out" && ! grep -q '"done": true' "$tmp/out"; then
    seen_loading=yes
    break
  fi
  sleep 0.1
done
check "while wait --restored waits: the load under way" eq "$seen_loading" yes
wait "$wait_pid"
wait_status=$?
end=$(date +%s.%N)
ctl inspect r1
check "wait --restored: exit 0" eq "$wait_status" 0
check "wait --restored: then done" contains "$tmp/out" '"done": true'
total=$(json r1 bytes_total)
loaded=$(json r1 bytes_loaded)
check "wait --restored: every byte loaded ($loaded of $total)" eq "$loaded" "$total"
check "wait --restored: the image's memory ($total >= $BIG)" ge "$total" "$BIG"
# At 8 MiB/s, 40 MB cannot load in less than ~4.7 s from the restore.
check "wait --restored: took as long as the load" \
  awk -v b="$begin" -v e="$end" 'BEGIN { exit !(e - b >= 3) }'
echo "# wait --restored took $(awk -v b="$begin" -v e="$end" 'BEGIN { printf "%.1f", e - b }') s"
ctl exec r1 -- /bin/sh -c 'wc -c </tmp/big'
check "r1's memory came back" eq "$(cat "$tmp/out")" "$BIG"
ctl wait --restored r1
check "wait --restored once loaded: at once, exit 0" eq "$status" 0

# --- the loader's figures at /metrics ---------------------------------------------
scrape
check "metrics: bytes loaded" ge "$(value sandboxd_restore_bytes_loaded_total)" "$BIG"
check "metrics: pages loaded" ge "$(value sandboxd_restore_pages_loaded_total)" $((BIG / 4096))
check "metrics: one load done" eq "$(value 'sandboxd_restore_load_seconds_count{outcome="ok"}')" 1
check "metrics: its duration (s)" ge "$(value 'sandboxd_restore_load_seconds_sum{outcome="ok"}')" 3
check "metrics: no load in progress" eq "$(value sandboxd_restore_loads_in_progress)" 0
check "metrics: the waiters gauge" grep -q '^sandboxd_restore_page_waiters{id="r1"}' "$tmp/metrics"
check "metrics: the wait histogram" grep -q '^sandboxd_restore_page_wait_seconds_bucket' "$tmp/metrics"
grep '^sandboxd_restore_' "$tmp/metrics" | grep -v _bucket | sed 's/^/# /'

# --- progress on a terminal ---------------------------------------------------------
capture 120 script -qec "'$SANDBOXCTL' --socket='$SOCK' restore -d --name=r2 --image='$tmp/img'" \
  "$tmp/typescript"
check "restore -d on a terminal: exit 0" eq "$status" 0
check "restore -d on a terminal: a progress line" contains "$tmp/typescript" "loading memory: "
check "restore -d on a terminal: MiB and rate" contains "$tmp/typescript" "MiB (.*%), .* MB/s"
check "restore -d on a terminal: the end" contains "$tmp/typescript" "memory loaded: "
ctl inspect r2
check "restore -d on a terminal: returned once loaded" contains "$tmp/out" '"done": true'
tr '\r' '\n' <"$tmp/typescript" | grep memory | tail -2 | sed 's/^/# /'

# --- an attached restore on a terminal: output never on the progress line -----------
# The program prints while its pages load: the progress line ends (on
# stderr, with the figures so far) before the program's first output.
ctl run -d --name=ticker -- /bin/sh -c \
  "head -c $BIG /dev/urandom >/tmp/big; echo ready; sleep 0.5; i=0; while [ \$i -lt 40 ]; do echo tick \$i; i=\$((i+1)); sleep 0.1; done"
check "ticker wrote its memory" until_true 60 eval '[ "$(last ticker)" = ready ]'
checkpoint ticker --image="$tmp/img-ticker"
check "checkpoint ticker: exit 0" eq "$status" 0
capture 120 script -qec "'$SANDBOXCTL' --socket='$SOCK' restore --rm --image='$tmp/img-ticker'" \
  "$tmp/typescript-attached"
check "restore attached on a terminal: exit 0" eq "$status" 0
check "restore attached on a terminal: the program's output" \
  contains "$tmp/typescript-attached" "tick 39"
check "restore attached on a terminal: a progress line" \
  contains "$tmp/typescript-attached" "loading memory: "
# Every line (progress redraws split at \r) holds progress or output, not both.
mixed=$(tr '\r' '\n' <"$tmp/typescript-attached" | grep -c 'memory.*tick\|tick.*sandboxctl')
check "restore attached on a terminal: no output on the progress line ($mixed)" eq "$mixed" 0
tr '\r' '\n' <"$tmp/typescript-attached" | grep -v '^$' | head -8 | cat -v | sed 's/^/# /'

# --- a load that fails ---------------------------------------------------------------
cp -r "$tmp/img" "$tmp/img-short"
ctl restore -d --name=r3 --image="$tmp/img-short"
check "restore -d r3: exit 0" eq "$status" 0
# The image was checked whole at the restore; now it goes short.
truncate -s 8192 "$tmp/img-short/pages.img"
ctl wait --restored r3
check "wait --restored of a failed load: 125" eq "$status" 125
check "wait --restored of a failed load: names pages.img" contains "$tmp/err" "pages.img"
echo "# failed load: $(cat "$tmp/err")"
# Once the sandbox has ended (its Sentry with it), the load's error stays.
ctl kill -s TERM r3
ctl wait r3
ctl wait --restored r3
check "wait --restored after the end of a failed load: 125" eq "$status" 125
check "wait --restored after the end of a failed load: names pages.img" contains "$tmp/err" "pages.img"

for id in big ticker r1 r2 r3; do ctl rm -f "$id"; done
ctl ps -aq
check "nothing left at the end" eq "$(lines "$tmp/out")" 0

echo "1..$n"
if [ "$fails" -ne 0 ]; then
  echo "$fails of $n checks failed; daemon log:"
  tail -30 "$tmp/daemon.log"
  exit 1
fi
exit 0
