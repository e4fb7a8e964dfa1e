#!/usr/bin/env bash
# self_checkpoint_test.sh SENTRY [SANDBOXD SANDBOXCTL]
#
# A program checkpoints itself (/proc/sandbox/checkpoint,
# sentry/proc/checkpoint.h): test/checkpoint/self.py initialises, writes
# "1" to the file and reads which side it is on.
#   sentry run --checkpoint-dir=DIR:
#     - the saved run reads "resume", its image is DIR/sandbox.1
#     - restored twice, each copy reads "restore", /proc/sandbox/restored
#       is 1, and the copies read different getrandom(2) and /dev/urandom
#       bytes (from each other and from the saved run)
#     - the same from /bin/sh (`echo 1 >&3; read side <&3`)
#     - a second self-checkpoint of a restored copy; --checkpoint-limit=1
#       refuses the second with EDQUOT
#     - without --checkpoint-dir the write fails with EPERM; the file is
#       a character device, 0666 or 0444
#   sandboxd (with SANDBOXD SANDBOXCTL), `sandboxctl run --checkpoint-dir`:
#     - the saved sandbox reads "resume" and runs on; `inspect` names the
#       image (self_checkpoints[].image_dir = DIR/ID.1)
#     - `sandboxctl restore --image=` of it, twice: "restore", different
#       random bytes, each a sandbox of its own
#     - a relative or forbidden directory (--checkpoint-roots) is refused
#     - a sandbox without --checkpoint-dir gets EPERM
#     - a self-checkpoint made while sandboxd is down (kill -9) is
#       recorded by the next sandboxd, and its image restores
# Exits 77 (CTest: skipped) when the binaries do not exist yet.
set -u
# shellcheck source=test/lib.sh
. "$(dirname "$0")/lib.sh"
usage_unless [ $# -eq 1 -o $# -eq 3 ] -- "SENTRY [SANDBOXD SANDBOXCTL]"
SENTRY=$(readlink -f "$1")
require_sentry "$SENTRY"
here=$(cd "$(dirname "$0")" && pwd)
make_tmp self_checkpoint_test "${KEEP:-0}"
PY=/usr/bin/python3
[ -x "$PY" ] || skip "$PY not installed"
SELF=$here/checkpoint/self.py
CHECK_OUT_BYTES=400

# field NAME FILE: the value of the line "NAME VALUE" in FILE.
field() { awk -v k="$1" '$1 == k { print $2; exit }' "$2"; }
differ() { [ -n "$1" ] && [ -n "$2" ] && [ "$1" != "$2" ]; }

# --- sentry run ------------------------------------------------------------
mkdir "$tmp/ck"
capture 60 "$SENTRY" run --rootfs=/ --checkpoint-dir="$tmp/ck" -- "$PY" "$SELF"
cp "$tmp/out" "$tmp/orig.out"
check "run: exit 0" eq "$status" 0
check "run: the saved run reads resume" eq "$(field side "$tmp/orig.out")" resume
check "run: /proc/sandbox/restored is 0" eq "$(field restored "$tmp/orig.out")" 0
check "run: the image is DIR/sandbox.1" test -s "$tmp/ck/sandbox.1/manifest.pb"
check "run: the sentry says where" contains "$tmp/err" "self-checkpoint: $tmp/ck/sandbox.1:"
for i in 1 2; do
  capture 60 "$SENTRY" restore --rootfs=/ --image="$tmp/ck/sandbox.1"
  cp "$tmp/out" "$tmp/r$i.out"
  check "restore $i: exit 0" eq "$status" 0
  check "restore $i: reads restore" eq "$(field side "$tmp/r$i.out")" restore
  check "restore $i: /proc/sandbox/restored is 1" eq "$(field restored "$tmp/r$i.out")" 1
  check "restore $i: no init line (it ran before the image)" eq "$(field init "$tmp/r$i.out")" ""
done
for k in getrandom urandom; do
  a=$(field $k "$tmp/orig.out")
  b=$(field $k "$tmp/r1.out")
  c=$(field $k "$tmp/r2.out")
  check "$k: restore 1 ($b) differs from restore 2 ($c)" differ "$b" "$c"
  check "$k: restore 1 differs from the saved run ($a)" differ "$a" "$b"
done

# From the shell: one description for the write and the read.
mkdir "$tmp/ck-sh"
SH='exec 3<>/proc/sandbox/checkpoint; echo 1 >&3 || exit 3; read side <&3; echo "side $side"'
capture 60 "$SENTRY" run --rootfs=/ --checkpoint-dir="$tmp/ck-sh" -- /bin/sh -c "$SH"
check "sh: reads resume" eq "$(field side "$tmp/out")" resume
capture 60 "$SENTRY" restore --rootfs=/ --image="$tmp/ck-sh/sandbox.1"
check "sh restored: reads restore" eq "$(field side "$tmp/out")" restore

# A restored copy checkpoints itself again; a limit of 1 refuses that.
mkdir "$tmp/ck2"
capture 60 "$SENTRY" run --rootfs=/ --checkpoint-dir="$tmp/ck2" -- "$PY" "$SELF" twice
check "twice: both resume" eq "$(field side "$tmp/out") $(field side2 "$tmp/out")" "resume resume"
check "twice: two images" test -s "$tmp/ck2/sandbox.2/manifest.pb"
capture 60 "$SENTRY" restore --rootfs=/ --checkpoint-dir="$tmp/ck2" --image="$tmp/ck2/sandbox.1"
check "twice restored: restore, then resume" \
  eq "$(field side "$tmp/out") $(field side2 "$tmp/out")" "restore resume"
check "twice restored: its image is the next free name" test -s "$tmp/ck2/sandbox.3/manifest.pb"
capture 60 "$SENTRY" restore --rootfs=/ --image="$tmp/ck2/sandbox.2"
check "the second image restores after the second write" eq "$(field side2 "$tmp/out")" restore
mkdir "$tmp/ck3"
capture 60 "$SENTRY" run --rootfs=/ --checkpoint-dir="$tmp/ck3" --checkpoint-limit=1 -- "$PY" "$SELF" twice
check "limit 1: the second write fails with EDQUOT" contains "$tmp/out" "write: EDQUOT"
check "limit 1: one image" eq "$(ls "$tmp/ck3")" sandbox.1

# Without a directory.
capture 60 "$SENTRY" run --rootfs=/ -- "$PY" "$SELF"
check "no --checkpoint-dir: the write fails with EPERM" contains "$tmp/out" "write: EPERM"
capture 60 "$SENTRY" run --rootfs=/ -- /bin/sh -c 'stat -c %A /proc/sandbox/checkpoint; cat /proc/sandbox/restored'
check "no --checkpoint-dir: cr--r--r--, restored 0" eq "$(tr '\n' ' ' <"$tmp/out")" "cr--r--r-- 0 "
capture 60 "$SENTRY" run --rootfs=/ --checkpoint-dir="$tmp/ck" -- /bin/stat -c %A /proc/sandbox/checkpoint
check "--checkpoint-dir: crw-rw-rw-" eq "$(cat "$tmp/out")" crw-rw-rw-

# --- through sandboxd -------------------------------------------------------
if [ $# -eq 3 ] && [ -x "$2" ] && [ -x "$3" ]; then
SANDBOXD=$(readlink -f "$2")
SANDBOXCTL=$(readlink -f "$3")
SOCK=$tmp/sandboxd.sock
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
daemon() {
  "$SANDBOXD" --sentry="$SENTRY" --socket="$SOCK" --state-dir="$tmp/state" \
    --pool-size=1 --cgroup-parent="self-ckpt-test-$$" --default-rootfs=/ --shutdown-kill \
    --checkpoint-roots="$tmp/d" 2>>"$tmp/daemon.log" &
  daemon_pid=$!
  on_exit "stop_pid $daemon_pid"
  wait_for_daemon "$SANDBOXCTL" "$SOCK" || { tail "$tmp/daemon.log"; exit 1; }
}
daemon
ctl() { capture 60 "$SANDBOXCTL" --socket="$SOCK" "$@"; }
# logs_field ID NAME: NAME's value in ID's output so far.
logs_field() {
  "$SANDBOXCTL" --socket="$SOCK" logs "$1" >"$tmp/logs" 2>/dev/null
  field "$2" "$tmp/logs"
}
# until_field SECS ID NAME: waits until ID has printed NAME.
until_field() {
  local _
  for _ in $(seq 1 $(($1 * 10))); do
    [ -n "$(logs_field "$2" "$3")" ] && return 0
    sleep 0.1
  done
  return 1
}
until_inspect() {
  local _
  for _ in $(seq 1 $(($1 * 10))); do
    "$SANDBOXCTL" --socket="$SOCK" inspect "$2" >"$tmp/inspect" 2>/dev/null
    grep -q "$3" "$tmp/inspect" && return 0
    sleep 0.1
  done
  return 1
}

mkdir -p "$tmp/d"
ctl run -d --name=fn --checkpoint-dir="$tmp/d/images" -- "$PY" "$SELF"
check "daemon: run -d --checkpoint-dir" eq "$status" 0
check "daemon: the saved sandbox reads resume" until_field 60 fn side
check "daemon: ... resume" eq "$(logs_field fn side)" resume
orig=$(logs_field fn getrandom)
check "daemon: inspect names the image" until_inspect 30 fn "\"image_dir\": \"$tmp/d/images/fn.1\""
check "daemon: the image is there" test -s "$tmp/d/images/fn.1/manifest.pb"
check "daemon: the spec records the directory" contains "$tmp/inspect" "\"checkpoint_dir\": \"$tmp/d/images\""
for r in c1 c2; do
  ctl restore -d --name=$r --image="$tmp/d/images/fn.1"
  check "daemon: restore $r: exit 0" eq "$status" 0
  check "daemon: $r reads restore" until_field 60 $r side
  check "daemon: $r ... restore" eq "$(logs_field $r side)" restore
  check "daemon: $r restored is 1" eq "$(logs_field $r restored)" 1
done
g1=$(logs_field c1 getrandom)
g2=$(logs_field c2 getrandom)
check "daemon: c1 and c2 read different getrandom bytes ($g1, $g2)" differ "$g1" "$g2"
check "daemon: c1 differs from the saved sandbox" differ "$g1" "$orig"
ctl ps -a
check "daemon: three sandboxes" eq "$(grep -c -E '^(fn|c1|c2) ' "$tmp/out")" 3

ctl run --rm --checkpoint-dir=relative -- /bin/true
check "daemon: a relative --checkpoint-dir is made absolute by sandboxctl" eq "$status" 125
check "daemon: ... and refused outside --checkpoint-roots" contains "$tmp/err" "checkpoint-roots"
ctl run --rm --checkpoint-dir=/tmp -- /bin/true
check "daemon: a directory outside --checkpoint-roots: refused" contains "$tmp/err" "spec.checkpoint_dir"
ctl run --rm -- "$PY" "$SELF"
check "daemon: without --checkpoint-dir: EPERM" contains "$tmp/out" "write: EPERM"
ctl checkpoint fn --leave-running --image=/tmp/not-allowed-$$
check "daemon: Checkpoint's image_dir outside --checkpoint-roots: refused" contains "$tmp/err" "checkpoint-roots"
rmdir "/tmp/not-allowed-$$" 2>/dev/null

# A self-checkpoint while no daemon listens: the next one hears of it.
ctl run -d --name=late --checkpoint-dir="$tmp/d/images" -- /bin/sh -c \
  'sleep 2; exec 3<>/proc/sandbox/checkpoint; echo 1 >&3; read side <&3; echo "side $side"; sleep 1000'
check "daemon: late started" eq "$status" 0
kill -9 "$daemon_pid"
wait "$daemon_pid" 2>/dev/null
sleep 3
daemon
check "daemon restarted: it heard of late's checkpoint" until_inspect 60 late "\"image_dir\": \"$tmp/d/images/late.1\""
check "daemon restarted: late reads resume" until_field 30 late side
check "daemon restarted: ... resume" eq "$(logs_field late side)" resume
ctl restore -d --name=late-r --image="$tmp/d/images/late.1"
check "daemon restarted: late.1 restores" until_field 60 late-r side
check "daemon restarted: ... restore" eq "$(logs_field late-r side)" restore

for id in fn c1 c2 late late-r; do ctl rm -f $id; done
fi

echo "1..$n"
if [ "$fails" -ne 0 ]; then
  echo "$fails of $n checks failed"
  [ -e "$tmp/daemon.log" ] && tail -20 "$tmp/daemon.log"
  exit 1
fi
exit 0
