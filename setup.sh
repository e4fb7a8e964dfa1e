#!/usr/bin/env bash
# The first command on a fresh machine: installs the Debian packages,
# builds everything (binaries in out/bin), and runs a demo program inside
# the Sentry.
set -euo pipefail
cd "$(dirname "$0")"

tools/install_deps.sh
cmake -S . -B out/build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
ninja -C out/build

echo
echo "== demo: a static program, run by the Sentry on the systrap platform"
echo "\$ out/bin/sentry run --env=GREETING=hello -- out/build/test/bin/hello.glibc"
out/bin/sentry run --env=GREETING=hello -- "$PWD/out/build/test/bin/hello.glibc"
echo "\$ out/bin/sentry run -- out/build/test/bin/threads.glibc | tail -3"
out/bin/sentry run -- "$PWD/out/build/test/bin/threads.glibc" | tail -3
