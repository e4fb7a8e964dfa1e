#!/usr/bin/env bash
# Real servers reached from the host: redis-server under redis-benchmark
# (SET, GET) and nginx serving a 10 KiB file under wrk (1 and 100
# connections), natively, in sandboxd's sandboxes (NETWORK_MODE_SANDBOX
# behind a published port: pasta; and NETWORK_MODE_HOST: hostinet in the
# host's namespace) and in Debian's runsc (ptrace, --network=host: gVisor's
# hostinet). One command, one run; requests/s and ratios to native.
#
#   bench/servers.sh                 # ~3 min
#   REDIS_N=20000 WRK_SECONDS=5 SANDBOXD=… SANDBOXCTL=… SENTRY=… RUNSC=runsc bench/servers.sh
#
# nginx runs as a master and one worker (master_process on) everywhere: the
# master sets FIOASYNC and F_SETOWN on its channel socketpairs to the worker.
# runsc runs each server from an OCI bundle (`runsc spec`, the host's / as
# root under --overlay's in-memory upper layer, no network namespace): `runsc do`'s
# servers were not reachable from the host's namespace here.
# Ports 26379-26382 and 28080-28083 on 127.0.0.1 must be free.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SANDBOXD=${SANDBOXD:-$ROOT/out/bin/sandboxd}
SANDBOXCTL=${SANDBOXCTL:-$ROOT/out/bin/sandboxctl}
SENTRY=${SENTRY:-$ROOT/out/bin/sentry}
RUNSC=${RUNSC:-runsc}
REDIS_N=${REDIS_N:-20000}
WRK_SECONDS=${WRK_SECONDS:-5}
for p in redis-server redis-benchmark redis-cli nginx wrk curl pasta; do
  command -v "$p" >/dev/null || PATH=$PATH:/usr/sbin command -v "$p" >/dev/null ||
    { echo "no $p (tools/install_deps.sh)" >&2; exit 1; }
done
NGINX=$(PATH=$PATH:/usr/sbin command -v nginx)
TMP=$(mktemp -d /tmp/bench_servers.XXXXXX)
SOCK=$TMP/sandboxd.sock
bg=()
cleanup() {
  for p in "${bg[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  rm -rf "$TMP"
}
trap cleanup EXIT

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)"
echo "# load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# REDIS_N=$REDIS_N WRK_SECONDS=$WRK_SECONDS; runsc: $RUNSC --platform=ptrace --network=host --overlay run (bundle)"

# nginx's worker runs as nobody: it must be able to pass through mktemp's
# 0700 directory to reach www/ and the config.
chmod 711 "$TMP"
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

wait_redis() {
  for _ in $(seq 1 480); do
    [ "$(redis-cli -p "$1" PING 2>/dev/null)" = PONG ] && return 0
    sleep 0.25
  done
  return 1
}
wait_http() {
  for _ in $(seq 1 480); do
    curl -sf --max-time 2 -o /dev/null "http://127.0.0.1:$1/10k.bin" && return 0
    sleep 0.25
  done
  return 1
}

# The daemon for both sandboxd configurations.
"$SANDBOXD" --sentry="$SENTRY" --socket="$SOCK" --state-dir="$TMP/state" --pool-size=1 \
  --no-cgroups --default-rootfs=/ --shutdown-kill 2>"$TMP/daemon.log" &
bg+=("$!")
for _ in $(seq 1 200); do "$SANDBOXCTL" --socket="$SOCK" ps >/dev/null 2>&1 && break; sleep 0.05; done
ctl() { "$SANDBOXCTL" --socket="$SOCK" "$@"; }

# start CONFIG KIND PORT: starts the server of KIND (redis|nginx) for
# CONFIG, listening on the host's 127.0.0.1:PORT; prints how to stop it.
start() {
  local c=$1 kind=$2 port=$3 inner cmd
  inner=$port
  [ "$c" = sandbox ] && inner=$([ "$kind" = redis ] && echo 6379 || echo 8080)
  if [ "$kind" = redis ]; then
    # The sandbox's server listens on all its addresses: pasta's
    # published port arrives on the sandbox's loopback either way.
    cmd=(redis-server --port "$inner" --bind "$([ "$c" = sandbox ] && echo 0.0.0.0 || echo 127.0.0.1)"
         --save '' --appendonly no --protected-mode no)
  else
    cmd=("$NGINX" -e stderr -c "$(nginx_conf "$inner")")
  fi
  case $c in
    native) "${cmd[@]}" >/dev/null 2>"$TMP/$c-$kind.err" & echo "pid $!" ;;
    sandbox) echo "id $(ctl run -d -p "127.0.0.1:$port:$inner" -v "$TMP:$TMP:ro" -- "${cmd[@]}")" ;;
    host) echo "id $(ctl run -d --network=host -v "$TMP:$TMP:ro" -- "${cmd[@]}")" ;;
    runsc)
      local b=$TMP/bundle-$kind
      mkdir -p "$b"
      (cd "$b" && rm -f config.json && "$RUNSC" spec -- "${cmd[@]}") || return
      python3 - "$b/config.json" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
c["root"] = {"path": "/", "readonly": False}  # --overlay: writes stay in memory
c["process"]["terminal"] = False
c["linux"]["namespaces"] = [n for n in c["linux"]["namespaces"] if n["type"] != "network"]
json.dump(c, open(sys.argv[1], "w"))
EOF
      "$RUNSC" --root="$TMP/runsc" --platform=ptrace --network=host --ignore-cgroups --overlay \
        run --bundle "$b" "bench-$kind-$$" >/dev/null 2>"$TMP/$c-$kind.err" &
      echo "runsc $! bench-$kind-$$" ;;
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
configs=(native sandbox host runsc)
i=0
for c in "${configs[@]}"; do
  rport=$((26379 + i)); hport=$((28080 + i)); i=$((i + 1))
  read -r how what <<<"$(start "$c" redis "$rport")"
  if wait_redis "$rport"; then
    out=$(redis-benchmark -h 127.0.0.1 -p "$rport" -t set,get -n "$REDIS_N" -c 50 -q 2>/dev/null | tr '\r' '\n')
    res[$c,set]=$(grep -o 'SET: [0-9.]*' <<<"$out" | awk '{print $2}' | tail -1)
    res[$c,get]=$(grep -o 'GET: [0-9.]*' <<<"$out" | awk '{print $2}' | tail -1)
  else
    echo "note: $c: redis did not answer" >&2
  fi
  stop "$how" "$what"
  read -r how what <<<"$(start "$c" nginx "$hport")"
  if wait_http "$hport"; then
    for conns in 1 100; do
      threads=$([ "$conns" = 1 ] && echo 1 || echo 2)
      res[$c,c$conns]=$(wrk -t"$threads" -c"$conns" -d"${WRK_SECONDS}s" "http://127.0.0.1:$hport/10k.bin" 2>/dev/null |
        awk '/Requests\/sec/ {print $2}')
    done
  else
    echo "note: $c: nginx did not answer" >&2
  fi
  stop "$how" "$what"
done

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a ~ /^[0-9.]+$/ && b ~ /^[0-9.]+$/ && b > 0) printf "%.2f", a / b; else print "n/a" }'; }
echo
echo "| requests/s (ratio to native) | native | sandboxd, sandbox mode (-p, pasta) | sandboxd, host mode | runsc ptrace, host network |"
echo "|---|---|---|---|---|"
for row in "set:redis-benchmark SET (50 conns)" "get:redis-benchmark GET (50 conns)" \
           "c1:nginx 10 KiB, wrk 1 conn" "c100:nginx 10 KiB, wrk 100 conns"; do
  k=${row%%:*}
  line="| ${row#*:} | ${res[native,$k]:-fail}"
  for c in sandbox host runsc; do
    v=${res[$c,$k]:-fail}
    line="$line | $v ($(ratio "$v" "${res[native,$k]:-}"))"
  done
  echo "$line |"
done
echo
echo "# load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
