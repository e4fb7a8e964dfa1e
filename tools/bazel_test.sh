#!/usr/bin/env bash
# Builds and tests everything with the offline Bazel lane.
#
#   tools/bazel_test.sh [--clean] [--install-deps] [--keep-server] [TARGETS...]
#
#   --clean         delete the Bazel output root first (a from-scratch build)
#   --install-deps  apt-get install the Debian packages the lane needs
#   --keep-server   leave the Bazel server running afterwards (faster re-runs)
#   TARGETS         default //...
#
# Environment: SBX_BAZEL_ROOT (output root, default <repo>/out/bazel),
# SBX_BAZEL_FLAGS (extra flags for build and test).
# Works as root on a fresh machine: nothing is read from or written to ~/.cache,
# nothing is downloaded (see tools/bazel/README.md), nothing prompts.
# Exits non-zero when the build or any test fails.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"

DEBS=(bazel-bootstrap default-jdk-headless g++ pkg-config protobuf-compiler
      protobuf-compiler-grpc libprotobuf-dev libgrpc++-dev libabsl-dev
      libseccomp-dev libgtest-dev libgmock-dev musl-tools prometheus-cpp-dev
      openssl)

clean=0 install=0 keep=0 targets=()
for a in "$@"; do
  case "$a" in
    --clean) clean=1 ;;
    --install-deps) install=1 ;;
    --keep-server) keep=1 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    -*) echo "bazel_test.sh: unknown option $a" >&2; exit 2 ;;
    *) targets+=("$a") ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=(//...)

if [ "$install" = 1 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${DEBS[@]}" </dev/null
fi

missing=()
for tool in bazel java gcc g++ pkg-config protoc grpc_cpp_plugin musl-gcc openssl; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
for mod in absl_status libseccomp gtest gmock protobuf grpc++ prometheus-cpp-pull; do
  pkg-config --exists "$mod" 2>/dev/null || missing+=("pkg-config:$mod")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "bazel_test.sh: missing ${missing[*]}" >&2
  echo "  install with: apt-get install -y ${DEBS[*]}   (or run with --install-deps)" >&2
  exit 1
fi

# The Bazel server runs on Debian's JDK (bazel-bootstrap has no embedded one).
if [ -z "${JAVA_HOME:-}" ]; then
  JAVA_HOME="$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")"
  export JAVA_HOME
fi

ROOT="${SBX_BAZEL_ROOT:-$REPO/out/bazel}"
if [ "$clean" = 1 ]; then
  if [ -d "$ROOT" ]; then
    bazel --output_user_root="$ROOT" shutdown </dev/null >/dev/null 2>&1 || true
    chmod -R u+w "$ROOT" 2>/dev/null || true
    rm -rf "$ROOT"
  fi
fi
mkdir -p "$ROOT"

STARTUP=(--output_user_root="$ROOT" --max_idle_secs=600)
# Bazel would otherwise use ~/.cache/bazel for its repository cache.
FLAGS=(--repository_cache="$ROOT/repository_cache" --keep_going --color=no --curses=no
       --show_progress_rate_limit=10)
# shellcheck disable=SC2206
FLAGS+=(${SBX_BAZEL_FLAGS:-})

bz() { bazel "${STARTUP[@]}" "$@" </dev/null; }
if [ "$keep" = 0 ]; then
  trap 'bazel "${STARTUP[@]}" shutdown </dev/null >/dev/null 2>&1 || true' EXIT
fi

LOG="$ROOT/bazel_test.log"
: >"$LOG"
echo "== bazel-bootstrap $(dpkg-query -W -f "\${Version}" bazel-bootstrap 2>/dev/null || echo "?"), output root $ROOT, JAVA_HOME=$JAVA_HOME"
echo "== bazel build ${targets[*]}"
set +e
bz build "${FLAGS[@]}" -- "${targets[@]}" 2>&1 | tee -a "$LOG"
rc=${PIPESTATUS[0]}
if [ "$rc" = 0 ]; then
  echo "== bazel test ${targets[*]}"
  # --flaky_test_attempts=2: see test.sh (one intermittent failure under
  # investigation); a test failing twice still fails.
  bz test "${FLAGS[@]}" --flaky_test_attempts=2 -- "${targets[@]}" 2>&1 | tee -a "$LOG"
  rc=${PIPESTATUS[0]}
fi
set -e

# No download may ever be attempted (repositories are local or pkg-config;
# .bazelrc also sets --experimental_repository_disable_download).
if grep -q 'Download from\|download_and_extract\|Error downloading' "$LOG"; then
  echo "bazel_test.sh: Bazel attempted a download; the lane must stay offline" >&2
  [ "$rc" != 0 ] || rc=1
fi

case $rc in
  0) echo "== bazel_test.sh: OK (build and tests passed)" ;;
  4) echo "== bazel_test.sh: FAILED: no test targets found in ${targets[*]}" >&2 ;;
  *) echo "== bazel_test.sh: FAILED (bazel exit code $rc; log in $LOG)" >&2 ;;
esac
exit $rc
