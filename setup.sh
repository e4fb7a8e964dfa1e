#!/usr/bin/env bash
# The first command on a fresh machine: installs the Debian packages,
# builds everything (binaries in out/bin) and sandboxd's default rootfs
# image (out/rootfs, a minimal Debian root; built once, ~1 minute), and
# runs a demo program inside the Sentry.
set -euo pipefail
cd "$(dirname "$0")"

tools/install_deps.sh
cmake -S . -B out/build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
ninja -C out/build
tools/build_rootfs.sh out/rootfs

echo
echo "== demo: a static program, run by the Sentry on the systrap platform"
echo "\$ out/bin/sentry run --env=GREETING=hello -- out/build/test/bin/hello.glibc"
out/bin/sentry run --env=GREETING=hello -- "$PWD/out/build/test/bin/hello.glibc"
echo "\$ out/bin/sentry run -- out/build/test/bin/threads.glibc | tail -3"
out/bin/sentry run -- "$PWD/out/build/test/bin/threads.glibc" | tail -3

echo
echo "== demo: sandboxd with a warm pool, and a program run through sandboxctl"
demo=$(mktemp -d)
echo "\$ out/bin/sandboxd --socket=$demo/sandboxd.sock --state-dir=$demo/state --pool-size=1 &"
out/bin/sandboxd --socket="$demo/sandboxd.sock" --state-dir="$demo/state" --pool-size=1 \
  --cgroup-parent=sandboxd-setup-demo 2>"$demo/sandboxd.log" &
daemon=$!
for _ in $(seq 1 100); do
  out/bin/sandboxctl --socket="$demo/sandboxd.sock" ps >/dev/null 2>&1 && break
  sleep 0.1
done
echo "\$ out/bin/sandboxctl --socket=$demo/sandboxd.sock run --rm -- /bin/sh -c 'echo hello from \$(hostname) on Debian \$(cat /etc/debian_version)'"
out/bin/sandboxctl --socket="$demo/sandboxd.sock" run --rm -- \
  /bin/sh -c 'echo hello from $(hostname) on Debian $(cat /etc/debian_version)'
kill "$daemon"
wait "$daemon" 2>/dev/null || true
rm -rf "$demo"
