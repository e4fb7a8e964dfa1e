#!/usr/bin/env bash
# oci_containerd_test.sh SANDBOXD_OCI [SENTRY [SANDBOXD SANDBOXCTL]]
#
# With SANDBOXD it starts one too, and containerd (so the shim, so
# sandboxd-oci) gets SANDBOXD_OCI_SOCKET: the sandboxes come from its pool.
#
# sandboxd-oci under a real containerd (Debian's 1.6) and its
# io.containerd.runc.v2 shim. The suite starts its own containerd (root,
# state and socket in a temporary directory) with the runtime handler of
# deploy/containerd/sandboxd-runtime.toml imported (BinaryName pointed at
# SANDBOXD_OCI, Root into the temporary directory) and checks that
# containerd parsed it; every `ctr` run below uses that BinaryName and
# Root. An OCI image is built offline from a busybox root
# (test/oci/make_image.py) and imported with `ctr image import`. Then:
#   - ctr run --rm: output and exit status (the same as with runc, where
#     it is installed)
#   - a detached task: RUNNING in ctr task ls, ctr task exec (output and
#     status), ctr task metrics (the container's cgroup: not with
#     sandboxd), ctr task ps, ctr task pause/resume,
#     ctr task kill (the init's trap runs; STOPPED;
#     the exit code containerd reports)
#   - ctr container checkpoint --task and restore --live (with sandboxd
#     too): a counter runs on from where it was saved
#   - ctr run --with-ns network:PATH: a namespace the test made (`ip netns
#     add`), whose loopback server the container reaches
#   - nothing left: no container state under the Root, no init proxy
# Needs root. Exits 77 (CTest: skipped) until the binaries exist or where
# containerd is not installed.
set -u
# shellcheck source=test/lib.sh
. "$(dirname "$0")/lib.sh"
usage_unless [ $# -eq 1 -o $# -eq 2 -o $# -eq 4 ] -- "SANDBOXD_OCI [SENTRY [SANDBOXD SANDBOXCTL]]"
require_built "$@"
OCI=$(readlink -f "$1")
if [ $# -ge 2 ]; then
  export SANDBOXD_OCI_SENTRY=$(readlink -f "$2")
fi
DAEMON=
[ $# -ge 4 ] && DAEMON=$(readlink -f "$3") && SANDBOXCTL=$(readlink -f "$4")
[ "$(id -u)" = 0 ] || skip "needs root"
for b in containerd ctr containerd-shim-runc-v2 busybox; do
  command -v "$b" >/dev/null || skip "$b not installed (tools/install_deps.sh)"
done
HERE=$(cd "$(dirname "$0")" && pwd)
SNIPPET=$HERE/../deploy/containerd/sandboxd-runtime.toml
RUNC=$(command -v runc || true)
make_tmp oci_containerd_test "${KEEP:-0}"
CHECK_OUT_BYTES=600
status=0

"$HERE/oci/make_rootfs.sh" "$tmp/rootfs"
IMAGE=sandboxd.test/busybox:latest
python3 "$HERE/oci/make_image.py" "$tmp/rootfs" "$tmp/image.tar" "$IMAGE"

# The deploy snippet, with this build's binary and a private Root.
sed -e "s|BinaryName = \".*\"|BinaryName = \"$OCI\"|" \
    -e "s|Root = \".*\"|Root = \"$tmp/runtime-root\"|" "$SNIPPET" >"$tmp/sandboxd-runtime.toml"
cat >"$tmp/config.toml" <<EOT
version = 2
root = "$tmp/root"
state = "$tmp/state"
imports = ["$tmp/sandboxd-runtime.toml"]
disabled_plugins = ["io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp"]
[plugins."io.containerd.grpc.v1.cri"]
  # No CNI here: the CRI plugin only reads the handler; ctr drives the shim.
  disable_cgroup = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
[grpc]
  address = "$tmp/containerd.sock"
[ttrpc]
  address = "$tmp/containerd.sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
EOT
containerd --config "$tmp/config.toml" config dump >"$tmp/dump" 2>&1
check "the deploy snippet: containerd reads the handler's BinaryName" \
  grep -q "BinaryName = \"$OCI\"" "$tmp/dump"
check "the deploy snippet: as a runc.v2 runtime named sandboxd" eval \
  'grep -A12 "runtimes.sandboxd\]" "$tmp/dump" | grep -q "runtime_type = \"io.containerd.runc.v2\""'
BIN=$(sed -n 's/^ *BinaryName = "\(.*\)"/\1/p' "$tmp/dump" | head -1)
ROOT=$(sed -n 's/^ *Root = "\(.*\)"/\1/p' "$tmp/dump" | head -1)

if [ -n "$DAEMON" ]; then
  start_bg "$tmp/sandboxd.log" "$DAEMON" --sentry="$SANDBOXD_OCI_SENTRY" \
    --socket="$tmp/sandboxd.sock" --state-dir="$tmp/sandboxd-state" --pool-size=1 \
    --cgroup-parent="oci-containerd-test-$$" --default-rootfs=/ --shutdown-kill
  check "sandboxd listens" wait_for_daemon "$SANDBOXCTL" "$tmp/sandboxd.sock"
  export SANDBOXD_OCI_SOCKET=$tmp/sandboxd.sock
fi
start_bg "$tmp/containerd.log" containerd --config "$tmp/config.toml"
CTRD=$bg_pid
CTR=(ctr -a "$tmp/containerd.sock")
for _ in $(seq 1 100); do
  "${CTR[@]}" version >/dev/null 2>&1 && break
  sleep 0.1
done
check "containerd answers" eval '"${CTR[@]}" version >/dev/null'
capture 60 "${CTR[@]}" image import --snapshotter native "$tmp/image.tar"
check "ctr image import of the offline image" eval '[ "$status" = 0 ] && "${CTR[@]}" image ls -q | grep -qx "$IMAGE"'
RUN=(run --snapshotter native --runtime io.containerd.runc.v2)

# until_task ID STATUS: waits up to 10 s until `ctr task ls` says it.
until_task() {
  for _ in $(seq 1 100); do
    "${CTR[@]}" task ls 2>/dev/null | grep -Eq "^$1 +[0-9]+ +$2" && return 0
    sleep 0.1
  done
  return 1
}

# remove_task ID: SIGKILL, STOPPED, then the task and the container deleted.
remove_task() {
  "${CTR[@]}" task kill -s KILL "$1" >/dev/null 2>&1
  until_task "$1" STOPPED
  "${CTR[@]}" task delete "$1" >/dev/null 2>&1
  "${CTR[@]}" container rm "$1" >/dev/null 2>&1
}

capture 60 "${CTR[@]}" "${RUN[@]}" --rm --runc-binary="$BIN" --runc-root="$ROOT" "$IMAGE" c1 \
  sh -c 'echo hello from sandboxd; hostname; echo oops >&2; exit 5'
cp "$tmp/out" "$tmp/c1.out"
check "ctr run --rm: exit status 5" eq "$status" 5
check "ctr run --rm: stdout" contains "$tmp/out" '^hello from sandboxd$'
check "ctr run --rm: stderr" contains "$tmp/err" '^oops$'
if [ -n "$RUNC" ]; then
  capture 60 "${CTR[@]}" "${RUN[@]}" --rm --runc-binary="$RUNC" --runc-root="$tmp/runc-root" \
    "$IMAGE" c1 sh -c 'echo hello from sandboxd; hostname; echo oops >&2; exit 5'
  check "ctr run --rm: the same as with runc" eval \
    '[ "$status" = 5 ] && diff "$tmp/out" "$tmp/c1.out"'
fi

capture 60 "${CTR[@]}" "${RUN[@]}" -d --runc-binary="$BIN" --runc-root="$ROOT" "$IMAGE" c2 \
  sh -c 'trap "echo term >/tmp/term; exit 9" TERM; while :; do sleep 0.1; done'
check "ctr run -d: exit 0" eq "$status" 0
capture 10 "${CTR[@]}" task ls
check "ctr task ls: c2 RUNNING" grep -Eq '^c2 +[0-9]+ +RUNNING' "$tmp/out"
if [ -n "$DAEMON" ]; then
  capture 10 "$SANDBOXCTL" --socket="$tmp/sandboxd.sock" ps -q
  check "sandboxd runs c2's sandbox" grep -qx c2 "$tmp/out"
fi
capture 30 "${CTR[@]}" task exec --exec-id e1 c2 sh -c 'echo exec-out; id -u; exit 3'
check "ctr task exec: exit status 3" eq "$status" 3
check "ctr task exec: output" eval 'contains "$tmp/out" "^exec-out$" && contains "$tmp/out" "^0$"'
capture 30 "${CTR[@]}" task exec --exec-id e2 c2 cat /tmp/none-yet
check "ctr task exec: a failing command's status (1)" eq "$status" 1
c2cg=
capture 10 "${CTR[@]}" task metrics --format json c2
cp "$tmp/out" "$tmp/metrics.out"
if [ -z "$DAEMON" ]; then
  # The shim reads the cgroups of the init proxy's pid: the container's
  # own (linux.cgroupsPath), where the Sentry and its stubs run.
  c2cg=$(python3 -c 'import json,sys; print(next(c for c in json.load(open(sys.argv[1]))["cgroups"] if "/cpuacct/" in c))' \
    "$(find "$ROOT" -path '*/c2/state.json' | head -1)" 2>/dev/null)
  check "ctr task metrics: the container's own cgroup (CPU, memory, pids of its Sentry)" python3 -c '
import json, sys
m = json.load(open(sys.argv[1]))
after = int(open(sys.argv[2] + "/cpuacct.usage").read())
total = m["cpu"]["usage"]["total"]
assert 0 < total <= after, (total, after)
assert m["memory"]["usage"]["usage"] > 0, m["memory"]
assert m["pids"]["current"] >= 2, m["pids"]
' "$tmp/metrics.out" "${c2cg:-/nonexistent}"
fi
capture 10 "${CTR[@]}" task ps c2
check "ctr task ps: the init proxy's pid" eval \
  'grep -q "^$(sed -n "s/^c2 *\([0-9]*\).*/\1/p" <("${CTR[@]}" task ls)) " "$tmp/out"'
capture 10 "${CTR[@]}" task pause c2
check "ctr task pause" eval '[ "$status" = 0 ] && "${CTR[@]}" task ls | grep -Eq "^c2 +[0-9]+ +PAUSED"'
capture 10 "${CTR[@]}" task resume c2
check "ctr task resume" eval '[ "$status" = 0 ] && "${CTR[@]}" task ls | grep -Eq "^c2 +[0-9]+ +RUNNING"'
capture 10 "${CTR[@]}" task kill c2
check "ctr task kill: exit 0" eq "$status" 0
until_task c2 STOPPED
capture 10 "${CTR[@]}" task ls
check "ctr task ls: c2 STOPPED after kill" grep -Eq '^c2 +[0-9]+ +STOPPED' "$tmp/out"
capture 30 "${CTR[@]}" task delete c2
check "ctr task delete: containerd saw the trap's exit code 9" contains "$tmp/err" 'exit code 9'
"${CTR[@]}" container rm c2 >/dev/null 2>&1

# Checkpoint and restore through containerd (it pauses, checkpoints and
# resumes; restore is runc's `restore ... -no-subreaper`): a counter in
# the sandbox's own /tmp runs on from where it was saved.
capture 60 "${CTR[@]}" "${RUN[@]}" -d --runc-binary="$BIN" --runc-root="$ROOT" "$IMAGE" k1 \
  sh -c 'echo start >> /tmp/log; i=0; while :; do i=$((i+1)); echo $i > /tmp/n; sleep 0.05; done'
sleep 1
capture 60 "${CTR[@]}" container checkpoint --task --image k1 sandboxd.test/checkpoint:k1
check "ctr container checkpoint --task" eq "$status" 0
capture 30 "${CTR[@]}" task exec --exec-id n1 k1 cat /tmp/n
at=$(cat "$tmp/out")
check "the checkpointed container runs on (paused, checkpointed, resumed)" eval \
  '"${CTR[@]}" task ls | grep -Eq "^k1 +[0-9]+ +RUNNING"'
remove_task k1
capture 60 "${CTR[@]}" container restore --live k1 sandboxd.test/checkpoint:k1
check "ctr container restore --live" eval \
  '[ "$status" = 0 ] && "${CTR[@]}" task ls | grep -Eq "^k1 +[0-9]+ +RUNNING"'
sleep 2
capture 30 "${CTR[@]}" task exec --exec-id n2 k1 sh -c 'cat /tmp/n; grep -c start /tmp/log'
check "restored: the counter ran on from the checkpoint, and did not start again" eval \
  '[ "$(head -1 "$tmp/out")" -gt "${at:-0}" ] && [ "$(sed -n 2p "$tmp/out")" = 1 ]'
remove_task k1

# A network namespace by path (ctr's --with-ns, as CNI gives a pod's): the
# container's sockets are that namespace's (with sandboxd: the daemon's
# Sentry started in it).
. "$HERE/oci/netns.sh"
NSNAME=sbxctrd-$$
NSPORT=$((20000 + ($$ + 7) % 20000))
netns_up "$NSNAME" "$NSPORT"
capture 60 "${CTR[@]}" "${RUN[@]}" --rm --with-ns "network:$NETNS_PATH" --runc-binary="$BIN" \
  --runc-root="$ROOT" "$IMAGE" n1 nc -w 5 127.0.0.1 "$NSPORT"
check "ctr run --with-ns network:PATH: the namespace's server answers" eval \
  '[ "$status" = 0 ] && contains "$tmp/out" "^from-netns $NSNAME\$"'

check "no container state left under the runtime's Root" \
  eval '[ -z "$(find "$ROOT" -mindepth 2 -maxdepth 2 2>/dev/null)" ]'
check "no container cgroup left" eval '[ -z "$c2cg" ] || [ ! -e "$c2cg" ]'
check "no init proxy left" eval '! pgrep -f "init-proxy --bundle=$tmp" >/dev/null'
if [ -n "$DAEMON" ]; then
  capture 10 "$SANDBOXCTL" --socket="$tmp/sandboxd.sock" ps -a -q
  check "sandboxd: no sandbox left" eval '[ "$status" = 0 ] && [ ! -s "$tmp/out" ]'
fi
stop_pid "$CTRD"
passed
