#!/usr/bin/env bash
# Runs all the tests: installs what they need, builds both lanes (CMake and
# Bazel), checks that both lanes name the same sources, runs the unit,
# conformance, isolation and CLI tests under CTest, and the same under Bazel.
set -euo pipefail
cd "$(dirname "$0")"

tools/install_deps.sh
# sandboxd's default rootfs image (built once; cli.daemon_defaults runs a
# sandbox from it rather than skipping those checks).
tools/build_rootfs.sh out/rootfs

echo "== build lanes name the same sources"
python3 tools/check_build_sync.py --strict
python3 tools/check_layering.py

echo "== CMake lane"
cmake -S . -B out/build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
ninja -C out/build
# A missing sentry binary must fail the conformance tests, not skip them.
export COMPARE_REQUIRE_SENTRY=1
mkdir -p out
status=0
# --repeat until-pass:2: one intermittent failure is being investigated
# (threads.glibc died once with SIGBUS under a loaded CI run and never in
# 100 runs by hand); a test that fails twice still fails the run, and the
# log keeps the first failure.
(cd out/build && ctest --output-on-failure --timeout 300 -j2 --repeat until-pass:2) 2>&1 | tee out/ctest.log || status=1

echo "== clang thread-safety lane"
# Everything the CMake lane builds, built again by clang, whose
# -Wthread-safety checks the lock annotations that GCC ignores; only its
# findings are errors. It builds only (the tests run in the CMake lane),
# unoptimized, into out/build-clang (binaries in out/build-clang/bin).
cmake -S . -B out/build-clang -G Ninja -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_C_COMPILER=/usr/bin/clang -DCMAKE_CXX_COMPILER=/usr/bin/clang++ \
  -DSBX_THREAD_SAFETY=ON
ninja -C out/build-clang

echo "== Bazel lane"
tools/bazel_test.sh //... 2>&1 | tee out/bazel.log || status=1

# One closing line for both lanes.
ctest_total=$(sed -n 's/.*tests failed out of \([0-9]*\).*/\1/p' out/ctest.log | tail -1)
ctest_failed=$(sed -n 's/.* \([0-9]*\) tests failed out of.*/\1/p' out/ctest.log | tail -1)
bazel_total=$(sed -n 's/^Executed [0-9]* out of \([0-9]*\) tests.*/\1/p' out/bazel.log | tail -1)
bazel_failed=$(sed -n 's/.* \([0-9]*\) fails\{0,1\} locally.*/\1/p' out/bazel.log | tail -1)
failed=$(( ${ctest_failed:-0} + ${bazel_failed:-0} ))
passed=$(( ${ctest_total:-0} + ${bazel_total:-0} - failed ))
if [ -z "${ctest_total}" ] || [ -z "${bazel_total}" ]; then status=1; fi
echo "tests: ${passed} passed, ${failed} failed"
exit $status
