#!/usr/bin/env bash
# bench/oci.sh — a whole container through containerd: `ctr run --rm IMAGE
# ID true` (containerd 1.6, its io.containerd.runc.v2 shim, a busybox image
# built offline, the native snapshotter) with the runtime binary set to
# runc, to sandboxd-oci (a Sentry of its own per container: the serve and
# run backends), to sandboxd-oci taking its sandbox from a sandboxd's warm
# pool (SANDBOXD_OCI_SOCKET), and to runsc (Debian's, ptrace platform, as
# a runc-compatible binary of the same shim), in one run. Also `ctr task
# exec` of `true` into a running container, per runtime; and `podman run
# --rm --rootfs DIR true` (podman 4.3 through conmon, cgroupfs, the
# --ulimit values this host lets a container set) with runc, sandboxd-oci
# (serve backend) and runsc. Prints p50, p99 (nearest rank) and the spread
# of wall time per run (ms) and the ratio of the p50 to runc's.
#
# Runs are interleaved (one of each per round); the daemon gets POOL_WAIT
# seconds between runs to refill its pool (outside the timed part).
#
# Environment:
#   N=50                 runs per configuration
#   POOL_WAIT=0.3        seconds before each run (pool refill)
#   OCI=… SANDBOXD=… SANDBOXCTL=… SENTRY=… RUNC=runc RUNSC=runsc   binaries
#   RUNSC_FLAGS          default "--platform=ptrace --network=none"
# Needs root, containerd, runc and a static busybox (podman for its rows).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
N=${N:-50}
POOL_WAIT=${POOL_WAIT:-0.3}
OCI=${OCI:-$ROOT/out/bin/sandboxd-oci}
SANDBOXD=${SANDBOXD:-$ROOT/out/bin/sandboxd}
SANDBOXCTL=${SANDBOXCTL:-$ROOT/out/bin/sandboxctl}
SENTRY=${SENTRY:-$ROOT/out/bin/sentry}
RUNC=${RUNC:-$(command -v runc)}
RUNSC=${RUNSC:-$(command -v runsc || true)}
RUNSC_FLAGS=${RUNSC_FLAGS:---platform=ptrace --network=none}
for b in "$OCI" "$SANDBOXD" "$SANDBOXCTL" "$SENTRY" "$RUNC"; do
  [ -x "$b" ] || { echo "$b not found; build first (see bench/README.md)" >&2; exit 1; }
done
make_tmp bench_oci
"$ROOT/test/oci/make_rootfs.sh" "$tmp/rootfs"
IMAGE=sandboxd.bench/busybox:latest
python3 "$ROOT/test/oci/make_image.py" "$tmp/rootfs" "$tmp/image.tar" "$IMAGE"

start_bg "$tmp/sandboxd.log" "$SANDBOXD" --sentry="$SENTRY" --socket="$tmp/sandboxd.sock" \
  --state-dir="$tmp/sandboxd-state" --pool-size=2 --cgroup-parent="bench-oci-$$" \
  --default-rootfs=/ --shutdown-kill
wait_for_daemon "$SANDBOXCTL" "$tmp/sandboxd.sock" || { echo "sandboxd did not start" >&2; exit 1; }

# The runtimes, as the shim runs them: wrappers where a runtime needs an
# environment variable or flags the shim does not pass.
cat >"$tmp/oci-run.sh" <<EOT
#!/bin/sh
exec "$OCI" --backend=run --sentry="$SENTRY" "\$@"
EOT
cat >"$tmp/oci-serve.sh" <<EOT
#!/bin/sh
exec "$OCI" --sentry="$SENTRY" "\$@"
EOT
cat >"$tmp/oci-daemon.sh" <<EOT
#!/bin/sh
SANDBOXD_OCI_SOCKET="$tmp/sandboxd.sock" exec "$OCI" "\$@"
EOT
cat >"$tmp/runsc.sh" <<EOT
#!/bin/sh
exec "$RUNSC" $RUNSC_FLAGS "\$@"
EOT
chmod +x "$tmp"/*.sh
CONFIGS=(runc sandboxd-oci-serve sandboxd-oci-run sandboxd-oci-daemon)
declare -A BIN=([runc]=$RUNC [sandboxd-oci-serve]=$tmp/oci-serve.sh
  [sandboxd-oci-run]=$tmp/oci-run.sh [sandboxd-oci-daemon]=$tmp/oci-daemon.sh)
if [ -n "$RUNSC" ]; then CONFIGS+=(runsc); BIN[runsc]=$tmp/runsc.sh; fi

cat >"$tmp/config.toml" <<EOT
version = 2
root = "$tmp/root"
state = "$tmp/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "$tmp/containerd.sock"
[ttrpc]
  address = "$tmp/containerd.sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
EOT
start_bg "$tmp/containerd.log" containerd --config "$tmp/config.toml"
CTR=(ctr -a "$tmp/containerd.sock")
for _ in $(seq 1 100); do "${CTR[@]}" version >/dev/null 2>&1 && break; sleep 0.1; done
"${CTR[@]}" image import --snapshotter native "$tmp/image.tar" >/dev/null

now_ms() { echo $(($(date +%s%N) / 1000)); }
run_once() {  # CONFIG ID -> appends ms (or "fail") to $tmp/run.CONFIG
  local c=$1 id=$2 t0 t1
  t0=$(date +%s%N)
  if timeout 60 "${CTR[@]}" run --rm --snapshotter native --runc-binary="${BIN[$c]}" \
      --runc-root="$tmp/rt-$c" "$IMAGE" "$id" true >/dev/null 2>>"$tmp/err.$c"; then
    t1=$(date +%s%N)
    echo $(((t1 - t0) / 1000)) | awk '{printf "%.1f\n", $1 / 1000}' >>"$tmp/run.$c"
  else
    echo fail >>"$tmp/run.$c"
  fi
}
echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
for c in "${CONFIGS[@]}"; do run_once "$c" "warm-$c"; done   # first runs: not counted
for c in "${CONFIGS[@]}"; do : >"$tmp/run.$c"; done
for i in $(seq 1 "$N"); do
  for c in "${CONFIGS[@]}"; do
    sleep "$POOL_WAIT"
    run_once "$c" "r$i-$c"
  done
done

# exec into a running container of each runtime.
for c in "${CONFIGS[@]}"; do
  : >"$tmp/exec.$c"
  "${CTR[@]}" run -d --snapshotter native --runc-binary="${BIN[$c]}" --runc-root="$tmp/rt-$c" \
    "$IMAGE" "x-$c" sleep 600 >/dev/null 2>>"$tmp/err.$c" || continue
done
for i in $(seq 1 "$N"); do
  for c in "${CONFIGS[@]}"; do
    t0=$(date +%s%N)
    if timeout 60 "${CTR[@]}" task exec --exec-id "e$i" "x-$c" true >/dev/null 2>>"$tmp/err.$c"; then
      t1=$(date +%s%N)
      echo $(((t1 - t0) / 1000)) | awk '{printf "%.1f\n", $1 / 1000}' >>"$tmp/exec.$c"
    else
      echo fail >>"$tmp/exec.$c"
    fi
  done
done
for c in "${CONFIGS[@]}"; do
  "${CTR[@]}" task kill -s KILL "x-$c" >/dev/null 2>&1
done
sleep 1
for c in "${CONFIGS[@]}"; do
  "${CTR[@]}" task delete "x-$c" >/dev/null 2>&1
  "${CTR[@]}" container rm "x-$c" >/dev/null 2>&1
done
# podman run --rm, one of each runtime per round.
PCONFIGS=()
if command -v podman >/dev/null && command -v conmon >/dev/null; then
  PCONFIGS=(runc sandboxd-oci-serve)
  [ -n "$RUNSC" ] && PCONFIGS+=(runsc)
fi
PODMAN=(podman --root "$tmp/podman" --runroot "$tmp/podman-run" --cgroup-manager=cgroupfs
  --events-backend=file)
podman_once() {  # CONFIG -> appends ms (or "fail") to $tmp/podman.CONFIG
  local c=$1 t0 t1
  t0=$(date +%s%N)
  if timeout 60 "${PODMAN[@]}" --runtime "${BIN[$c]}" run --rm --network=none --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 \
      --rootfs "$tmp/rootfs" true >/dev/null 2>>"$tmp/perr.$c"; then
    t1=$(date +%s%N)
    echo $(((t1 - t0) / 1000)) | awk '{printf "%.1f\n", $1 / 1000}' >>"$tmp/podman.$c"
  else
    echo fail >>"$tmp/podman.$c"
  fi
}
for c in "${PCONFIGS[@]}"; do podman_once "$c"; done   # first runs: not counted
for c in "${PCONFIGS[@]}"; do : >"$tmp/podman.$c"; done
for i in $(seq 1 "$N"); do
  for c in "${PCONFIGS[@]}"; do podman_once "$c"; done
done
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)"

base_run=$(median "$tmp/run.runc")
base_exec=$(median "$tmp/exec.runc")
printf '\n| runtime (containerd runc.v2 shim) | ctr run --rm true: p50 ms | p99 | spread | vs runc | ctr task exec true: p50 ms | p99 | spread | vs runc | failures |\n'
printf '|---|---|---|---|---|---|---|---|---|---|\n'
for c in "${CONFIGS[@]}"; do
  r=$(median "$tmp/run.$c")
  e=$(median "$tmp/exec.$c")
  f=$(cat "$tmp/run.$c" "$tmp/exec.$c" | grep -c fail)
  printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$c" "$r" \
    "$(percentile "$tmp/run.$c" 99)" "$(spread "$tmp/run.$c")" "$(ratio "$r" "$base_run")" \
    "$e" "$(percentile "$tmp/exec.$c" 99)" "$(spread "$tmp/exec.$c")" "$(ratio "$e" "$base_exec")" "$f"
done
if [ ${#PCONFIGS[@]} -gt 0 ]; then
  base_podman=$(median "$tmp/podman.runc")
  printf '\n| runtime (podman 4.3, conmon) | podman run --rm true: p50 ms | p99 | spread | vs runc | failures |\n'
  printf '|---|---|---|---|---|---|\n'
  for c in "${PCONFIGS[@]}"; do
    p=$(median "$tmp/podman.$c")
    printf '| %s | %s | %s | %s | %s | %s |\n' "$c" "$p" "$(percentile "$tmp/podman.$c" 99)" \
      "$(spread "$tmp/podman.$c")" "$(ratio "$p" "$base_podman")" "$(grep -c fail "$tmp/podman.$c")"
    grep -q fail "$tmp/podman.$c" && echo "$c (podman): first error: $(grep -v '^$' "$tmp/perr.$c" | head -1)"
  done
fi
for c in "${CONFIGS[@]}"; do
  if grep -q fail "$tmp/run.$c" "$tmp/exec.$c" 2>/dev/null; then
    echo "$c: first error: $(grep -v '^$' "$tmp/err.$c" | head -1)"
  fi
done
