#!/usr/bin/env bash
# daemon_tcp_test.sh SANDBOXD SANDBOXCTL SENTRY
#
# sandboxd's TCP port (TLS, bearer token) is bounded as its unix socket is
# (daemon/README.md, "Connections"):
#   - every call without the token, or with a wrong one, fails
#     UNAUTHENTICATED, for every method of the API and for the health
#     service, and a Destroy without it does nothing; with it they work
#   - one address opening far more TLS connections than the per-client
#     limit holds at most that many, while `sandboxctl --tcp` ps and run
#     from another address work; the daemon's descriptors and RSS stay
#     bounded
#   - TCP connections that never finish a TLS handshake, and TLS ones
#     that never send a call, are closed after --connection-idle-timeout
#   - with the descriptors used up (RLIMIT_NOFILE lowered under the
#     running daemon) a TLS flood makes accept fail with EMFILE; once the
#     flood is gone, TCP calls work again
# Exits 77 (CTest: skipped) until the binaries exist.
set -u
# shellcheck source=test/lib.sh
. "$(dirname "$0")/lib.sh"
usage_unless [ $# -eq 3 ] -- "SANDBOXD SANDBOXCTL SENTRY"
require_built "$@"
SANDBOXD=$(readlink -f "$1")
SANDBOXCTL=$(readlink -f "$2")
SENTRY=$(readlink -f "$3")
[ "$(id -u)" = 0 ] || skip "needs root (cgroups; prlimit of the daemon)"
command -v openssl >/dev/null || skip "needs openssl"
command -v ss >/dev/null || skip "needs ss (iproute2)"
command -v prlimit >/dev/null || skip "needs prlimit (util-linux)"
/usr/bin/python3 -c 'import grpc' 2>/dev/null || skip "needs python3-grpcio"
make_tmp daemon_tcp_test "${KEEP_TMP:-0}"
CHECK_OUT_BYTES=400

SOCK=$tmp/sandboxd.sock
PER_CLIENT=16
TOTAL=40
FLOOD=200
IDLE=5
RSS_GROWTH_KIB=$((16 * 1024))

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
  -days 2 -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 \
  -keyout "$tmp/key.pem" -out "$tmp/cert.pem" 2>"$tmp/openssl.log" ||
  { cat "$tmp/openssl.log"; exit 1; }
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tmp/token"
chmod 0600 "$tmp/token"

start_bg "$tmp/daemon.log" "$SANDBOXD" --sentry="$SENTRY" --socket="$SOCK" \
  --state-dir="$tmp/state" --pool-size=1 --cgroup-parent="tcp-test-$$" \
  --default-rootfs=/ --shutdown-kill --max-connections=$TOTAL \
  --max-connections-per-client=$PER_CLIENT --connection-idle-timeout=$IDLE \
  --tcp=127.0.0.1:0 --tls-cert="$tmp/cert.pem" --tls-key="$tmp/key.pem" \
  --token-file="$tmp/token"
daemon=$bg_pid
if ! wait_for_daemon "$SANDBOXCTL" "$SOCK"; then
  echo "not ok - sandboxd did not start"
  cat "$tmp/daemon.log"
  exit 1
fi
PORT=$(sed -n 's/.*and tcp port \([0-9]*\).*/\1/p' "$tmp/daemon.log" | head -1)
[ -n "$PORT" ] || { echo "not ok - no tcp port in the log"; cat "$tmp/daemon.log"; exit 1; }
TCP=(--tcp=127.0.0.1:$PORT --ca-cert="$tmp/cert.pem" --token-file="$tmp/token")

rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$daemon/status"; }
fds() { ls "/proc/$daemon/fd" | wc -l; }
# The daemon's established TCP connections on its port.
held_tcp() {
  ss -tnpH state established "( sport = :$PORT )" | grep -cF "pid=$daemon,"
}
wait_file() {
  for _ in $(seq 1 600); do [ -e "$1" ] && return 0; sleep 0.05; done
  return 1
}

capture 30 "$SANDBOXCTL" "${TCP[@]}" ps
check "ps over TCP with the token" eq "$status" 0
capture 60 "$SANDBOXCTL" "${TCP[@]}" run --rm -- /bin/echo over-tcp
check "run over TCP with the token" contains "$tmp/out" "over-tcp"

# --- the token ---------------------------------------------------------------
capture 60 "$SANDBOXCTL" --socket="$SOCK" run -d --name=keep -- /bin/sleep 600
check "a sandbox to keep (unix socket, no token)" eq "$status" 0
cat >"$tmp/calls.py" <<'PY'
# calls.py PROTO ADDR CA TOKEN|- KEEP_ID: calls every method of
# sandboxd.v1.Sandboxes (an empty request) and grpc.health.v1's Check, and
# prints "METHOD CODE" per call.
import re, sys, grpc
proto, addr, ca, token, keep = sys.argv[1:6]
creds = grpc.ssl_channel_credentials(open(ca, "rb").read())
if token != "-":
    creds = grpc.composite_channel_credentials(
        creds, grpc.access_token_call_credentials(token))
ch = grpc.secure_channel(addr, creds)
text = open(proto).read()
rpcs = re.findall(r"rpc (\w+)\((stream )?\w+\) returns \((stream )?\w+\)", text)
def call(path, cs, ss, req):
    try:
        if cs and ss:
            r = ch.stream_stream(path)(iter([req]), timeout=10)
            list(r)
        elif ss:
            list(ch.unary_stream(path)(req, timeout=10))
        elif cs:
            ch.stream_unary(path)(iter([req]), timeout=10)
        else:
            ch.unary_unary(path)(req, timeout=10)
        return "OK"
    except grpc.RpcError as e:
        return e.code().name
for name, cs, ss in rpcs:
    print(name, call("/sandboxd.v1.Sandboxes/" + name, cs, ss, b""))
print("health", call("/grpc.health.v1.Health/Check", "", "", b""))
# Destroy of a real sandbox: DestroyRequest{id = keep}.
req = b"\x0a" + bytes([len(keep)]) + keep.encode()
print("destroy-keep", call("/sandboxd.v1.Sandboxes/Destroy", "", "", req))
PY
PROTO=$(dirname "$(readlink -f "$0")")/../proto/sandbox.proto
nrpcs=$(grep -c '^ *rpc ' "$PROTO")
capture 120 /usr/bin/python3 "$tmp/calls.py" "$PROTO" "127.0.0.1:$PORT" "$tmp/cert.pem" - keep
check "without a token: all $nrpcs methods, health and Destroy answered" \
  eq "$(grep -c . "$tmp/out")" $((nrpcs + 2))
check "without a token: every call UNAUTHENTICATED" \
  eq "$(grep -vc ' UNAUTHENTICATED$' "$tmp/out")" 0
cp "$tmp/out" "$tmp/no_token.out"
echo wrong-token >"$tmp/wrong"
capture 120 /usr/bin/python3 "$tmp/calls.py" "$PROTO" "127.0.0.1:$PORT" "$tmp/cert.pem" \
  "$(cat "$tmp/wrong")" keep
check "a wrong token: every call UNAUTHENTICATED" \
  eq "$(grep -vc ' UNAUTHENTICATED$' "$tmp/out")" 0
capture 30 "$SANDBOXCTL" --socket="$SOCK" ps
check "the sandbox is still there after Destroys without the token" \
  contains "$tmp/out" "keep"
capture 120 /usr/bin/python3 "$tmp/calls.py" "$PROTO" "127.0.0.1:$PORT" "$tmp/cert.pem" \
  "$(cat "$tmp/token")" keep
check "with the token: List and health are OK" \
  eq "$(grep -cE '^(List|health) OK$' "$tmp/out")" 2
check "with the token: the Destroy happened" contains "$tmp/out" "destroy-keep OK"

# --- a flood of TLS connections from one address ---------------------------------
# flood N READY RELEASE SRC MODE: opens N connections from address SRC,
# MODE "tls" (handshake done, ALPN h2, then nothing sent) or "tcp" (no
# handshake at all), touches READY ("held failed"), holds them until
# RELEASE exists, then closes them.
cat >"$tmp/flood.py" <<'PY'
import os, resource, socket, ssl, sys, time
n, ready, release, src, mode, port, ca = sys.argv[1:8]
n, port = int(n), int(port)
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
ctx = ssl.create_default_context(cafile=ca)
ctx.check_hostname = False
ctx.set_alpn_protocols(["h2"])
held, failed = [], 0
for _ in range(n):
    s = socket.socket()
    s.settimeout(3)
    try:
        s.bind((src, 0))
        s.connect(("127.0.0.1", port))
        if mode == "tls":
            s = ctx.wrap_socket(s)
            # A refused connection is closed by the daemon right after the
            # handshake: find out now.
            s.settimeout(0.05)
            try:
                if s.recv(1) == b"":
                    raise OSError("closed")
            except (socket.timeout, ssl.SSLWantReadError):
                pass
        held.append(s)
    except (OSError, ssl.SSLError):
        failed += 1
        s.close()
open(ready, "w").write("%d %d\n" % (len(held), failed))
while not os.path.exists(release):
    time.sleep(0.05)
for s in held:
    s.close()
PY
flood() {  # N TAG SRC MODE
  /usr/bin/python3 "$tmp/flood.py" "$1" "$tmp/ready.$2" "$tmp/release.$2" "$3" "$4" \
    "$PORT" "$tmp/cert.pem" &
  flood_pid=$!
  on_exit "touch $tmp/release.$2; stop_pid $flood_pid"
  wait_file "$tmp/ready.$2"
}
release() {  # TAG
  touch "$tmp/release.$1"
  wait "$flood_pid" 2>/dev/null
}

baseline_rss=$(rss_kib)
baseline_fds=$(fds)
flood $FLOOD tls 127.0.0.2 tls
check "the TLS flood ran" test -e "$tmp/ready.tls"
read -r flood_held flood_failed <"$tmp/ready.tls"
sleep 0.5
check "sandboxd alive while flooded" kill -0 "$daemon"
held=$(held_tcp)
check "TLS connections held while flooded: $held <= $PER_CLIENT" ge "$PER_CLIENT" "$held"
check "the flood's own view: $flood_held held, $flood_failed refused" \
  ge $((PER_CLIENT + 1)) "$flood_held"
capture 30 "$SANDBOXCTL" "${TCP[@]}" ps
check "ps over TCP from another address while flooded" eq "$status" 0
capture 60 "$SANDBOXCTL" "${TCP[@]}" run --rm -- /bin/echo served
check "run over TCP from another address while flooded" contains "$tmp/out" "served"
now_fds=$(fds)
check "descriptors while flooded: $now_fds (baseline $baseline_fds)" \
  ge $((baseline_fds + 3 * PER_CLIENT + 16)) "$now_fds"
rss=$(rss_kib)
check "RSS while flooded: ${rss} KiB (baseline ${baseline_rss})" \
  ge $((baseline_rss + RSS_GROWTH_KIB)) "$rss"
check "sandboxd logs the refusals" contains "$tmp/daemon.log" \
  "refusing connections of tcp 127.0.0.2"
release tls
capture 30 "$SANDBOXCTL" "${TCP[@]}" ps
check "ps over TCP after the flood" eq "$status" 0

# --- idle connections ----------------------------------------------------------
flood 10 idle_tls 127.0.0.3 tls
flood_tls=$flood_pid
flood 10 idle_tcp 127.0.0.4 tcp
sleep 0.3
check "idle TLS and bare TCP connections held at first" ge "$(held_tcp)" 20
sleep $((IDLE + 3))
check "idle connections closed after --connection-idle-timeout=$IDLE: $(held_tcp) left" \
  eq "$(held_tcp)" 0
release idle_tcp
flood_pid=$flood_tls
release idle_tls

# --- out of descriptors ------------------------------------------------------------
nofile=$(prlimit --pid "$daemon" --nofile --noheadings --output=SOFT,HARD | awk '{print $1":"$2}')
# Room for two TLS connections (three descriptors each: the TCP socket and
# the socketpair to gRPC); the third one's accept fails. The limit bounds
# descriptor numbers: six free numbers below it.
used=" $(ls "/proc/$daemon/fd" | tr '\n' ' ') "
free=0
low=0
while [ $free -lt 6 ]; do
  case "$used" in *" $low "*) ;; *) free=$((free + 1)) ;; esac
  low=$((low + 1))
done
prlimit --pid "$daemon" --nofile=$low:${nofile#*:}
flood $FLOOD emfile 127.0.0.5 tls
sleep 0.5
check "EMFILE: sandboxd alive" kill -0 "$daemon"
check "EMFILE: the accept loop dropped connections and went on" contains \
  "$tmp/daemon.log" "Too many open files (connection dropped; accepting on)"
release emfile
sleep 0.5
capture 30 "$SANDBOXCTL" "${TCP[@]}" ps
check "EMFILE: ps over TCP once the flood is gone (same descriptor limit)" eq "$status" 0
prlimit --pid "$daemon" --nofile="$nofile"
capture 60 "$SANDBOXCTL" "${TCP[@]}" run --rm -- /bin/echo recovered
check "EMFILE: run over TCP after" contains "$tmp/out" "recovered"
capture 30 "$SANDBOXCTL" --socket="$SOCK" ps
check "EMFILE: ps on the unix socket after" eq "$status" 0
now_fds=$(fds)
check "descriptors at the end: $now_fds (baseline $baseline_fds)" \
  ge $((baseline_fds + 16)) "$now_fds"
check "the daemon lives" kill -0 "$daemon"
passed
