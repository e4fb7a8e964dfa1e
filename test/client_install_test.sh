#!/usr/bin/env bash
# client_install_test.sh BUILD_DIR SANDBOXD SANDBOXCTL SENTRY
#
# The clients as a user installs them (client/README.md, "Installing the
# clients"): `cmake --install BUILD_DIR --component client` into a fresh
# prefix; the C++ example built from the installed copy with one command
# (pkg-config) and run against a real sandboxd; the installed Python
# package (test/python_client_test.py) driving the same daemon.
# Exits 77 (CTest: skipped) until the binaries exist.
set -u
# shellcheck source=test/lib.sh
. "$(dirname "$0")/lib.sh"
usage_unless [ $# -eq 4 ] -- "BUILD_DIR SANDBOXD SANDBOXCTL SENTRY"
BUILD=$(readlink -f "$1")
shift
require_built "$@"
SANDBOXD=$(readlink -f "$1")
SANDBOXCTL=$(readlink -f "$2")
SENTRY=$(readlink -f "$3")
HERE=$(cd "$(dirname "$0")" && pwd)
PY=/usr/bin/python3   # Debian's, with python3-grpcio (not a pyenv shim's)
make_tmp client_install_test "${KEEP:-0}"
CHECK_OUT_BYTES=600
P=$tmp/prefix

capture 120 cmake --install "$BUILD" --prefix "$P" --component client
check "cmake --install --component client" eq "$status" 0
for f in lib/libsandboxd-client.a lib/pkgconfig/sandboxd-client.pc \
  include/sandboxd/client/client.h include/sandboxd/proto/sandbox.pb.h \
  include/sandboxd/proto/sandbox.grpc.pb.h share/doc/sandboxd-client/examples/hello.cc \
  lib/python3/dist-packages/sandboxd_client/__init__.py \
  lib/python3/dist-packages/sandboxd_client/sandbox_pb2_grpc.py; do
  check "installed: $f" test -s "$P/$f"
done
check "only the client's files are installed" eq "$(find "$P" -type f | wc -l)" 10

# One command, as the example's comment and the README say.
cd "$tmp" || exit 1
export PKG_CONFIG_PATH=$P/lib/pkgconfig
capture 300 sh -c "c++ -std=c++17 -o hello $P/share/doc/sandboxd-client/examples/hello.cc \$(pkg-config --cflags --libs sandboxd-client)"
check "the example builds from the install with pkg-config" eq "$status" 0

SOCK=$tmp/sandboxd.sock
"$SANDBOXD" --sentry="$SENTRY" --socket="$SOCK" --state-dir="$tmp/state" --pool-size=1 \
  --cgroup-parent="client-install-test-$$" --default-rootfs=/ --shutdown-kill 2>"$tmp/daemon.log" &
daemon_pid=$!
on_exit "stop_pid $daemon_pid"
check "sandboxd answers" wait_for_daemon "$SANDBOXCTL" "$SOCK"

capture 30 "$SANDBOXCTL" --socket="$SOCK" version
check "sandboxctl version: client and daemon" \
  eq "$(sed 's/ (.*//' "$tmp/out")" "$(printf 'client: sandboxctl %s\ndaemon: sandboxd %s' \
    "$("$SANDBOXCTL" --version | cut -d' ' -f2)" "$("$SANDBOXD" --version | cut -d' ' -f2)")"
check "sentry --version" eq "$("$SENTRY" --version | cut -d' ' -f1)" sentry
check "one version for all" eq "$("$SENTRY" --version | cut -d' ' -f2)" "$("$SANDBOXD" --version | cut -d' ' -f2)"
check "the pkg-config file's version is it too" \
  eq "$(pkg-config --modversion sandboxd-client)" "$("$SANDBOXD" --version | cut -d' ' -f2)"

SANDBOXD_SOCKET=$SOCK capture 60 ./hello
check "hello: exit 0" eq "$status" 0
check "hello: the sandbox's output" eq "$(cat "$tmp/out")" "hello from hello-box"
SANDBOXD_SOCKET=$tmp/nothing.sock capture 60 ./hello
check "hello without a daemon: 125 and one line" eq "$status:$(wc -l <"$tmp/err")" "125:1"

if "$PY" -c 'import grpc, google.protobuf' 2>/dev/null; then
  capture 300 env PYTHONPATH="$P/lib/python3/dist-packages" "$PY" \
    "$HERE/python_client_test.py" "$SOCK"
  check "python_client_test.py against the installed package" eq "$status" 0
  grep -E "^(test_|Ran |OK|FAILED)" "$tmp/err" | sed 's/^/  /'
else
  echo "python3-grpcio or python3-protobuf missing (tools/install_deps.sh installs them)"
  check "python3-grpcio and python3-protobuf are installed" false
fi
check "sandboxd still runs" kill -0 "$daemon_pid"
passed
