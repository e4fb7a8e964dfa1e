#!/usr/bin/env bash
# daemon_defaults_test.sh SANDBOXD SANDBOXCTL SENTRY
#
# What a request gets when it names nothing, and what it may not ask for:
#   - no --rootfs: the daemon's --default-rootfs (never the host's /, whose
#     /etc/shadow stays unread); inspect shows it
#   - --allowed-roots: / and other host directories refused (PERMISSION
#     DENIED naming the flag), the listed ones and the default allowed
#   - a missing default image: a clear error naming tools/build_rootfs.sh
#   - the image tools/build_rootfs.sh builds (out/rootfs), when it is built
#   - --default-memory/--default-cpus/--default-pids fill what a spec
#     leaves at 0, and only that
#   - --memory=4k, --cpus=100000, a huge --pids, 10 000 labels, huge label
#     keys and values: INVALID_ARGUMENT naming the field and the range
# Exits 77 (CTest: skipped) until the binaries exist.
set -u
# shellcheck source=test/lib.sh
. "$(dirname "$0")/lib.sh"
usage_unless [ $# -eq 3 ] -- "SANDBOXD SANDBOXCTL SENTRY"
require_built "$@"
SANDBOXD=$(readlink -f "$1")
SANDBOXCTL=$(readlink -f "$2")
SENTRY=$(readlink -f "$3")
[ "$(id -u)" = 0 ] || skip "needs root (cgroups for the limits)"
[ -x /bin/busybox ] || skip "needs busybox-static for the test image"
make_tmp daemon_defaults_test
CHECK_OUT_BYTES=400
IN=/dev/null

SOCK=$tmp/sandboxd.sock
ctl() { capture 60 "$SANDBOXCTL" --socket="$SOCK" "$@"; }

# A tiny image: busybox and a marker; "allowed" is a copy of it.
mkdir -p "$tmp/image/bin" "$tmp/image/etc" "$tmp/other"
cp /bin/busybox "$tmp/image/bin/busybox"
for c in sh cat ls echo true; do ln -s busybox "$tmp/image/bin/$c"; done
echo "the test image" >"$tmp/image/marker"
cp -a "$tmp/image" "$tmp/allowed"
echo "the allowed copy" >"$tmp/allowed/marker"

# start NAME FLAGS...: a daemon on $SOCK (the previous one stopped).
daemon_pid=
start() {
  local name=$1
  shift
  stop_pid "$daemon_pid"
  rm -f "$SOCK"
  start_bg "$tmp/$name.log" "$SANDBOXD" --sentry="$SENTRY" --socket="$SOCK" \
    --state-dir="$tmp/state" --pool-size=0 --cgroup-parent="defaults-test-$$" \
    --shutdown-kill "$@"
  daemon_pid=$bg_pid
  if ! wait_for_daemon "$SANDBOXCTL" "$SOCK"; then
    echo "not ok - sandboxd ($name) did not start:"
    cat "$tmp/$name.log"
    exit 1
  fi
}

start image --default-rootfs="$tmp/image" --allowed-roots="$tmp/allowed" \
  --default-memory=64m --default-cpus=0.5 --default-pids=100

ctl run --rm -- /bin/cat /marker
check "no --rootfs: the daemon's default image" contains "$tmp/out" "the test image"
ctl run --rm -- /bin/cat /etc/shadow
check "no --rootfs: the host's /etc/shadow is not there" eq "$status" 1
check "no --rootfs: nothing of the host's /etc/shadow" eq "$(lines "$tmp/out")" 0
ctl run --rm -- /bin/ls /work /usr /home
check "no --rootfs: no host directories" not_contains "$tmp/out" "bin"

ctl run --rm --rootfs=/ -- /bin/true
check "--allowed-roots: / refused (125)" eq "$status" 125
check "--allowed-roots: the error names the flag" contains "$tmp/err" "--allowed-roots"
ctl run --rm --rootfs="$tmp/other" -- /bin/true
check "--allowed-roots: another host directory refused" eq "$status" 125
ln -s "$tmp/other" "$tmp/allowed/escape"
ctl run --rm --rootfs="$tmp/allowed/escape" -- /bin/true
check "--allowed-roots: a symlink out of an allowed root refused" eq "$status" 125
ctl run --rm --rootfs="$tmp/allowed" -- /bin/cat /marker
check "--allowed-roots: an allowed root" contains "$tmp/out" "the allowed copy"
ctl run --rm --rootfs="$tmp/image" -- /bin/cat /marker
check "--allowed-roots: the default image named explicitly" contains "$tmp/out" "the test image"

ctl create --name=plain -- /bin/true
ctl inspect plain
check "inspect: the default rootfs" contains "$tmp/out" "\"rootfs\": \"$tmp/image\""
if grep -q "no cgroups" "$tmp/image.log"; then
  echo "# SKIP default limit checks: $(grep "no cgroups" "$tmp/image.log" | head -1)"
else
  check "default memory" contains "$tmp/out" '"memory_bytes": "67108864"'
  check "default cpus" contains "$tmp/out" '"cpu_millis": "500"'
  check "default pids" contains "$tmp/out" '"pids": "100"'
  ctl create --name=own --memory=128m --pids=7 -- /bin/true
  ctl inspect own
  check "the spec's memory stays" contains "$tmp/out" '"memory_bytes": "134217728"'
  check "the spec's pids stay" contains "$tmp/out" '"pids": "7"'
  check "the default cpus fill the rest" contains "$tmp/out" '"cpu_millis": "500"'
  ctl rm -f own
  ctl run --rm --memory=100m -- /bin/sh -c 'echo fits'
  check "a sandbox runs under a spec's limit" contains "$tmp/out" "fits"
fi
ctl rm -f plain

# Absurd limits: INVALID_ARGUMENT naming the field and the range.
ctl run --rm --memory=4k -- /bin/true
check "--memory=4k: refused (125)" eq "$status" 125
check "--memory=4k: names the field" contains "$tmp/err" "spec.limits.memory_bytes"
check "--memory=4k: says the range" contains "$tmp/err" "from 16 MiB to"
check "--memory=4k: no cgroup path" not_contains "$tmp/err" "/sys/fs/cgroup"
ctl run --rm --memory=100000g -- /bin/true
check "--memory=100000g: says the host's maximum" contains "$tmp/err" "(memory + swap)"
ctl run --rm --cpus=100000 -- /bin/true
check "--cpus=100000: names the field" contains "$tmp/err" "spec.limits.cpu_millis"
check "--cpus=100000: says the online CPUs" contains "$tmp/err" "$(nproc) online CPUs"
ctl run --rm --cpus=0.001 -- /bin/true
check "--cpus=0.001: says the kernel's minimum" contains "$tmp/err" "from 10"
ctl run --rm --pids=99999999999 -- /bin/true
check "--pids=99999999999: names the field and pid_max" contains "$tmp/err" "spec.limits.pids"
labels=()
for i in $(seq 1 10000); do labels+=("--label=k$i=v"); done
ctl run --rm "${labels[@]}" -- /bin/true
check "10 000 labels: refused" eq "$status" 125
check "10 000 labels: says the most" contains "$tmp/err" "spec.labels: at most 64 labels, got 10000"
ctl run --rm --label="$(head -c 5000 /dev/zero | tr '\0' k)=v" -- /bin/true
check "a 5000-byte label key: refused naming spec.labels" contains "$tmp/err" "spec.labels: a key must be 1 to 128 bytes"
ctl run --rm --label="k=$(head -c 100000 /dev/zero | tr '\0' v)" -- /bin/true
check "a 100 000-byte label value: refused" contains "$tmp/err" "at most 1024 bytes"
ctl ps -aq
check "nothing left" eq "$(lines "$tmp/out")" 0

# Bad daemon-wide defaults: a usage error at start.
capture 20 "$SANDBOXD" --socket="$tmp/bad.sock" --state-dir="$tmp/bad" --default-memory=4k
check "sandboxd --default-memory=4k: exit 2" eq "$status" 2
check "sandboxd --default-memory=4k: says the range" contains "$tmp/err" "from 16 MiB"

# A default image that is missing: a clear error, never the host's /.
start missing --default-rootfs="$tmp/missing"
ctl run --rm -- /bin/true
check "missing default image: refused (125)" eq "$status" 125
check "missing default image: says how to build it" contains "$tmp/err" "build_rootfs.sh"
ctl run --rm --rootfs=/ -- /bin/true
check "missing default image: a named root still works" eq "$status" 0

# The image tools/build_rootfs.sh builds beside the binaries (out/rootfs).
image=$(dirname "$(dirname "$SANDBOXD")")/rootfs
if [ -e "$image/.sandboxd-rootfs" ]; then
  start built
  ctl run --rm -- /bin/sh -c 'cat /etc/debian_version; head -1 /etc/shadow'
  check "out/rootfs: a Debian root" contains "$tmp/out" "12."
  check "out/rootfs: its own shadow, no host hash" contains "$tmp/out" "root:*:"
  ctl run --rm --rootfs=/ -- /bin/sh -c 'test -d /work || test -d /usr'
  check "out/rootfs daemon: --rootfs=/ still gets the host's /" eq "$status" 0
else
  echo "# SKIP out/rootfs checks: $image is not built (tools/build_rootfs.sh)"
fi

passed
