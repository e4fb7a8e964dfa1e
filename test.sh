#!/usr/bin/env bash
# Runs all the tests: installs what they need, builds both lanes (CMake and
# Bazel), checks that both lanes name the same sources, runs the unit,
# conformance, isolation and CLI tests under CTest, and the Bazel tests.
set -euo pipefail
cd "$(dirname "$0")"

tools/install_deps.sh

echo "== build lanes name the same sources"
python3 tools/check_build_sync.py

echo "== CMake lane"
cmake -S . -B out/build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
ninja -C out/build
# A missing sentry binary must fail the conformance tests, not skip them.
export COMPARE_REQUIRE_SENTRY=1
(cd out/build && ctest --output-on-failure --timeout 300 -j2)

echo "== Bazel lane"
tools/bazel_test.sh //...
