#!/usr/bin/env bash
# Real servers reached from the host: redis-server under redis-benchmark
# (SET, GET), nginx serving a 10 KiB file under wrk (1 and 100
# connections) and iperf3 (bulk TCP, one stream, into the server and out
# of it with -R), natively, in sandboxd's sandboxes (NETWORK_MODE_SANDBOX
# behind a published port: pasta; and NETWORK_MODE_HOST: hostinet in the
# host's namespace) and in Debian's runsc (ptrace) twice: --network=host
# (gVisor's hostinet) and --network=sandbox (its default: gVisor's own
# netstack, over a veth pair into a network namespace this script makes,
# as docker gives runsc one). One command, one run; requests/s or
# Mbit/s, and ratios to native.
#
#   bench/servers.sh                 # ~4 min
#   REDIS_N=20000 WRK_SECONDS=5 IPERF_SECONDS=5 SANDBOXD=… SANDBOXCTL=… SENTRY=… RUNSC=runsc bench/servers.sh
#   SERVERS_ONLY=iperf3 SERVERS_CONFIGS="native sandbox" bench/servers.sh   # a subset
#
# nginx runs as a master and one worker (master_process on) everywhere: the
# master sets FIOASYNC and F_SETOWN on its channel socketpairs to the worker.
# The runsc bundles get the capabilities of a root process (`runsc spec`
# gives only runc's three): without CAP_SETGID and CAP_CHOWN nginx's
# master failed (setgid(65534), chown("/tmp"): EPERM) and never served.
# runsc runs each server from an OCI bundle (`runsc spec`, the host's / as
# root under --overlay's in-memory upper layer): with --network=host in no
# network namespace (`runsc do`'s servers were not reachable from the
# host's namespace here), with --network=sandbox in the namespace
# sbxbench-PID (veth 10.231.0.1/24 on the host, 10.231.0.2/24 inside; it
# needs root), from a mount namespace whose /proc/sys hides the file that
# runsc's root-namespace check looks for (see start). Ports 26379-26383, 28080-28084 and 25201-25205 (each plus
# SERVERS_PORT_OFFSET) must be free.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SANDBOXD=${SANDBOXD:-$ROOT/out/bin/sandboxd}
SANDBOXCTL=${SANDBOXCTL:-$ROOT/out/bin/sandboxctl}
SENTRY=${SENTRY:-$ROOT/out/bin/sentry}
RUNSC=${RUNSC:-runsc}
REDIS_N=${REDIS_N:-20000}
WRK_SECONDS=${WRK_SECONDS:-5}
IPERF_SECONDS=${IPERF_SECONDS:-5}
SERVERS_ONLY=${SERVERS_ONLY:-redis nginx iperf3}
# Added to every port below (another run of this script on the machine).
SERVERS_PORT_OFFSET=${SERVERS_PORT_OFFSET:-0}
# How long a server may take to answer, in quarter seconds (2 min).
SERVERS_WAIT=${SERVERS_WAIT:-480}
for p in redis-server redis-benchmark redis-cli nginx wrk curl pasta iperf3 ip; do
  command -v "$p" >/dev/null || PATH=$PATH:/usr/sbin command -v "$p" >/dev/null ||
    { echo "no $p (tools/install_deps.sh)" >&2; exit 1; }
done
NGINX=$(PATH=$PATH:/usr/sbin command -v nginx)
TMP=$(mktemp -d /tmp/bench_servers.XXXXXX)
chmod 711 "$TMP"  # nginx's worker (nobody) reads $TMP/www
SOCK=$TMP/sandboxd.sock
bg=()
NETNS=sbxbench-$$
cleanup() {
  local id
  for id in $("$RUNSC" --root="$TMP/runsc" list -q 2>/dev/null); do
    "$RUNSC" --root="$TMP/runsc" delete --force "$id" >/dev/null 2>&1
  done
  for p in "${bg[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  ip netns del "$NETNS" 2>/dev/null
  ip link del "sbxb$$" 2>/dev/null
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)"
echo "# load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# REDIS_N=$REDIS_N WRK_SECONDS=$WRK_SECONDS IPERF_SECONDS=$IPERF_SECONDS; runsc: $RUNSC --platform=ptrace --network=host|sandbox --overlay run (bundle)"

# runsc's netstack gets a namespace with a veth to the host, as docker's
# bridge would give it: runsc --network=sandbox takes the interface over
# (moves it into its netstack and deletes it from the namespace), so each
# runsc_ns server gets a fresh veth (veth_for_runsc, from start).
RUNSC_NS_ADDR=10.231.0.2
veth_for_runsc() {
  ip link del "sbxb$$" 2>/dev/null
  ip -n "$NETNS" link del "sbxc$$" 2>/dev/null
  ip link add "sbxb$$" type veth peer name "sbxc$$" &&
    ip link set "sbxc$$" netns "$NETNS" &&
    ip addr add 10.231.0.1/24 dev "sbxb$$" && ip link set "sbxb$$" up &&
    ip -n "$NETNS" addr add "$RUNSC_NS_ADDR/24" dev "sbxc$$" &&
    ip -n "$NETNS" link set "sbxc$$" up && ip -n "$NETNS" link set lo up
}
if ip netns add "$NETNS" 2>/dev/null && veth_for_runsc; then
  have_ns=1
else
  have_ns=0
  echo "note: no network namespace for runsc --network=sandbox (needs root): its column fails" >&2
fi
# The address a configuration's servers are reached at from here.
addr_of() { if [ "$1" = runsc_ns ]; then echo "$RUNSC_NS_ADDR"; else echo 127.0.0.1; fi; }

mkdir -p "$TMP/www"
head -c 10240 /dev/urandom >"$TMP/www/10k.bin"
chmod 755 "$TMP/www"
chmod 644 "$TMP/www/10k.bin"
nginx_conf() {  # nginx_conf PORT: a config file for PORT, its path on stdout
  cat >"$TMP/nginx-$1.conf" <<EOF
daemon off;
master_process on;
worker_processes 1;
pid /tmp/nginx-$1.pid;
error_log stderr;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path /tmp;
  proxy_temp_path /tmp;
  fastcgi_temp_path /tmp;
  uwsgi_temp_path /tmp;
  scgi_temp_path /tmp;
  server { listen $1; root $TMP/www; }
}
EOF
  chmod 644 "$TMP/nginx-$1.conf"
  echo "$TMP/nginx-$1.conf"
}

# Whether the server of the current configuration ($how $what, from
# start) still runs: a runsc that failed to start is not waited for.
alive() { [ "$how" != runsc ] || kill -0 "${what%% *}" 2>/dev/null; }
# wait_* ADDR PORT: until the server answers (up to 2 min).
wait_redis() {
  for _ in $(seq 1 "$SERVERS_WAIT"); do
    alive || return 1
    [ "$(redis-cli -h "$1" -p "$2" PING 2>/dev/null)" = PONG ] && return 0
    sleep 0.25
  done
  return 1
}
wait_http() {
  for _ in $(seq 1 "$SERVERS_WAIT"); do
    alive || return 1
    curl -sf --max-time 2 -o /dev/null "http://$1:$2/10k.bin" && return 0
    sleep 0.25
  done
  return 1
}
# iperf3 ADDR PORT [-R]: one stream for IPERF_SECONDS, the receiver's
# Mbit/s; nothing while the server does not answer (up to 2 min: a connect
# alone would leave a half-made test behind in iperf3's server).
iperf3_mbits() {
  local out
  for _ in $(seq 1 $((SERVERS_WAIT / 4))); do
    alive || return 1
    out=$(iperf3 -c "$1" -p "$2" -t "$IPERF_SECONDS" -J ${3:+"$3"} 2>/dev/null | python3 -c '
import json, sys
try:
    print("%.0f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"] / 1e6))
except Exception:
    pass')
    [ -n "$out" ] && { echo "$out"; return 0; }
    sleep 1
  done
  return 1
}

# The daemon for both sandboxd configurations.
"$SANDBOXD" --sentry="$SENTRY" --socket="$SOCK" --state-dir="$TMP/state" --pool-size=1 \
  --no-cgroups --default-rootfs=/ --shutdown-kill 2>"$TMP/daemon.log" &
bg+=("$!")
for _ in $(seq 1 200); do "$SANDBOXCTL" --socket="$SOCK" ps >/dev/null 2>&1 && break; sleep 0.05; done
ctl() { "$SANDBOXCTL" --socket="$SOCK" "$@"; }

# start CONFIG KIND PORT: starts the server of KIND (redis|nginx|iperf3)
# for CONFIG, listening on PORT at `addr_of CONFIG`; prints how to stop it.
start() {
  local c=$1 kind=$2 port=$3 inner cmd bind=127.0.0.1
  inner=$port
  if [ "$c" = sandbox ]; then
    case $kind in redis) inner=6379 ;; nginx) inner=8080 ;; iperf3) inner=5201 ;; esac
  fi
  # The sandbox's server listens on all its addresses (pasta's published
  # port arrives on the sandbox's loopback either way), netstack's on its
  # veth.
  if [ "$c" = sandbox ] || [ "$c" = runsc_ns ]; then bind=0.0.0.0; fi
  if [ "$kind" = redis ]; then
    cmd=(redis-server --port "$inner" --bind "$bind" --save '' --appendonly no --protected-mode no)
  elif [ "$kind" = iperf3 ]; then
    cmd=(iperf3 -s -p "$inner")
  else
    cmd=("$NGINX" -e stderr -c "$(nginx_conf "$inner")")
  fi
  case $c in
    native) "${cmd[@]}" >/dev/null 2>"$TMP/$c-$kind.err" & echo "pid $!" ;;
    sandbox) echo "id $(ctl run -d -p "127.0.0.1:$port:$inner" -v "$TMP:$TMP:ro" -- "${cmd[@]}")" ;;
    host) echo "id $(ctl run -d --network=host -v "$TMP:$TMP:ro" -- "${cmd[@]}")" ;;
    runsc|runsc_ns)
      local b=$TMP/bundle-$c-$kind net=host ns=
      if [ "$c" = runsc_ns ]; then
        net=sandbox ns=/var/run/netns/$NETNS
        veth_for_runsc || return
      fi
      mkdir -p "$b"
      (cd "$b" && rm -f config.json && "$RUNSC" spec -- "${cmd[@]}") || return
      python3 - "$b/config.json" "$ns" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
c["root"] = {"path": "/", "readonly": False}  # --overlay: writes stay in memory
c["process"]["terminal"] = False
caps = ["CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_SETGID", "CAP_SETUID",
        "CAP_KILL", "CAP_NET_BIND_SERVICE", "CAP_AUDIT_WRITE"]
c["process"]["capabilities"] = {k: caps for k in ("bounding", "effective", "inheritable", "permitted")}
ns = [n for n in c["linux"]["namespaces"] if n["type"] != "network"]
if sys.argv[2]:  # netstack: the namespace whose veth it takes over
    ns.append({"type": "network", "path": sys.argv[2]})
c["linux"]["namespaces"] = ns
json.dump(c, open(sys.argv[1], "w"))
EOF
      local run=("$RUNSC" --root="$TMP/runsc" --platform=ptrace --network="$net" --ignore-cgroups
        --overlay run --bundle "$b" "bench-$c-$kind-$$")
      if [ "$c" = runsc_ns ]; then
        # Debian's runsc (20221219) takes a namespace for the root one when
        # /proc/sys/net/core/rmem_default exists in it (isRootNS in
        # runsc/sandbox/network.go), and Linux has that file in every
        # network namespace since it made the sysctl per namespace (here,
        # 6.18): it refuses "cannot run with network enabled in root network
        # namespace" whatever namespace it is given. Run it in a mount
        # namespace of its own whose /proc/sys is a tmpfs holding only the
        # two files it reads.
        local clc mma
        clc=$(cat /proc/sys/kernel/cap_last_cap) mma=$(cat /proc/sys/vm/mmap_min_addr)
        unshare -m sh -c 'mount -t tmpfs -o size=64k sbxbench /proc/sys &&
          mkdir /proc/sys/kernel /proc/sys/vm && echo "$1" >/proc/sys/kernel/cap_last_cap &&
          echo "$2" >/proc/sys/vm/mmap_min_addr && shift 2 && exec "$@"' sh "$clc" "$mma" \
          "${run[@]}" >/dev/null 2>"$TMP/$c-$kind.err" &
      else
        "${run[@]}" >/dev/null 2>"$TMP/$c-$kind.err" &
      fi
      echo "runsc $! bench-$c-$kind-$$" ;;
  esac
}
stop() {
  case $1 in
    pid) kill "$2" 2>/dev/null; wait "$2" 2>/dev/null ;;
    runsc)
      local id=${2#* }
      "$RUNSC" --root="$TMP/runsc" kill "$id" KILL >/dev/null 2>&1
      wait "${2%% *}" 2>/dev/null
      "$RUNSC" --root="$TMP/runsc" delete --force "$id" >/dev/null 2>&1 ;;
    id) ctl rm -f "$2" >/dev/null 2>&1 ;;
  esac
}

declare -A res
configs=(native sandbox host runsc runsc_ns)
if [ -n "${SERVERS_CONFIGS:-}" ]; then read -r -a configs <<<"$SERVERS_CONFIGS"; fi
want() { [[ " $SERVERS_ONLY " == *" $1 "* ]]; }
i=0
for c in "${configs[@]}"; do
  o=$((SERVERS_PORT_OFFSET + i)); i=$((i + 1))
  rport=$((26379 + o)); hport=$((28080 + o)); iport=$((25201 + o))
  a=$(addr_of "$c")
  if [ "$c" = runsc_ns ] && [ "$have_ns" = 0 ]; then continue; fi
  if want redis; then
    read -r how what <<<"$(start "$c" redis "$rport")"
    if wait_redis "$a" "$rport"; then
      out=$(redis-benchmark -h "$a" -p "$rport" -t set,get -n "$REDIS_N" -c 50 -q 2>/dev/null | tr '\r' '\n')
      res[$c,set]=$(grep -o 'SET: [0-9.]*' <<<"$out" | awk '{print $2}' | tail -1)
      res[$c,get]=$(grep -o 'GET: [0-9.]*' <<<"$out" | awk '{print $2}' | tail -1)
    else
      echo "note: $c: redis did not answer" >&2
    fi
    stop "$how" "$what"
  fi
  if want nginx; then
    read -r how what <<<"$(start "$c" nginx "$hport")"
    if wait_http "$a" "$hport"; then
      for conns in 1 100; do
        threads=$([ "$conns" = 1 ] && echo 1 || echo 2)
        res[$c,c$conns]=$(wrk -t"$threads" -c"$conns" -d"${WRK_SECONDS}s" "http://$a:$hport/10k.bin" 2>/dev/null |
          awk '/Requests\/sec/ {print $2}')
      done
    else
      echo "note: $c: nginx did not answer" >&2
    fi
    stop "$how" "$what"
  fi
  if want iperf3; then
    read -r how what <<<"$(start "$c" iperf3 "$iport")"
    res[$c,up]=$(iperf3_mbits "$a" "$iport")
    [ -n "${res[$c,up]}" ] && res[$c,down]=$(iperf3_mbits "$a" "$iport" -R)
    [ -n "${res[$c,up]}" ] || echo "note: $c: iperf3 did not answer" >&2
  fi
  if [ "$c" = runsc_ns ] && [ -s "$TMP/$c-redis.err" ]; then
    echo "note: runsc --network=sandbox: $(tail -c 300 "$TMP/$c-redis.err")" >&2
    stop "$how" "$what"
  fi
done

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a ~ /^[0-9.]+$/ && b ~ /^[0-9.]+$/ && b > 0) printf "%.2f", a / b; else print "n/a" }'; }
echo
echo "| requests/s or Mbit/s (ratio to native) | native | sandboxd, sandbox mode (-p, pasta) | sandboxd, host mode | runsc ptrace, host network | runsc ptrace, netstack (--network=sandbox, veth) |"
echo "|---|---|---|---|---|---|"
rows=()
want redis && rows+=("set:redis-benchmark SET (50 conns), req/s" "get:redis-benchmark GET (50 conns), req/s")
want nginx && rows+=("c1:nginx 10 KiB, wrk 1 conn, req/s" "c100:nginx 10 KiB, wrk 100 conns, req/s")
want iperf3 && rows+=("up:iperf3 upload (1 stream into the server), Mbit/s" "down:iperf3 download (-R, out of the server), Mbit/s")
for row in "${rows[@]}"; do
  k=${row%%:*}
  line="| ${row#*:} | ${res[native,$k]:-fail}"
  for c in sandbox host runsc runsc_ns; do
    v=${res[$c,$k]:-fail}
    line="$line | $v ($(ratio "$v" "${res[native,$k]:-}"))"
  done
  echo "$line |"
done
echo
echo "# load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
