#!/usr/bin/env bash
# escape.sh SENTRY ESCAPE [SANDBOXD SANDBOXCTL]
#
# Runs the escape probes (test/escape/escape.c, static) natively, where
# each must reach its harmless target (a decoy process and marker of its
# own, the host's block device read-only, /dev/kvm, ...), and then inside
# the sandbox: `sentry run` on systrap, on kvm where it works, and
# `sandboxctl run --rm` against a sandboxd started on a temporary socket,
# each with a rootfs made for the test (the program alone) and
#   canary  a host `sleep` whose pid the probes are given
#   marker  a host file outside the rootfs, with a random token
#   stdin   a host file next to the marker (for the fd-link probes)
#   a host unix socket (path and abstract name) that writes to a log
# Inside, every probe must print "held", and afterwards: the canary is
# alive, not stopped, not traced; the marker is unchanged and its token is
# in no output; the host directory holds exactly the files it had, the
# rootfs directory is untouched, and none of the paths the probes create in
# their /tmp and /dev/shm exists on the host; no one connected to the host socket; the
# host's hostname is unchanged. Prints probes tried and held per run.
# Exits 77 when SENTRY or ESCAPE is missing.
set -u
# test/lib.sh: one level up in the tree, beside the script in Bazel's
# runfiles (test/<name>_test).
lib=$(dirname "$0")/../lib.sh
[ -f "$lib" ] || lib=$(dirname "$0")/lib.sh
# shellcheck source=test/lib.sh
. "$lib"
usage_unless [ $# -eq 2 -o $# -eq 4 ] -- "SENTRY ESCAPE [SANDBOXD SANDBOXCTL]"
require_sentry "$1"
require_built "$2"
SENTRY=$(readlink -f "$1")
ESCAPE=$(readlink -f "$2")
SANDBOXD= SANDBOXCTL=
if [ $# -eq 4 ] && [ -x "$3" ] && [ -x "$4" ]; then
  SANDBOXD=$(readlink -f "$3")
  SANDBOXCTL=$(readlink -f "$4")
fi
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3) || skip "python3 not found"
make_tmp escape
ulimit -c 0
fails=0

# Probes that only run inside (unsafe natively: kill(-1), a write to
# /proc/sys, /proc/sysrq-trigger) and so are not checked natively.
inside_only="kill_all proc_sysrq_trigger dev_mem_disks"

# setup DIR: a marker dir, its marker, a stdin file, a listener; a decoy
# or canary process. Sets $marker $token $canary $vmaddr $abstract
# $tcp_port (the listener's TCP port on 127.0.0.1).
setup() {
  local dir=$1
  mkdir -p "$dir"
  token="escape-token-$$-$RANDOM$RANDOM"
  marker=$dir/marker
  echo "$token" >"$marker"
  echo "stdin of the probes" >"$dir/stdin.txt"
  sleep 600 &
  canary=$!
  on_exit "stop_pid $canary"
  # Its maps once it is sleep (not the forked shell any more).
  for _ in $(seq 1 100); do
    case $(readlink "/proc/$canary/exe") in *sleep*) break ;; esac
    sleep 0.02
  done
  vmaddr=$(head -1 "/proc/$canary/maps" | cut -d- -f1)
  abstract="sbx-escape-$$-$RANDOM"
  "$PY" -c '
import os, socket, sys
path, abstract, log = sys.argv[1:4]
a = socket.socket(socket.AF_UNIX); a.bind(path); a.listen(8)
b = socket.socket(socket.AF_UNIX); b.bind("\0" + abstract); b.listen(8)
t = socket.socket(); t.bind(("127.0.0.1", 0)); t.listen(8)
open(log + ".port", "w").write("%d\n" % t.getsockname()[1])
import select
while True:
    r, _, _ = select.select([a, b, t], [], [])
    for s in r:
        c, _ = s.accept()
        open(log, "a").write("connected\n")
        c.close()
' "$dir/host.sock" "$abstract" "$dir/connections.log" &
  local lp=$!
  on_exit "stop_pid $lp"
  for _ in $(seq 1 100); do
    [ -s "$dir/connections.log.port" ] && break
    sleep 0.05
  done
  tcp_port=$(cat "$dir/connections.log.port" 2>/dev/null)
  mv "$dir/connections.log.port" "$tmp/$(basename "$dir").port" 2>/dev/null
}

# The host's root block device, as MAJOR:MINOR, for the mknod probe.
blockdev=$(awk '$5 == "/" { print $3; exit }' /proc/self/mountinfo)
case $blockdev in 0:*) blockdev= ;; esac
if [ -n "$blockdev" ] && ! { mknod "$tmp/blk" b "${blockdev%:*}" \
  "${blockdev#*:}" && [ "$(head -c 512 "$tmp/blk" | wc -c)" = 512 ]; } 2>/dev/null; then
  echo "SKIP mknod_blockdev: natively a node b $blockdev cannot be made or read here"
  blockdev=
fi
rm -f "$tmp/blk"
hostname_before=$(cat /proc/sys/kernel/hostname)

# --- native: every probe must reach its harmless target ---------------
n=$((n + 1))
native_dir=$tmp/native
setup "$native_dir"
handle=$("$ESCAPE" handle "$marker" 2>/dev/null)
(cd "$tmp" && "$ESCAPE" native canary="$canary" marker="$marker" \
  outside="$native_dir" blockdev="$blockdev" vmaddr="$vmaddr" \
  abstract="$abstract" tcp="$tcp_port") <"$native_dir/stdin.txt" >"$tmp/native.out" 2>&1
rm -rf /tmp/escape-chroot /tmp/escape-mnt /tmp/escape-link \
  /tmp/escape-blk /tmp/escape-kvm /dev/shm/escape-exec
stop_pid "$canary"
native_probes=$(awk '$1 == "PROBE" { print $2 }' "$tmp/native.out" | sort -u)
not_reached=$(awk '$1 == "PROBE" && $3 != "REACHED" { print $2 }' "$tmp/native.out")
native_probes="$native_probes
$(echo $inside_only | tr ' ' '\n')"
if [ "$(id -u)" != 0 ]; then
  echo "note: not root: the native check of the privileged probes is skipped"
  not_reached=
fi
if [ -z "$native_probes" ] || [ -n "$not_reached" ]; then
  echo "not ok $n - natively every probe reaches its target; these did not:"
  grep -E "^PROBE ($(echo $not_reached | tr ' ' '|')) " "$tmp/native.out" | sed 's/^/    /'
  [ -n "$native_probes" ] || head -c 2000 "$tmp/native.out"
  fails=$((fails + 1))
else
  echo "ok $n - natively all $(grep -c '^PROBE ' "$tmp/native.out") probes" \
    "reach their targets (they can fail; inside only: $inside_only)"
fi

# --- inside ------------------------------------------------------------
# run_inside NAME COMMAND...: the probes with the canary and marker set up
# in $tmp/NAME; checks everything held and the host is unchanged.
run_inside() {
  local name=$1
  shift
  local dir=$tmp/$name.outside root=$tmp/$name.rootfs
  setup "$dir"
  mkdir -p "$root"
  cp "$ESCAPE" "$root/escape"
  local sum before
  sum=$(sha256sum <"$marker")
  before=$(ls -A "$dir" | sort | tr '\n' ' ')
  local args=(inside canary="$canary" marker="$marker" outside="$dir"
    blockdev="$blockdev" vmaddr="$vmaddr" handle="$handle"
    abstract="$abstract" tcp="$tcp_port")
  local cmd=("$@")
  cmd=("${cmd[@]//@ROOT@/$root}")
  (cd "$tmp" && timeout -k 5 120 "${cmd[@]}" "${args[@]}") \
    <"$dir/stdin.txt" >"$tmp/$name.out" 2>"$tmp/$name.err"
  local status=$? bad=()
  local tried held
  tried=$(grep -c '^PROBE ' "$tmp/$name.out")
  held=$(grep -c '^PROBE [^ ]* held' "$tmp/$name.out")
  grep -q '^ESCAPE probes=' "$tmp/$name.out" || bad+=("the probes did not finish (status $status)")
  local reached
  reached=$(awk '$3 == "REACHED" { printf "%s ", $2 }' "$tmp/$name.out")
  [ -n "$reached" ] && bad+=("probes reached: $reached")
  local p
  for p in $native_probes; do
    grep -q "^PROBE $p " "$tmp/$name.out" || bad+=("probe $p did not run")
  done
  if ! kill -0 "$canary" 2>/dev/null; then
    bad+=("the canary was killed")
  elif grep -q '^State:.*[tT]' "/proc/$canary/status"; then
    bad+=("the canary was stopped")
    kill -CONT "$canary"
  elif ! grep -q '^TracerPid:[[:space:]]*0$' "/proc/$canary/status"; then
    bad+=("the canary is traced")
  fi
  [ "$(sha256sum <"$marker")" = "$sum" ] || bad+=("the marker changed")
  cat "$tmp/$name.out" "$tmp/$name.err" | grep -q "$token" &&
    bad+=("the marker's token is in the output")
  local after
  after=$(ls -A "$dir" | sort | tr '\n' ' ')
  [ "$after" = "$before" ] || bad+=("host directory changed: $after")
  [ "$(ls -A "$root")" = escape ] ||
    bad+=("the rootfs directory changed: $(ls -A "$root" | tr '\n' ' ')")
  # The paths the probes create in their own /tmp and /dev/shm.
  local f
  for f in /tmp/escape-chroot /tmp/escape-mnt /tmp/escape-link \
    /tmp/escape-blk /tmp/escape-kvm /dev/shm/escape-exec; do
    [ -e "$f" ] || [ -L "$f" ] && bad+=("a host file was created: $f")
  done
  [ -s "$dir/connections.log" ] &&
    bad+=("the host unix socket was connected to")
  [ "$(cat /proc/sys/kernel/hostname)" = "$hostname_before" ] ||
    bad+=("the host's hostname changed")
  n=$((n + 1))
  if [ ${#bad[@]} -eq 0 ]; then
    echo "ok $n - $name: $tried probes tried, $held held; host unchanged"
  else
    echo "not ok $n - $name: $tried probes tried, $held held"
    printf '    %s\n' "${bad[@]}"
    sed 's/^/    /' "$tmp/$name.out" | grep -v "$token" | head -60
    head -c 1000 "$tmp/$name.err" | grep -v "$token" | sed 's/^/    err: /'
    fails=$((fails + 1))
  fi
  total_tried=$((total_tried + tried))
  total_held=$((total_held + held))
  stop_pid "$canary"
}
total_tried=0 total_held=0

run_inside sentry_systrap "$SENTRY" run --platform=systrap --rootfs=@ROOT@ --cwd=/ -- /escape
if sentry_probe "$SENTRY" --platform=kvm; then
  run_inside sentry_kvm "$SENTRY" run --platform=kvm --rootfs=@ROOT@ --cwd=/ -- /escape
else
  echo "SKIP sentry_kvm: $probe_why"
fi
if [ -n "$SANDBOXD" ]; then
  sock=$tmp/sandboxd.sock
  start_bg "$tmp/sandboxd.log" "$SANDBOXD" --sentry="$SENTRY" --socket="$sock" \
    --state-dir="$tmp/state" --pool-size=0 --cgroup-parent="escape-test-$$" \
    --default-rootfs=/ --shutdown-kill
  if wait_for_daemon "$SANDBOXCTL" "$sock"; then
    run_inside sandboxd "$SANDBOXCTL" --socket="$sock" run --rm -i \
      --rootfs=@ROOT@ --cwd=/ -- /escape
  else
    n=$((n + 1))
    echo "not ok $n - sandboxd did not start: $(head -c 300 "$tmp/sandboxd.log")"
    fails=$((fails + 1))
  fi
else
  echo "SKIP sandboxd: SANDBOXD and SANDBOXCTL not given or not built"
fi
echo "escape probes: $total_tried tried, $total_held held"
passed
