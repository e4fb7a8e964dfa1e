#!/usr/bin/env bash
# The sandbox network mode's transport, pasta, against a veth pair (the
# core of docker's bridge; routed, without NAT rules, so a lower bound for
# veth + NAT): connect+request latency and bulk throughput, outbound (a
# client in the namespace, a server on the host; pasta: at the gateway
# address, which maps to the host's loopback) and inbound (a client on the
# host, a server in the namespace; pasta: a published port), and the time
# pasta takes to set a namespace up. Native processes in the namespaces
# (nsenter): this measures the network path, not the Sentry.
#
# Runs in a user and network namespace of its own (unshare -Urn): changes
# nothing on the host. One command, one run, interleaved rounds.
#
#   bench/network_modes.sh            # ~1 min
#   ROUNDS=5 CONNECTS=500 MIB=256 bench/network_modes.sh
set -u
ROUNDS=${ROUNDS:-3}
CONNECTS=${CONNECTS:-500}
MIB=${MIB:-256}
if [ -z "${SBX_BENCH_NS:-}" ]; then
  command -v pasta >/dev/null || { echo "no pasta (Debian package passt)"; exit 1; }
  echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$(dirname "$0")" rev-parse --short HEAD 2>/dev/null)"
  echo "# load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# ROUNDS=$ROUNDS CONNECTS=$CONNECTS MIB=$MIB"
  exec unshare -Urn env SBX_BENCH_NS=1 ROUNDS="$ROUNDS" CONNECTS="$CONNECTS" MIB="$MIB" "$0" "$@"
fi
PATH=$PATH:/usr/sbin:/sbin
set -e
tmp=$(mktemp -d /tmp/network_modes.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  [ -s "$tmp/pasta.pid" ] && kill "$(cat "$tmp/pasta.pid")" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
ip link set lo up
# The "host": an uplink for pasta to copy.
ip link add up0 type veth peer name up0p
ip link set up0p up
ip addr add 10.9.0.2/24 dev up0
ip link set up0 up
ip route add default via 10.9.0.1
ip addr add 10.9.1.1/32 dev lo   # "another host", reached through pasta's tap

# Namespace P (pasta) and namespace V (veth), each held by a sleeper.
unshare -n sleep 100000 &
P=$!
pids+=("$P")
unshare -n sleep 100000 &
V=$!
pids+=("$V")
sleep 0.2
nsenter -t "$P" -n ip link set lo up
nsenter -t "$V" -n ip link set lo up
ip link add vh type veth peer name vs
ip link set vs netns "$V"
ip addr add 10.10.0.1/24 dev vh
ip link set vh up
nsenter -t "$V" -n ip addr add 10.10.0.2/24 dev vs
nsenter -t "$V" -n ip link set vs up
nsenter -t "$V" -n ip route add default via 10.10.0.1

t0=$(date +%s%N)
pasta --runas=0:0 --config-net --quiet -t 127.0.0.1/19000:9000 -u none -T none -U none \
  --pid "$tmp/pasta.pid" --netns /proc/self/fd/5 --netns-only 5<"/proc/$P/ns/net" 2>&1 |
  grep -v -e syslog -e 'interface for IPv6' >&2 || true
t1=$(date +%s%N)
pasta_start_ms=$(( (t1 - t0) / 1000000 ))

cat >"$tmp/net.py" <<'EOF'
import socket, sys, time, statistics
mode = sys.argv[1]
if mode == "serve":          # serve PORT: 1-byte echo per connection, or a sink/source
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", int(sys.argv[2]))); s.listen(128)
    while True:
        c, _ = s.accept()
        cmd = c.recv(1)
        if cmd == b"p":
            c.sendall(b"p")
        elif cmd == b"s":    # sink: read until EOF
            while c.recv(1 << 20):
                pass
            c.sendall(b"k")
        c.close()
elif mode == "lat":          # lat HOST PORT N: median connect+request µs
    host, port, n = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    t = []
    for _ in range(n):
        a = time.perf_counter()
        c = socket.create_connection((host, port))
        c.sendall(b"p"); c.recv(1); c.close()
        t.append(time.perf_counter() - a)
    print("%.1f" % (statistics.median(t) * 1e6))
elif mode == "put":          # put HOST PORT MIB: MB/s sending MIB MiB
    host, port, mib = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    buf = b"x" * (1 << 20)
    a = time.perf_counter()
    c = socket.create_connection((host, port)); c.sendall(b"s")
    for _ in range(mib):
        c.sendall(buf)
    c.shutdown(socket.SHUT_WR); c.recv(1); c.close()
    print("%.0f" % (mib * 1.048576 / (time.perf_counter() - a)))
EOF
PY=/usr/bin/python3
$PY "$tmp/net.py" serve 9100 &                     # host loopback (pasta's gateway maps here)
pids+=("$!")
$PY "$tmp/net.py" serve 9101 &                     # host, for veth (listens on 0.0.0.0)
pids+=("$!")
nsenter -t "$P" -n $PY "$tmp/net.py" serve 9000 &  # in P, published as 127.0.0.1:19000
pids+=("$!")
nsenter -t "$V" -n $PY "$tmp/net.py" serve 9000 &  # in V, at 10.10.0.2:9000
pids+=("$!")
sleep 0.5

declare -A r
add() { r[$1]="${r[$1]:-} $2"; }
for _ in $(seq 1 "$ROUNDS"); do
  add pasta_out_lat "$(nsenter -t "$P" -n $PY "$tmp/net.py" lat 10.9.0.1 9100 "$CONNECTS")"
  add pastaext_out_lat "$(nsenter -t "$P" -n $PY "$tmp/net.py" lat 10.9.1.1 9101 "$CONNECTS")"
  add veth_out_lat "$(nsenter -t "$V" -n $PY "$tmp/net.py" lat 10.10.0.1 9101 "$CONNECTS")"
  add pasta_in_lat "$($PY "$tmp/net.py" lat 127.0.0.1 19000 "$CONNECTS")"
  add veth_in_lat "$($PY "$tmp/net.py" lat 10.10.0.2 9000 "$CONNECTS")"
  add lo_lat "$($PY "$tmp/net.py" lat 127.0.0.1 9100 "$CONNECTS")"
  add pasta_out_tp "$(nsenter -t "$P" -n $PY "$tmp/net.py" put 10.9.0.1 9100 "$MIB")"
  add pastaext_out_tp "$(nsenter -t "$P" -n $PY "$tmp/net.py" put 10.9.1.1 9101 "$MIB")"
  add veth_out_tp "$(nsenter -t "$V" -n $PY "$tmp/net.py" put 10.10.0.1 9101 "$MIB")"
  add pasta_in_tp "$($PY "$tmp/net.py" put 127.0.0.1 19000 "$MIB")"
  add veth_in_tp "$($PY "$tmp/net.py" put 10.10.0.2 9000 "$MIB")"
  add lo_tp "$($PY "$tmp/net.py" put 127.0.0.1 9100 "$MIB")"
done
med() { tr ' ' '\n' <<<"$1" | grep . | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
echo
echo "| path | loopback (same ns) | veth | pasta | pasta / veth |"
echo "|---|---|---|---|---|"
lo=$(med "${r[lo_lat]}")
for d in out in; do
  v=$(med "${r[veth_${d}_lat]}"); p=$(med "${r[pasta_${d}_lat]}")
  echo "| connect + 1-byte request, $d ($( [ $d = out ] && echo 'namespace → host' || echo 'host → namespace')), median µs | $lo | $v | $p | $(ratio "$p" "$v") |"
done
v=$(med "${r[veth_out_lat]}"); p=$(med "${r[pastaext_out_lat]}")
echo "| connect + 1-byte request, out to another host address (pasta: tap, not the gateway mapping), median µs | $lo | $v | $p | $(ratio "$p" "$v") |"
lo=$(med "${r[lo_tp]}")
for d in out in; do
  v=$(med "${r[veth_${d}_tp]}"); p=$(med "${r[pasta_${d}_tp]}")
  echo "| $MIB MiB one way, $d, MB/s | $lo | $v | $p | $(ratio "$p" "$v") |"
done
v=$(med "${r[veth_out_tp]}"); p=$(med "${r[pastaext_out_tp]}")
echo "| $MIB MiB one way, out to another host address, MB/s | $lo | $v | $p | $(ratio "$p" "$v") |"
echo
echo "pasta set-up (configure the namespace, bind one port, fork): ${pasta_start_ms} ms"
echo "# load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
