#!/usr/bin/env bash
# daemon_checkpoint_test.sh SANDBOXD SANDBOXCTL SENTRY
#
# Checkpoint and restore through sandboxd (sandboxctl checkpoint/restore):
#   - checkpoint --leave-running of a counting program: it counts on
#   - the image restored twice: two sandboxes of their own (ids, output),
#     each counting on from the checkpoint; killing one leaves the other
#   - 25 leave-running checkpoints of a vfork-heavy sh loop, back to back:
#     none refused, and it counts on after each
#   - restore attached (no -d): the restored init's output on stdout, its
#     exit status as sandboxctl's; the caller's stdin reaches a program
#     blocked in read: with -i, and without it when the sandbox was
#     created with -i (not with --no-stdin)
#   - checkpoint without --leave-running: the sandbox is STOPPED with its
#     checkpoint record (ps: "checkpointed"), not failed; into a directory
#     that is not empty: refused
#   - a damaged image: an error naming the file, the daemon serves the next
#     request, `ps` lists no half-restored sandbox (attached or -d)
#   - a restored sandbox outlives a restart of sandboxd
#   - the stage timings of an idle sandbox's checkpoint and restore
# Exits 77 (CTest: skipped) until the binaries exist.
set -u
# shellcheck source=test/lib.sh
. "$(dirname "$0")/lib.sh"
usage_unless [ $# -eq 3 ] -- "SANDBOXD SANDBOXCTL SENTRY"
require_built "$@"
SANDBOXD=$(readlink -f "$1")
SANDBOXCTL=$(readlink -f "$2")
SENTRY=$(readlink -f "$3")
make_tmp daemon_checkpoint_test "${KEEP:-0}"
SOCK=$tmp/sandboxd.sock
CHECK_OUT_BYTES=400

kill_recorded() {
  local f pid
  for f in "$tmp"/state/sentries/*; do
    [ -e "$f" ] || continue
    pid=$(basename "$f")
    # Only a Sentry: an ended sandbox's recorded pid may be another
    # process's by now.
    [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = "$SENTRY" ] && kill -9 "$pid" 2>/dev/null
  done
  return 0
}
on_exit kill_recorded

daemon_pid=
daemon() {
  "$SANDBOXD" --sentry="$SENTRY" --socket="$SOCK" --state-dir="$tmp/state" \
    --pool-size=1 --cgroup-parent="daemon-ckpt-test-$$" --default-rootfs=/ --shutdown-kill \
    "$@" 2>>"$tmp/daemon.log" &
  daemon_pid=$!
  on_exit "stop_pid $daemon_pid"
  wait_for_daemon "$SANDBOXCTL" "$SOCK"
}
ctl() { capture 60 "$SANDBOXCTL" --socket="$SOCK" "$@"; }
state() {
  "$SANDBOXCTL" --socket="$SOCK" ps -a 2>/dev/null | awk -v id="$1" '$1 == id { print $2 }'
}
# last ID: the last number the sandbox printed so far.
last() {
  "$SANDBOXCTL" --socket="$SOCK" logs "$1" 2>/dev/null | tail -1
}
# first ID: the first number it printed.
first() {
  "$SANDBOXCTL" --socket="$SOCK" logs "$1" 2>/dev/null | head -1
}
# until_gt SECS ID N: waits until ID has printed a number above N.
until_gt() {
  local i v
  for i in $(seq 1 $(($1 * 10))); do
    v=$(last "$2")
    [ -n "$v" ] && [ "$v" -gt "$3" ] && return 0
    sleep 0.1
  done
  return 1
}
# consecutive ID: its output is 0.. or K.. counting by one, nothing else.
consecutive() {
  "$SANDBOXCTL" --socket="$SOCK" logs "$1" 2>/dev/null |
    awk 'NR == 1 { p = $1; next } $1 != p + 1 { exit 1 } { p = $1 }'
}

# checkpoint ARGS...: `sandboxctl checkpoint ARGS...`, once (a task
# between its vfork and its exec is saved too: sh runs each `sleep` so).
checkpoint() { ctl checkpoint "$@"; }

daemon
COUNTER='i=0; while :; do echo $i; i=$((i+1)); sleep 0.05; done'

# --- checkpoint --leave-running, restore twice -------------------------------
ctl run -d --name=counter -- /bin/sh -c "$COUNTER"
check "counter started" eq "$status" 0
check "counter counts" until_gt 10 counter 5
before=$(last counter)
checkpoint --leave-running --timings counter --image="$tmp/img"
check "checkpoint --leave-running: exit 0" eq "$status" 0
after=$(last counter)
check "checkpoint --timings: the Sentry's save" contains "$tmp/err" "daemon.checkpoint.sentry.save"
check "checkpoint: manifest.pb written" test -s "$tmp/img/manifest.pb"
check "checkpoint: pages.img written" test -e "$tmp/img/pages.img"
check "left running: RUNNING" eq "$(state counter)" running
check "left running: counts on" until_gt 10 counter "$((after + 3))"

ctl restore -d --name=r1 --image="$tmp/img"
check "restore -d r1: exit 0" eq "$status" 0
check "restore -d r1: prints the id" eq "$(cat "$tmp/out")" r1
ctl restore -d --image="$tmp/img" --timings
check "restore -d (no name): exit 0" eq "$status" 0
r2=$(cat "$tmp/out")
check "restore -d: a made-up id" test -n "$r2"
check "restore --timings: the Sentry's load" contains "$tmp/err" "daemon.restore.sentry.load"
check "restore --timings: total" contains "$tmp/err" "daemon.restore_total"
check "r1 RUNNING" eq "$(state r1)" running
check "r2 RUNNING" eq "$(state "$r2")" running
check "r1 counts" until_gt 10 r1 "$((before + 5))"
check "r2 counts" until_gt 10 "$r2" "$((before + 5))"
f1=$(first r1)
f2=$(first "$r2")
# The image was saved between `before` and `after`: the restored count
# goes on from there, not from 0.
check "r1 goes on from the checkpoint ($before < $f1 <= $((after + 1)))" \
  awk -v f="$f1" -v b="$before" -v a="$after" 'BEGIN { exit !(f > b && f <= a + 1) }'
check "r2 starts where r1 did" eq "$f2" "$f1"
check "r1 counts by one" consecutive r1
check "r2 counts by one" consecutive "$r2"
ctl kill r1
check "kill r1" eq "$status" 0
sleep 0.3
check "r1 STOPPED" eq "$(state r1)" stopped
v=$(last "$r2")
check "r2 counts on without r1" until_gt 10 "$r2" "$((v + 3))"
check "the original counts on" until_gt 10 counter "$((v + 3))"

# --- many leave-running checkpoints of a vfork-heavy loop ----------------------
# Stops taken back to back while sh vforks and execs all the time (each
# `true` and `sleep` a vfork child): every checkpoint succeeds, and after
# each the sandbox goes on counting (a stop that ends must leave no task
# parked, and a stop taken right after one must wait for every task to
# park again). SBX_CKPT_ROUNDS sets the number (default 25).
ctl run -d --name=busy -- /bin/sh -c \
  'i=0; while :; do echo $i; i=$((i+1)); true; /bin/true; sleep 0.01; done'
check "busy: started" until_gt 10 busy 3
rounds=${SBX_CKPT_ROUNDS:-25}
ck_fail=0
went_on=0
for k in $(seq 1 "$rounds"); do
  v=$(last busy)
  ctl checkpoint busy --leave-running --image="$tmp/img-busy-$k"
  if [ "$status" != 0 ]; then
    ck_fail=$((ck_fail + 1))
    echo "# busy checkpoint $k: $(head -c 300 "$tmp/err")"
  fi
  rm -rf "$tmp/img-busy-$k"
  until_gt 10 busy "$((v + 2))" || break
  went_on=$((went_on + 1))
done
check "busy: $rounds leave-running checkpoints, none refused ($ck_fail)" eq "$ck_fail" 0
check "busy: it counted on after each of them ($went_on of $rounds)" eq "$went_on" "$rounds"
ctl rm -f busy

# --- restore attached --------------------------------------------------------
ctl run -d --name=finite -- /bin/sh -c 'sleep 0.5; echo after; exit 7'
checkpoint finite --leave-running --image="$tmp/img-finite"
check "checkpoint finite: exit 0" eq "$status" 0
ctl restore --rm --image="$tmp/img-finite"
check "restore attached: exit status 7" eq "$status" 7
check "restore attached: the output" eq "$(cat "$tmp/out")" after

# --- an attached restore's stdin ----------------------------------------------
# A sandbox created with -i kept its stdin open: restored attached, it reads
# the caller's stdin without -i, as `attach` sends it (--no-stdin: not);
# one created without -i reads it with -i, as `run -i`.
printf 'one\ntwo\n' >"$tmp/in"
READER='echo reading; cat; echo "end of stdin"; exit 3'
ctl run -d -i --name=reader-i -- /bin/sh -c "$READER"
check "reader-i reads" until_true 10 eval '[ "$(last reader-i)" = reading ]'
checkpoint reader-i --leave-running --image="$tmp/img-reader-i"
check "checkpoint reader-i (blocked in read): exit 0" eq "$status" 0
IN=$tmp/in ctl restore --rm --image="$tmp/img-reader-i"
check "restore attached of a -i sandbox: exit 3" eq "$status" 3
check "restore attached of a -i sandbox: stdin reached it" \
  eq "$(tr '\n' ' ' <"$tmp/out")" "one two end of stdin "
IN=$tmp/in ctl restore --rm --no-stdin --image="$tmp/img-reader-i"
check "restore --no-stdin: exit 3" eq "$status" 3
check "restore --no-stdin: no stdin" eq "$(tr '\n' ' ' <"$tmp/out")" "end of stdin "
ctl rm -f reader-i
# Its stdin is at its end from the start (no -i): saved before its read.
ctl run -d --name=reader -- /bin/sh -c "echo waiting; sleep 2; $READER"
check "reader waits" until_true 10 eval '[ "$(last reader)" = waiting ]'
checkpoint reader --leave-running --image="$tmp/img-reader"
check "checkpoint reader: exit 0" eq "$status" 0
IN=$tmp/in ctl restore --rm -i --image="$tmp/img-reader"
check "restore -i: exit 3" eq "$status" 3
check "restore -i: stdin reached it" \
  eq "$(tr '\n' ' ' <"$tmp/out")" "reading one two end of stdin "
ctl rm -f reader

# --- checkpoint without --leave-running ---------------------------------------
checkpoint counter --image="$tmp/img-final"
check "checkpoint (not left running): exit 0" eq "$status" 0
sleep 0.3
for _ in $(seq 1 100); do [ "$(state counter)" = checkpointed ] && break; sleep 0.1; done
check "checkpointed: ps says so" eq "$(state counter)" checkpointed
ctl inspect counter
check "checkpointed: STOPPED" contains "$tmp/out" '"state": "SANDBOX_STATE_STOPPED"'
check "checkpointed: the image" contains "$tmp/out" "\"image_dir\": \"$tmp/img-final\""
check "checkpointed: not a failure" not_contains "$tmp/out" '"error"'
ctl checkpoint "$r2" --leave-running --image="$tmp/img-final"
check "checkpoint into a non-empty directory: refused" eq "$status" 125
check "checkpoint into a non-empty directory: says so" contains "$tmp/err" "not empty"
ctl checkpoint counter --image="$tmp/img-x"
check "checkpoint of a STOPPED sandbox: refused" contains "$tmp/err" "not running"

# --- a damaged image -----------------------------------------------------------
cp -r "$tmp/img" "$tmp/bad"
printf 'X' | dd of="$tmp/bad/state.pb" bs=1 seek=40 conv=notrunc 2>/dev/null
ctl restore -d --name=bad --image="$tmp/bad"
check "damaged image: exit 125" eq "$status" 125
check "damaged image: names the file" contains "$tmp/err" "state.pb"
echo "# damaged image: $(cat "$tmp/err")"
check "damaged image: no sandbox left" eq "$(state bad)" ""
cp -r "$tmp/img" "$tmp/bad2"
rm "$tmp/bad2/pages.idx"
ctl restore -d --name=bad2 --image="$tmp/bad2"
check "missing pages.idx: names it" contains "$tmp/err" "pages.idx"
# Attached (the restore happens at the attach): the same error, and nothing
# left either.
ctl restore --name=bad-attached --image="$tmp/bad"
check "damaged image, attached: exit 125" eq "$status" 125
check "damaged image, attached: names the file" contains "$tmp/err" "state.pb"
check "damaged image, attached: no sandbox left" eq "$(state bad-attached)" ""
ctl restore -d --name=bad3 --image="$tmp/nonexistent"
check "no image at all: refused" eq "$status" 125
ctl run --rm -- /bin/echo still serving
check "the daemon serves the next request" eq "$(cat "$tmp/out")" "still serving"
ctl restore -d --name=r3 --image="$tmp/img"
check "restore after the bad ones: exit 0" eq "$status" 0
check "r3 counts" until_gt 10 r3 "$((before + 3))"
ctl ps -a
check "ps after: r3 listed" contains "$tmp/out" r3
# As whole words: a sandbox id is hex and may hold "bad".
check "ps after: no bad sandbox" not_contains_word "$tmp/out" "bad[0-9]*"

# --- memory overrides -------------------------------------------------------------
if grep -q "no cgroups" "$tmp/daemon.log"; then
  echo "# SKIP memory overrides: $(grep "no cgroups" "$tmp/daemon.log" | head -1)"
else
# 24 MB in the sandbox's /tmp (the memory file): an image that needs more
# than the smallest limit.
ctl run -d --name=big -- /bin/sh -c 'head -c 24000000 /dev/urandom >/tmp/big; echo ready; sleep 1000'
for _ in $(seq 1 100); do [ "$(last big)" = ready ] && break; sleep 0.1; done
checkpoint big --image="$tmp/img-big"
check "checkpoint big: exit 0" eq "$status" 0
ctl restore -d --name=small --memory=17m --image="$tmp/img-big"
check "restore into a smaller limit: refused" eq "$status" 125
check "restore into a smaller limit: names the field" contains "$tmp/err" "memory_bytes"
echo "# smaller limit: $(cat "$tmp/err")"
check "restore into a smaller limit: no sandbox left" eq "$(state small)" ""
ctl restore -d --name=roomy --memory=256m --image="$tmp/img-big"
check "restore --memory=256m: exit 0" eq "$status" 0
ctl inspect roomy
check "restore --memory=256m: the limit" contains "$tmp/out" '"memory_bytes": "268435456"'
ctl exec roomy -- /bin/sh -c 'wc -c </tmp/big'
check "restore: the sandbox's tmpfs came back" eq "$(cat "$tmp/out")" 24000000
ctl rm -f roomy
fi

# --- a restored sandbox outlives the daemon ------------------------------------
kill -9 "$daemon_pid"
wait "$daemon_pid" 2>/dev/null
daemon
check "after a daemon restart: r3 RUNNING" eq "$(state r3)" running
check "after a daemon restart: still checkpointed" eq "$(state counter)" checkpointed
v=$(last r3)
check "after a daemon restart: r3 counts on" until_gt 10 r3 "$((v + 3))"

# --- an idle sandbox's checkpoint and restore, timed ---------------------------
ctl run -d --name=idle -- /bin/sleep 1000
sleep 2  # the pool refilled: the restore below takes a warm Sentry
checkpoint idle --leave-running --timings --image="$tmp/img-idle"
check "idle checkpoint: exit 0" eq "$status" 0
echo "# idle checkpoint:"
sed 's/^/#   /' "$tmp/err"
ctl restore -d --name=idle-r --timings --image="$tmp/img-idle"
check "idle restore: exit 0" eq "$status" 0
echo "# idle restore:"
sed 's/^/#   /' "$tmp/err"

for id in counter "$r2" r1 r3 idle idle-r finite big; do ctl rm -f "$id"; done
ctl ps -aq
check "nothing left at the end" eq "$(lines "$tmp/out")" 0

echo "1..$n"
if [ "$fails" -ne 0 ]; then
  echo "$fails of $n checks failed; daemon log:"
  tail -30 "$tmp/daemon.log"
  exit 1
fi
exit 0
