#!/usr/bin/env bash
# Installs everything the build and the tests need, from Debian 12 packages
# only. Idempotent; skips apt when every package is already installed.
set -euo pipefail

DEBS=(
  g++ cmake ninja-build pkg-config git python3
  clang   # the thread-safety lane (-Wthread-safety)
  libabsl-dev libseccomp-dev libgtest-dev libgmock-dev
  protobuf-compiler protobuf-compiler-grpc libprotobuf-dev libgrpc++-dev
  prometheus-cpp-dev openssl   # the daemon's /metrics; test certificates
  libssl-dev   # the daemon's TLS on its TCP port (daemon/tls_relay.cc)
  musl-tools
  bazel-bootstrap default-jdk-headless
  runsc util-linux iproute2   # setpriv, ss: the daemon's connection test
  python3-grpcio python3-protobuf   # the Python client (client/python) and its test
  busybox-static make procps sqlite3   # programs the acceptance tests run in the sandbox
  libpython3.11-testsuite   # CPython's regression tests (test/python_stdlib_test.sh)
  mmdebstrap   # tools/build_rootfs.sh: sandboxd's default rootfs image
  runc containerd podman   # test/oci_*_test.sh: sandboxd-oci against runc, under containerd and podman
  passt   # pasta: the sandbox network mode (sentry/socket/sandbox_net.h)
  iputils-ping   # ping over the sandbox's ping sockets (test/network_test.sh)
  iperf3   # bulk TCP both ways behind -p (bench/servers.sh)
  nginx-light redis-server redis-tools curl wrk   # servers behind -p (test/servers_test.sh, bench/servers.sh)
)

missing=()
for p in "${DEBS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
    || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install_deps: all ${#DEBS[@]} packages present"
  exit 0
fi
echo "install_deps: installing ${missing[*]}"
if [ "$(id -u)" != 0 ]; then SUDO=sudo; else SUDO=; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q </dev/null
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null
