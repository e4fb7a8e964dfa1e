#!/usr/bin/env bash
# checkpoint_test.sh SENTRY
#
# Checkpoint and restore with `sentry run --checkpoint-after=D --image=DIR
# [--leave-running]` and `sentry restore --image=DIR` (host programs,
# --rootfs=/):
#   - a program checkpointed mid-run with --leave-running runs on as an
#     uninterrupted native run does, and the restored image's output is
#     the rest of that run's (the checkpoint prints where stdout stood);
#     programs: test/checkpoint/objects.py (timer, large dict, pipe, unix
#     socket pair with queued data and a passed fd, epoll, pty, threads in
#     futex waits), test/checkpoint/pipeline.sh (a pipeline mid-flight)
#     test/checkpoint/vfork.py (saved between a vfork and its exec),
#     test/checkpoint/sqlite.sh (sqlite3 with a database open in /tmp),
#     test/checkpoint/inotify.py (an inotify watch across the restore);
#   - hostinet sockets (test/checkpoint/inet.py): restored, listeners
#     listen again, a connection is reset, a UDP socket is bound again,
#     ICMP echo sockets keep their identifiers;
#   - a host descriptor other than stdio: the checkpoint fails naming it;
#   - with --systrap-patch=on: the restored run's output goes on;
#   - one image restored three times gives equal, independent runs: pages
#     loaded while the program runs (the default), eagerly
#     (--restore-pages=eager), and with exclusive waits under a rate limit;
#   - a 256 MiB dirtied heap (test/checkpoint/heap.py) restored at 64 MB/s
#     runs before its pages have loaded and reads the saved data;
#   - without --leave-running the sandbox ends after the image is written;
#   - kill -9 of a restored sentry leaves no process of it behind;
#   - a damaged image (each file truncated or removed) is refused with
#     exit 125 and a message naming the file.
# Exits 77 (CTest: skipped) when SENTRY does not exist yet.
set -u
# shellcheck source=test/lib.sh
. "$(dirname "$0")/lib.sh"
usage_unless [ $# -eq 1 ] -- "SENTRY"
SENTRY=$1
require_sentry "$SENTRY"
here=$(cd "$(dirname "$0")" && pwd)
make_tmp checkpoint_test
PY=/usr/bin/python3
[ -x "$PY" ] || skip "$PY not installed"

# run_case NAME AFTER PROG...: native, checkpointed (--leave-running) and
# restored runs of PROG; the checks compare their outputs.
run_case() {
  local name=$1 after=$2 at
  shift 2
  timeout -k 5 60 "$@" >"$tmp/$name.native" 2>/dev/null </dev/null
  capture 60 "$SENTRY" run --rootfs=/ --checkpoint-after="$after" \
    --image="$tmp/$name.img" --leave-running -- "$@"
  cp "$tmp/out" "$tmp/$name.orig"
  cp "$tmp/err" "$tmp/$name.orig.err"
  check "$name: the checkpointed run exits 0" eq "$status" 0
  check "$name: the checkpointed run's output is the native run's" \
    cmp -s "$tmp/$name.orig" "$tmp/$name.native"
  at=$(sed -n 's/.*stdout at \([0-9]*\)$/\1/p' "$tmp/$name.orig.err")
  # Taken is what counts; under load a slow start can put it before the
  # first output, which the restored run must then print whole.
  check "$name: the checkpoint was taken (stdout at '$at')" test -n "$at"
  [ "${at:-0}" = 0 ] && echo "# $name: checkpointed before its first output"
  capture 60 "$SENTRY" restore --rootfs=/ --image="$tmp/$name.img"
  check "$name: the restored run exits 0 ($(head -c 200 "$tmp/err"))" \
    eq "$status" 0
  head -c "${at:-0}" "$tmp/$name.orig" >"$tmp/$name.joined"
  cat "$tmp/out" >>"$tmp/$name.joined"
  cp "$tmp/out" "$tmp/$name.rest1"
  if ! check "$name: output before the checkpoint + restored = native" \
    cmp -s "$tmp/$name.joined" "$tmp/$name.native"; then
    diff "$tmp/$name.joined" "$tmp/$name.native" | head -5 | sed 's/^/  /'
  fi
  capture 60 "$SENTRY" restore --rootfs=/ --image="$tmp/$name.img" \
    --restore-pages=eager
  check "$name: the same image restored again (eager) runs the same" \
    cmp -s "$tmp/out" "$tmp/$name.rest1"
  capture 60 "$SENTRY" restore --rootfs=/ --image="$tmp/$name.img" \
    --restore-wait=exclusive --restore-rate=20M
  check "$name: restored again (exclusive waits, 20 MB/s) runs the same" \
    cmp -s "$tmp/out" "$tmp/$name.rest1"
}

run_case objects 400ms "$PY" "$here/checkpoint/objects.py"
run_case pipeline 250ms /bin/sh "$here/checkpoint/pipeline.sh"
# Saved while a vfork child has not exec'd yet (its parent waits in
# posix_spawn): restored, the child carries on and the parent's call
# returns its pid once it execs.
run_case vfork 600ms "$PY" "$here/checkpoint/vfork.py"
# sqlite3 with its database open in /tmp, fed from a pipe mid-flight.
if [ -x /usr/bin/sqlite3 ]; then
  run_case sqlite 500ms /bin/sh "$here/checkpoint/sqlite.sh"
else
  echo "# SKIP sqlite: /usr/bin/sqlite3 not installed (tools/install_deps.sh)"
fi
# An inotify watch on a /tmp directory: events keep coming after a restore.
run_case inotify 400ms "$PY" "$here/checkpoint/inotify.py"

# hostinet sockets (test/checkpoint/inet.py): run on, the program sees its
# connection and listeners as they were; restored, the connection is reset
# (ECONNRESET, then EOF and EPIPE), the IPv4 and IPv6 listeners listen on
# the same addresses with their options and accept new clients, the bound
# UDP socket receives on its address, and the two ICMP echo sockets (one
# bound, one bound by its first echo request) keep their identifiers and
# get the replies to new echo requests.
# The checkpoint comes 1.5 s in, within the program's 4 s sleep after
# "ready" (python's start and the sockets' set-up took more than 0.5 s at a
# load of 20 here).
capture 60 "$SENTRY" run --rootfs=/ --checkpoint-after=1500ms \
  --image="$tmp/inet.img" --leave-running -- "$PY" "$here/checkpoint/inet.py" 4
cp "$tmp/out" "$tmp/inet.orig"
check "inet: the checkpointed run exits 0 ($(head -c 200 "$tmp/err"))" \
  eq "$status" 0
check "inet: the checkpoint was taken after \"ready\"" \
  grep -q "stdout at [1-9]" "$tmp/err"
check "inet: run on, the data arrives" contains "$tmp/inet.orig" \
  "server recv first b'ping'"
capture 60 "$SENTRY" restore --rootfs=/ --image="$tmp/inet.img"
check "inet: the restore exits 0 ($(head -c 200 "$tmp/err"))" eq "$status" 0
for want in "same names: True" "listener6 V6ONLY: 1" \
  "listener REUSEADDR: True" "server recv first ECONNRESET" \
  "server recv second b''" "client send first ECONNRESET" \
  "client send second EPIPE" "listener accepted: b'hello listener'" \
  "listener6 accepted: b'hello listener6'" "udp got: b'dgram'" \
  "ping same names: True" "ping bound reply: (0, 2, b'ping')" \
  "ping sent reply: (0, 2, b'ping')" "done"; do
  check "inet: restored: $want" grep -qxF "$want" "$tmp/out"
done

# A host descriptor other than stdio (a reopen of stdout through
# /proc/self/fd) cannot be saved: the checkpoint fails naming the process,
# the descriptor and the host file, and the sandbox goes on.
capture 60 "$SENTRY" run --rootfs=/ --checkpoint-after=300ms \
  --image="$tmp/hostfd.img" --leave-running -- \
  /bin/sh -c 'exec 3</proc/self/fd/1; sleep 1; echo goes on'
check "host fd: the sandbox goes on" eq "$(cat "$tmp/out")" "goes on"
check "host fd: the checkpoint names the process and descriptor 3" \
  contains "$tmp/err" "process 1: descriptor 3: a host file"
check "host fd: ... and what the host file is" contains "$tmp/err" "a host regular file"
check "host fd: no image" test ! -e "$tmp/hostfd.img"

# Syscall patching: the sites patched before the save are written back in
# the image and patched again as the restored program runs.
if sentry_probe "$SENTRY" --systrap-patch=on; then
  capture 60 "$SENTRY" run --rootfs=/ --systrap-patch=on --checkpoint-after=300ms \
    --image="$tmp/patch.img" --leave-running -- /bin/sh "$here/checkpoint/pipeline.sh"
  cp "$tmp/out" "$tmp/patch.orig"
  at=$(sed -n 's/.*stdout at \([0-9]*\)$/\1/p' "$tmp/err")
  check "patched: checkpointed ($(head -c 200 "$tmp/err"))" ge "${at:-0}" 1
  capture 60 "$SENTRY" restore --rootfs=/ --systrap-patch=on --image="$tmp/patch.img"
  check "patched: the restore exits 0 ($(head -c 200 "$tmp/err"))" eq "$status" 0
  head -c "${at:-0}" "$tmp/patch.orig" >"$tmp/patch.joined"
  cat "$tmp/out" >>"$tmp/patch.joined"
  check "patched: output before the checkpoint + restored = the whole run" \
    cmp -s "$tmp/patch.joined" "$tmp/patch.orig"
else
  echo "# SKIP patched sites: $probe_why"
fi

# A 256 MiB dirtied heap restored at 64 MB/s: the program runs before its
# memory has arrived (its digest of the heap waits for the pages, ~4 s)
# and finds the data it had; eagerly, the digest takes a fraction of it.
sleep 60 | timeout -k 5 90 "$SENTRY" run --rootfs=/ --checkpoint-after=4s \
  --image="$tmp/heap.img" -- "$PY" "$here/checkpoint/heap.py" 256 \
  >"$tmp/heap.orig" 2>"$tmp/heap.orig.err"
check "heap: checkpointed after the fill ($(head -c 200 "$tmp/heap.orig.err"))" \
  contains "$tmp/heap.orig" ready
want=$(sed -n 's/^digest //p' "$tmp/heap.orig")
echo go >"$tmp/go"
IN=$tmp/go capture 90 "$SENTRY" restore --rootfs=/ --image="$tmp/heap.img" \
  --restore-rate=64M --restore-stats --timings
check "heap: the async restore exits 0 ($(head -c 200 "$tmp/err"))" \
  eq "$status" 0
check "heap: the restored copy read its stdin" contains "$tmp/out" "got go"
check "heap: the restored heap is the saved one" \
  eq "$(sed -n 's/^digest //p' "$tmp/out")" "$want"
ms=$(sed -n 's/^digest_ms //p' "$tmp/out")
check "heap: its pages were still arriving ($ms ms to digest)" \
  ge "${ms:-0}" 1500
loaded=$(sed -n 's/.*restore pages at start: bytes=\([0-9]*\)\/.*/\1/p' \
  "$tmp/err")
check "heap: the program started with at most half loaded (${loaded:-?})" \
  eval '[ -n "$loaded" ] && [ "$loaded" -le $((128 << 20)) ]'
check "heap: every page loaded by the end" \
  eval 'grep -q "restore pages at exit: bytes=\([0-9]*\)/\1 .*done=1" "$tmp/err"'
IN=$tmp/go capture 90 "$SENTRY" restore --rootfs=/ --image="$tmp/heap.img" \
  --restore-pages=eager
check "heap: the eager restore's heap is the saved one" \
  eq "$(sed -n 's/^digest //p' "$tmp/out")" "$want"
ms=$(sed -n 's/^digest_ms //p' "$tmp/out")
check "heap: eagerly, the digest does not wait ($ms ms)" \
  eval '[ -n "$ms" ] && [ "$ms" -lt 1500 ]'
rm -rf "$tmp/heap.img"

# Without --leave-running: the image is the result, the sandbox ends.
capture 60 "$SENTRY" run --rootfs=/ --checkpoint-after=200ms \
  --image="$tmp/idle.img" -- /bin/sleep 5
check "checkpoint and kill: exit 0" eq "$status" 0
check "checkpoint and kill: the manifest is there" \
  test -s "$tmp/idle.img/manifest.pb"
check "checkpoint and kill: no temporary directory left" \
  eq "$(find "$tmp" -maxdepth 1 -name 'idle.img.*' | wc -l)" 0

# kill -9 of a restored sentry: nothing of it stays (its stub processes
# are in its process group).
setsid "$SENTRY" restore --rootfs=/ --image="$tmp/idle.img" \
  </dev/null >/dev/null 2>&1 &
rpid=$!
sleep 0.5
check "kill -9 restore: it was running" kill -0 "$rpid"
kill -9 "$rpid"
wait "$rpid" 2>/dev/null
left=
for _ in $(seq 1 40); do
  left=$(ps -eo pgid=,pid= | awk -v g="$rpid" '$1 == g { print $2 }')
  [ -z "$left" ] && break
  sleep 0.05
done
check "kill -9 restore: no process of its group left ($left)" eq "$left" ""

# A damaged image: each file truncated, then removed.
for f in manifest.pb state.pb pages.idx pages.img; do
  for how in truncate remove; do
    rm -rf "$tmp/bad.img"
    cp -r "$tmp/idle.img" "$tmp/bad.img"
    if [ "$how" = truncate ]; then
      truncate -s -1 "$tmp/bad.img/$f"
    else
      rm "$tmp/bad.img/$f"
    fi
    capture 30 "$SENTRY" restore --rootfs=/ --image="$tmp/bad.img"
    check "$f ${how}d: restore exits 125 naming it" \
      eval '[ "$status" = 125 ] && contains "$tmp/err" "$f"'
  done
done

passed
