#!/usr/bin/env bash
# binds_test.sh SENTRY [SANDBOXD SANDBOXCTL]
#
# Files in and out (SandboxSpec.mounts, read_only): with `sentry run`
# (rootfs /, host programs) and, when given, through sandboxd+sandboxctl:
#   - -v HOST:DIR:ro: reads work, writes are EROFS; -v HOST:DIR (rw by
#     default, as docker): files made inside appear on the host, owned by
#     the Sentry's host uid; mkdir, rename, unlink, truncate reach the host
#   - a single host file bind-mounted
#   - escapes: "..", relative symlinks pointing out, /proc/self/root and
#     /proc/self/fd of the bind's directory, openat("../..") from a dir fd
#     of the bind, rename and link out of it (EXDEV)
#   - --tmpfs DIR:size=64k: ENOSPC beyond it; --read-only: EROFS on the
#     root, a --tmpfs /tmp still writable
#   - /proc/self/mountinfo and /proc/self/mounts list the mounts, ro/rw
#   - a checkpoint with a bind mount and a tmpfs restored: the program's
#     open file on the bind mount writes on, the tmpfs keeps its file; a
#     file mapping of a bind-mounted file restored; one of a file removed
#     on the host refused at the checkpoint; the owners a chown gave
#     bind-mounted files kept by the checkpoint; a writable shared
#     mapping written back by the checkpoint and mapped again
#   - MAP_SHARED of bind-mounted files: sqlite3 in WAL mode (its -shm)
#   - sandboxctl run -v/--tmpfs/--read-only; a checkpoint through sandboxd
#     restored (the daemon reopens the bind mount); --allowed-roots refuses
#     a bind source outside them (PERMISSION_DENIED naming the field)
# Exits 77 (CTest: skipped) until the binaries exist.
set -u
# shellcheck source=test/lib.sh
. "$(dirname "$0")/lib.sh"
usage_unless [ $# -eq 1 -o $# -eq 3 ] -- "SENTRY [SANDBOXD SANDBOXCTL]"
require_built "$@"
SENTRY=$(readlink -f "$1")
[ -x /usr/bin/python3 ] || skip "no /usr/bin/python3 on the host"
make_tmp binds_test "${KEEP:-0}"
CHECK_OUT_BYTES=400
PY=/usr/bin/python3   # an ELF (a pyenv shim is a script)

mkdir -p "$tmp/vol/sub" "$tmp/ro"
echo secret >"$tmp/secret"
echo hello >"$tmp/ro/greeting"
echo file >"$tmp/single"
ln -s ../secret "$tmp/vol/up"
ln -s ../../../../../secret "$tmp/vol/sub/deep"

run() { # run FLAGS... -- PROGRAM ARGS...
  capture 60 "$SENTRY" run --rootfs=/ "$@"
}
out_is() { [ "$(cat "$tmp/out")" = "$1" ]; }
out_has() { grep -q -- "$1" "$tmp/out"; }
err_has() { grep -q -- "$1" "$tmp/err"; }

# --- read-only and writable bind mounts ---------------------------------------
run -v "$tmp/ro:/data:ro" -- /bin/cat /data/greeting
check "ro bind: reads" out_is hello
run -v "$tmp/ro:/data:ro" -- /bin/sh -c 'echo x > /data/new'
check "ro bind: create is EROFS" err_has "Read-only file system"
run -v "$tmp/ro:/data:ro" -- /bin/sh -c 'echo x >> /data/greeting'
check "ro bind: write is EROFS" err_has "Read-only file system"
check "ro bind: host untouched" eq "$(cat "$tmp/ro/greeting"; ls "$tmp/ro")" "hello
greeting"

echo gone >"$tmp/vol/rm"
run -v "$tmp/vol:/data" -- /bin/sh -c 'echo written > /data/out && mkdir /data/d &&
  echo 1 > /data/d/a && mv /data/d/a /data/d/b && rm /data/rm &&
  printf 123456 > /data/t && truncate -s 2 /data/t && cat /data/out'
check "rw bind (default): writes" eq "$status" 0
check "rw bind: the file is on the host" eq "$(cat "$tmp/vol/out" 2>&1)" written
check "rw bind: mkdir and rename on the host" eq "$(ls "$tmp/vol/d" 2>&1)" b
check "rw bind: unlink on the host" eq "$(ls "$tmp/vol/rm" 2>&1 >/dev/null | wc -l)" 1
check "rw bind: truncate on the host" eq "$(cat "$tmp/vol/t")" 12
check "rw bind: new files are the Sentry's host uid" \
  eq "$(stat -c %u "$tmp/vol/out")" "$(id -u)"
# chown: the sandbox's owners are its own (as a user namespace maps them);
# the host file keeps the Sentry's owner. Uid 1000 then writes by owner.
echo own >"$tmp/vol/owned"
chmod 644 "$tmp/vol/owned"
host_owner=$(stat -c %u:%g "$tmp/vol/owned")
run -v "$tmp/vol:/data" -- /bin/sh -c 'chown 1000:1001 /data/owned &&
  stat -c %u:%g /data/owned &&
  setpriv --reuid=1000 --regid=1001 --clear-groups sh -c "echo by-1000 >> /data/owned" &&
  echo wrote'
check "rw bind chown: the sandbox sees its owner, uid 1000 writes by it" out_is "1000:1001
wrote"
check "rw bind chown: the host file keeps its owner" \
  eq "$(stat -c %u:%g "$tmp/vol/owned")" "$host_owner"
check "rw bind chown: the write reached the host" eq "$(tail -n 1 "$tmp/vol/owned")" by-1000
run -v "$tmp/vol:/data:rw" -- /bin/sh -c 'stat -c %s /data/out; df /data >/dev/null && echo df'
check "rw bind: stat and statfs" out_is "8
df"

run -v "$tmp/single:/etc/single-file:ro" -- /bin/cat /etc/single-file
check "single-file bind: reads" out_is file
run -v "$tmp/single:/etc/single-file" -- /bin/sh -c 'echo more >> /etc/single-file'
check "single-file bind rw: writes reach the host" eq "$(cat "$tmp/single")" "file
more"
# A source whose last name is a symlink: followed on the host at create
# (docker's rule), to a directory and to a file.
ln -s "$tmp/ro" "$tmp/ro-link"
ln -s "$tmp/single" "$tmp/single-link"
run -v "$tmp/ro-link:/data:ro" -- /bin/cat /data/greeting
check "symlink bind source: the directory it names" out_is hello
run -v "$tmp/single-link:/etc/single-file" -- /bin/sh -c 'cat /etc/single-file; echo linked >> /etc/single-file'
check "symlink bind source: the file it names, read" out_is "file
more"
check "symlink bind source: the file it names, written" eq "$(tail -n 1 "$tmp/single")" linked

# --- escapes -------------------------------------------------------------------
# Relative escapes resolve inside the sandbox (to /secret, which the host's
# / does not have), never to the host's $tmp/secret next to the bind's source.
run -v "$tmp/vol:/data" -- /bin/cat /data/../secret /data/up /data/sub/deep
check "escape: .. and relative symlinks stay inside" not_contains "$tmp/out" secret
run -v "$tmp/vol:/data" -- "$PY" -c '
import os, errno
res = []
fd = os.open("/data/sub", os.O_RDONLY | os.O_DIRECTORY)
for p in ("../../secret", "../../../secret", "../up"):
    try:
        os.open(p, os.O_RDONLY, dir_fd=fd); res.append("open " + p)
    except OSError as e:
        res.append(errno.errorcode[e.errno])
for p in ("/proc/self/fd/%d/../../secret" % fd, "/proc/self/root/data/../secret"):
    try:
        open(p).read(); res.append("open " + p)
    except OSError as e:
        res.append(errno.errorcode[e.errno])
open("/data/mv", "w").write("x")
for f in (lambda: os.rename("/data/mv", "/tmp/mv"), lambda: os.link("/data/mv", "/tmp/ln"),
          lambda: os.rename("/data/sub", "/tmp/sub")):
    try:
        f(); res.append("moved")
    except OSError as e:
        res.append(errno.errorcode[e.errno])
print(" ".join(res))'
check "escape: openat ../, /proc/self/fd, /proc/self/root; rename/link out EXDEV" \
  out_is "ENOENT ENOENT ENOENT ENOENT ENOENT EXDEV EXDEV EXDEV"
check "escape: the file stayed in the bind mount" eq "$(cat "$tmp/vol/mv" 2>&1)" x

# --- tmpfs and --read-only ------------------------------------------------------
run --tmpfs /scratch:size=64k -- /bin/sh -c \
  'dd if=/dev/zero of=/scratch/f bs=4096 count=32 2>&1; stat -c %s /scratch/f'
check "--tmpfs size=64k: ENOSPC beyond it" out_has "No space left on device"
check "--tmpfs size=64k: 64 KiB written" out_has "^65536$"
run --tmpfs /scratch:mode=700 -- /bin/stat -c %a /scratch
check "--tmpfs mode=700" out_is 700
run --read-only -- /bin/sh -c 'echo x > /etc/new-file'
check "--read-only: the root is EROFS" err_has "Read-only file system"
run --read-only --tmpfs /tmp -- /bin/sh -c 'echo ok > /tmp/x && cat /tmp/x'
check "--read-only with --tmpfs /tmp: /tmp writable" out_is ok
run --read-only -- /bin/grep -c ' / .* ro' /proc/self/mounts
check "--read-only: / is ro in /proc/self/mounts" out_is 1

# --- mountinfo -------------------------------------------------------------------
run -v "$tmp/ro:/data:ro" -v "$tmp/vol:/rw" --tmpfs /scratch -- /bin/cat /proc/self/mountinfo
check "mountinfo: the ro bind" grep -q -- " / /data ro,.* - hostfs $tmp/ro ro" "$tmp/out"
check "mountinfo: the rw bind" grep -q -- " / /rw rw,.* - hostfs $tmp/vol rw" "$tmp/out"
check "mountinfo: the tmpfs" grep -q -- " / /scratch rw,.* - tmpfs tmpfs rw" "$tmp/out"
run -v "$tmp/ro:/data:ro" -- /bin/findmnt -n -o TARGET,FSTYPE,OPTIONS /data
check "findmnt shows the bind mount" grep -q "^/data *hostfs *ro" "$tmp/out"

# sqlite3 in WAL mode on a bind mount: the -shm file is a writable shared
# mapping (hostfs's page cache); two processes write, one reads both,
# and the host reads the database afterwards.
rm -f "$tmp/vol/db"*
cat >"$tmp/vol/wal.py" <<'PY'
import sqlite3, subprocess, sys
c = sqlite3.connect("/data/db", timeout=10)
c.execute("pragma journal_mode=wal")
c.execute("create table if not exists t (v text)")
c.execute("insert into t values (?)", (sys.argv[1],))
c.commit()
if sys.argv[1] == "parent":
    subprocess.check_call([sys.executable, __file__, "child"])
    print(c.execute("pragma journal_mode").fetchone()[0],
          sorted(r[0] for r in c.execute("select v from t")))
PY
run -v "$tmp/vol:/data" -- "$PY" /data/wal.py parent
check "sqlite3 WAL on a bind mount: two processes, one database" \
  out_is "wal ['child', 'parent']"
check "sqlite3 WAL on a bind mount: the host reads it" \
  eq "$("$PY" -c 'import sqlite3; print(sorted(r[0] for r in sqlite3.connect("'"$tmp"'/vol/db").execute("select v from t")))' 2>&1)" \
  "['child', 'parent']"

# --- checkpoint and restore with a bind mount and a tmpfs ---------------------------
rm -f "$tmp/vol/log"
LOOP='exec 3>>/data/log; echo kept > /scratch/f; i=0
while [ $i -lt 30 ]; do echo $i >&3; i=$((i+1)); sleep 0.05; done; cat /scratch/f'
capture 60 "$SENTRY" run --rootfs=/ -v "$tmp/vol:/data" --tmpfs /scratch \
  --checkpoint-after=600ms --image="$tmp/img" -- /bin/sh -c "$LOOP"
check "checkpoint with a bind mount: saved" test -e "$tmp/img/state.pb"
before=$(wc -l <"$tmp/vol/log")
capture 60 "$SENTRY" restore --rootfs=/ -v "$tmp/vol:/data" --tmpfs /scratch --image="$tmp/img"
check "restore: the tmpfs file kept" out_is kept
check "restore: the program wrote on through its bind-mounted fd" \
  eq "$(tail -1 "$tmp/vol/log")" 29
check "restore: it went on from the checkpoint ($before lines before)" \
  eq "$(awk 'NR>1 && $1 != p+1 {print "gap"} {p=$1} END {print NR}' "$tmp/vol/log" 2>&1 |
        sort -u)" 30
capture 60 "$SENTRY" restore --rootfs=/ --image="$tmp/img"
check "restore without the bind mount: refused, naming it" err_has "bind mount on /data"

# The owners a chown gave bind-mounted files are the sandbox's: kept by
# a checkpoint, shown again after the restore (the host's stay as they were).
echo own >"$tmp/vol/owned2"
rm -rf "$tmp/img"
capture 60 "$SENTRY" run --rootfs=/ -v "$tmp/vol:/data" \
  --checkpoint-after=600ms --image="$tmp/img" -- /bin/sh -c \
  'chown 1000:1001 /data/owned2; sleep 1.5; stat -c %u:%g /data/owned2'
check "chown in a bind mount, checkpointed: saved" test -e "$tmp/img/state.pb"
capture 60 "$SENTRY" restore --rootfs=/ -v "$tmp/vol:/data" --image="$tmp/img"
check "chown in a bind mount: the restored sandbox still sees its owner" \
  out_is 1000:1001
check "chown in a bind mount: the host file keeps its owner after the restore" \
  eq "$(stat -c %u:%g "$tmp/vol/owned2")" "$host_owner"

# A file mapping of a bind-mounted file is saved by the file's path in
# the mount: the restored mapping shows the page touched before the
# checkpoint and reads the untouched one from the file.
{ printf 'page-one'; head -c 4088 /dev/zero; printf 'page-two'; } >"$tmp/vol/m"
MAP='import mmap, sys, time
f = open("/data/m", "rb")
m = mmap.mmap(f.fileno(), 0, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ)
f.close()
first = m[0:8]
sys.stdout.write("mapped\n"); sys.stdout.flush()
time.sleep(4)
print(first.decode(), m[0:8].decode(), m[4096:4104].decode())'
rm -rf "$tmp/img"
capture 60 "$SENTRY" run --rootfs=/ -v "$tmp/vol:/data" \
  --checkpoint-after=2500ms --image="$tmp/img" -- "$PY" -c "$MAP"
check "mmap of a bind-mounted file: checkpointed" test -e "$tmp/img/state.pb"
check "mmap of a bind-mounted file: mapped before the checkpoint" out_is mapped
capture 60 "$SENTRY" restore --rootfs=/ -v "$tmp/vol:/data" --image="$tmp/img"
check "mmap of a bind-mounted file: restored, both pages read" \
  out_is "page-one page-one page-two"
# A writable shared mapping of a bind-mounted file: the checkpoint writes
# its pages back to the host file; the restored mapping maps the file
# again and its writes go on reaching it.
head -c 4096 /dev/zero >"$tmp/vol/w"
MAPW='import mmap, sys, time
f = open("/data/w", "r+b")
m = mmap.mmap(f.fileno(), 4096)
m[0:6] = b"before"
sys.stdout.write("mapped\n"); sys.stdout.flush()
time.sleep(4)
m[6:11] = b"after"
f.seek(0)
print(f.read(11).decode(), m[0:11].decode())
m.close()'
rm -rf "$tmp/img"
capture 60 "$SENTRY" run --rootfs=/ -v "$tmp/vol:/data" \
  --checkpoint-after=2500ms --image="$tmp/img" -- "$PY" -c "$MAPW"
check "shared writable mmap of a bind-mounted file: checkpointed" test -e "$tmp/img/state.pb"
check "shared writable mmap: the checkpoint wrote its pages to the host" \
  eq "$(head -c 6 "$tmp/vol/w")" before
capture 60 "$SENTRY" restore --rootfs=/ -v "$tmp/vol:/data" --image="$tmp/img"
check "shared writable mmap: restored, read() and the mapping agree" \
  out_is "beforeafter beforeafter"
check "shared writable mmap: the restored mapping's write reached the host" \
  eq "$(head -c 11 "$tmp/vol/w")" beforeafter
# A mapping whose file is gone from the host cannot be saved: the
# checkpoint fails, saying why, and writes no image.
MAP_GONE='import mmap, os, sys, time
f = open("/data/gone", "rb")
m = mmap.mmap(f.fileno(), 0, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ)
f.close()
os.unlink("/data/gone")
sys.stdout.write("unlinked\n"); sys.stdout.flush()
time.sleep(4)'
echo gone >"$tmp/vol/gone"
rm -rf "$tmp/img"
capture 60 "$SENTRY" run --rootfs=/ -v "$tmp/vol:/data" \
  --checkpoint-after=2500ms --image="$tmp/img" -- "$PY" -c "$MAP_GONE"
check "mmap of a file removed on the host: the checkpoint fails" \
  test ! -e "$tmp/img/state.pb"
check "mmap of a file removed on the host: the error says so" \
  err_has "removed or replaced on the host"

# --- sandboxd and sandboxctl -------------------------------------------------------
if [ $# -eq 3 ]; then
  SANDBOXD=$(readlink -f "$2")
  SANDBOXCTL=$(readlink -f "$3")
  SOCK=$tmp/sandboxd.sock
  mkdir -p "$tmp/allowed/vol"
  "$SANDBOXD" --sentry="$SENTRY" --socket="$SOCK" --state-dir="$tmp/state" \
    --pool-size=1 --cgroup-parent="binds-test-$$" --default-rootfs=/ \
    --allowed-roots="$tmp/allowed" --shutdown-kill 2>>"$tmp/daemon.log" &
  daemon_pid=$!
  on_exit "stop_pid $daemon_pid"
  wait_for_daemon "$SANDBOXCTL" "$SOCK"
  ctl() { capture 60 "$SANDBOXCTL" --socket="$SOCK" "$@"; }
  ctl run --rm -v "$tmp/allowed/vol:/data" -- /bin/sh -c 'echo via-daemon > /data/f; cat /data/f'
  check "sandboxctl run -v: rw by default" out_is via-daemon
  check "sandboxctl run -v: the file is on the host" eq "$(cat "$tmp/allowed/vol/f" 2>&1)" via-daemon
  ctl run --rm --mount "type=bind,source=$tmp/allowed/vol,target=/data,readonly" -- \
    /bin/sh -c 'echo x > /data/g'
  check "sandboxctl --mount readonly: EROFS" err_has "Read-only file system"
  ctl run --rm --read-only --tmpfs /scratch:size=8k -- /bin/sh -c \
    'touch /x 2>&1; dd if=/dev/zero of=/scratch/f bs=4096 count=4 2>&1'
  check "sandboxctl --read-only: EROFS" out_has "Read-only file system"
  check "sandboxctl --tmpfs size: ENOSPC" out_has "No space left on device"
  # A checkpoint through the daemon; its restore reopens the bind mount
  # the image's spec records and hands it to the Sentry.
  ctl run -d --name=logger -v "$tmp/allowed/vol:/data" --tmpfs /scratch -- /bin/sh -c \
    'exec 3>>/data/dlog; echo kept > /scratch/f; i=0
     while [ $i -lt 40 ]; do echo $i >&3; i=$((i+1)); sleep 0.05; done; cat /scratch/f >&3'
  check "sandboxd: a sandbox with a bind mount and a tmpfs started" eq "$status" 0
  sleep 0.7
  ctl checkpoint logger --image="$tmp/dimg"
  check "sandboxd: its checkpoint" eq "$status" 0
  ctl restore --rm --image="$tmp/dimg"
  check "sandboxd: its restore ran to the end" eq "$status" 0
  check "sandboxd: the restored program wrote on through the reopened bind mount" \
    eq "$(cat "$tmp/allowed/vol/dlog" 2>&1)" "$(seq 0 39; echo kept)"
  ln -s "$tmp/allowed/vol" "$tmp/allowed/vol-link"
  ctl run --rm -v "$tmp/allowed/vol-link:/data:ro" -- /bin/cat /data/f
  check "sandboxctl run -v with a symlink source: the directory it names" out_is via-daemon
  ln -s "$tmp/vol" "$tmp/allowed/out-link"
  ctl run --rm -v "$tmp/allowed/out-link:/data" -- /bin/true
  check "--allowed-roots: a symlink source leading outside is refused" eq "$status" 125
  ctl run --rm -v "$tmp/vol:/data" -- /bin/true
  check "--allowed-roots: a bind source outside is refused" eq "$status" 125
  check "--allowed-roots: the message names the field" err_has "spec.mounts\[0\].source"
  ctl run --rm -v "$tmp/allowed/missing:/data" -- /bin/true
  check "a missing bind source is refused" err_has "spec.mounts\[0\].source"
fi

passed
