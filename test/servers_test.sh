#!/usr/bin/env bash
# Real servers in sandboxd's sandboxes, reached from the host through
# published ports (NETWORK_MODE_SANDBOX: pasta, sentry/socket/README.md
# "The sandbox mode"), inside a user, network and mount namespace this test
# makes (unshare -Urnm) that plays the host's part, with a veth "uplink"
# (10.9.0.2/24, default route via 10.9.0.1; fd00:9::2/64 via fd00:9::1)
# for pasta to copy:
#   - python3 -m http.server, nginx (a file from a -v bind mount) and
#     redis-server, each in a sandbox with -p, fetched with curl and
#     redis-cli from the host and compared with what was put there;
#   - ping -c1 127.0.0.1 works in the none and sandbox modes;
#   - a client in the sandbox reaches a server on the host's loopback at
#     the gateway address, a server on another host address (outbound),
#     and not the host's loopback through its own 127.0.0.1;
#   - /etc/resolv.conf and /etc/hosts follow the mode (the host's loopback
#     name server left out);
#   - a published port in use on the host, and -p with --network=none,
#     are clear errors at create;
#   - removing a sandbox ends its pasta and frees its ports, and so does
#     its Sentry's death;
#   - a port published on the host's ::1 (-p [::1]:HOSTPORT:PORT);
#   - checkpoint and restore: a restore publishes the image's ports again
#     (refused while the original holds them), -p on restore gives a copy
#     ports of its own, --network=none none;
#   - kill -9 of sandboxd: the sandbox serves on through its published
#     port, and the restarted daemon's rm ends its pasta.
# Exits 77 (CTest: skipped) without user namespaces, pasta (Debian's
# passt), nginx, redis-server/redis-cli or curl.
#
# usage: servers_test.sh SANDBOXD SANDBOXCTL SENTRY
set -u
# shellcheck source=test/lib.sh
. "$(dirname "$0")/lib.sh"
usage_unless [ $# -eq 3 ] -- "SANDBOXD SANDBOXCTL SENTRY"
require_built "$@"
SANDBOXD=$(readlink -f "$1")
SANDBOXCTL=$(readlink -f "$2")
SENTRY=$(readlink -f "$3")
PATH=$PATH:/usr/sbin:/sbin
PY=/usr/bin/python3
for p in pasta nginx redis-server redis-cli curl; do
  command -v "$p" >/dev/null || skip "no $p (tools/install_deps.sh installs it)"
done
[ -x "$PY" ] || skip "no /usr/bin/python3"
if [ -z "${SBX_SERVERS_TEST_NS:-}" ]; then
  unshare -Urnm true 2>/dev/null || skip "unshare -Urnm is refused here"
  exec unshare -Urnm env SBX_SERVERS_TEST_NS=1 "$0" "$@"
fi
ip link set lo up || skip "cannot bring lo up in the test's namespace"
ip link add sbx-up type veth peer name sbx-peer 2>/dev/null ||
  skip "cannot make a veth pair in the test's namespace"
ip link set sbx-peer up
ip addr add 10.9.0.2/24 dev sbx-up
ip link set sbx-up up
ip route add default via 10.9.0.1
# IPv6 on the uplink too: pasta turns IPv6 on only where the host has an
# IPv6 route to copy, and a port on the host's ::1 needs it.
ip -6 addr add fd00:9::2/64 dev sbx-up nodad 2>/dev/null &&
  ip -6 route add default via fd00:9::1 2>/dev/null
# "Another host": an address of the test's namespace that is not the
# uplink's (which pasta gives the sandbox too).
ip addr add 10.9.1.1/32 dev lo
make_tmp servers_test "${KEEP:-0}"
# The host's resolver: one loopback name server (as systemd-resolved's),
# which the sandbox cannot reach, and one it can.
printf 'nameserver 127.0.0.53\nnameserver 192.0.2.53\nsearch example.test\n' >"$tmp/resolv.conf"
mount --bind "$tmp/resolv.conf" /etc/resolv.conf || skip "cannot bind-mount /etc/resolv.conf"
SOCK=$tmp/sandboxd.sock
CHECK_OUT_BYTES=600
ctl() { capture 120 "$SANDBOXCTL" --socket="$SOCK" "$@"; }

platforms_here "$SENTRY"
start_bg "$tmp/daemon.log" "$SANDBOXD" --sentry="$SENTRY" --socket="$SOCK" \
  --state-dir="$tmp/state" --pool-size=1 --platforms=systrap --no-cgroups \
  --default-rootfs=/ --shutdown-kill
daemon_pid=$bg_pid
wait_for_daemon "$SANDBOXCTL" "$SOCK"
check "sandboxd is up" eq "$?" 0

# pasta processes of this test's namespace that forward host port $1 on
# address $2 (default 127.0.0.1; other runs, in namespaces of their own,
# may have theirs).
pastas() {
  local pid n=0 own
  own=$(readlink /proc/self/ns/net)
  for pid in $(ps -eo pid,args | awk -v p="${2:-127.0.0.1}/$1:" '$2 == "pasta" && index($0, p) { print $1 }'); do
    [ "$(readlink "/proc/$pid/ns/net" 2>/dev/null)" = "$own" ] && n=$((n + 1))
  done
  echo "$n"
}
# fetch URL: curl with retries while the sandbox's server starts.
fetch() {
  local _
  for _ in $(seq 1 60); do
    curl -sf --max-time 2 -o "$tmp/out" "$1" 2>"$tmp/err" && return 0
    sleep 0.25
  done
  return 1
}

# A server on the host's loopback and one on "another host".
start_bg "$tmp/host_server.err" "$PY" -c '
import socket, sys, threading
def serve(addr, word):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, 17000))
    s.listen(8)
    while True:
        c, _ = s.accept()
        c.sendall(word)
        c.close()
threading.Thread(target=serve, args=("10.9.1.1", b"outside\n"), daemon=True).start()
serve("127.0.0.1", b"host loopback\n")
'
client='
import errno, socket, sys
c = socket.socket()
c.settimeout(10)
try:
    c.connect((sys.argv[1], 17000))
    print(c.recv(64).decode().strip())
except OSError as e:
    print(errno.errorcode.get(e.errno, e.errno))
'
sleep 0.3

# --- the sandbox mode, without published ports -----------------------------
ctl run --rm --network=sandbox -- "$PY" -c "$client" 10.9.0.1
check "sandbox: the host's loopback server at the gateway address" \
  eq "$(cat "$tmp/out")" "host loopback"
ctl run --rm --network=sandbox -- "$PY" -c "$client" 10.9.1.1
check "sandbox: outbound, a server on another address" eq "$(cat "$tmp/out")" "outside"
ctl run --rm --network=sandbox -- "$PY" -c "$client" 127.0.0.1
check "sandbox: the sandbox's 127.0.0.1 is its own, not the host's" \
  eq "$(cat "$tmp/out")" "ECONNREFUSED"
ctl run --rm --network=sandbox -- "$PY" -c '
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.connect(("10.9.1.1", 9))
print(s.getsockname()[0])
'
check "sandbox: the sandbox has the uplink's address" eq "$(cat "$tmp/out")" "10.9.0.2"
ctl run --rm --network=none -- "$PY" -c "$client" 10.9.1.1
check "none: no route out" eq "$(cat "$tmp/out")" "ENETUNREACH"
# ping over ping sockets in the pool's Sentries' namespaces.
for mode in none sandbox; do
  ctl run --rm --network=$mode -- /usr/bin/ping -c1 -W5 127.0.0.1
  check "$mode: ping -c1 127.0.0.1 ($(head -c 200 "$tmp/err"))" \
    eval '[ "$status" = 0 ] && grep -q "1 received" "$tmp/out"'
done

ctl run --rm --network=sandbox --hostname=web1 -- /bin/cat /etc/resolv.conf /etc/hosts
check "sandbox: resolv.conf has the host's name server" contains "$tmp/out" "^nameserver 192.0.2.53$"
check "sandbox: ... not its loopback one" not_contains "$tmp/out" "127.0.0.53"
check "sandbox: ... and its search list" contains "$tmp/out" "^search example.test$"
check "sandbox: hosts has the host name" grep -qP '^127\.0\.1\.1\tweb1$' "$tmp/out"
ctl run --rm -- /bin/cat /etc/resolv.conf
check "none: resolv.conf names no name server" \
  eval '[ "$status" = 0 ] && ! grep -q nameserver "$tmp/out"'
ctl run --rm --network=host -- /bin/cat /etc/resolv.conf
check "host: resolv.conf is the host's" cmp -s "$tmp/out" /etc/resolv.conf

# --- python3 -m http.server ------------------------------------------------
mkdir -p "$tmp/www"
chmod 755 "$tmp/www"
echo "hello from $$ through a published port" >"$tmp/www/hello.txt"
head -c 10240 /dev/urandom | base64 -w 0 >"$tmp/www/10k.txt"
chmod 644 "$tmp/www"/*
ctl run -d -p 18080:8000 -v "$tmp/www:/www:ro" -- "$PY" -m http.server 8000 -d /www
py_id=$(cat "$tmp/out")
check "http.server: created with -p 18080:8000 ($(head -c 200 "$tmp/err"))" eq "$status" 0
check "http.server: one pasta for it" eq "$(pastas 18080)" 1
fetch http://127.0.0.1:18080/hello.txt
check "http.server: curl from the host gets the file" cmp -s "$tmp/out" "$tmp/www/hello.txt"
fetch http://127.0.0.1:18080/10k.txt
check "http.server: ... and a 10 KiB one" cmp -s "$tmp/out" "$tmp/www/10k.txt"

# --- a published port in use, -p with none --------------------------------
ctl run --rm -p 18080:80 -- /bin/true
check "a host port in use: exit 125" eq "$status" 125
check "... says which and why" contains "$tmp/err" "127.0.0.1:18080:80/tcp: port 18080 on 127.0.0.1 is already in use"
ctl run --rm --network=none -p 18085:80 -- /bin/true
check "-p with --network=none: exit 125" eq "$status" 125
check "... names the field" contains "$tmp/err" "spec.ports: publishing needs the sandbox network mode, not none"
ctl run --rm -p 70000:80 -- /bin/true
check "-p 70000:80: a usage error" eq "$status" 125

ctl rm -f "$py_id"
check "http.server: removed" eq "$status" 0
check "http.server: its pasta is gone" eq "$(pastas 18080)" 0
check "http.server: the host port is free again" "$PY" -c '
import socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # curl left TIME_WAITs
s.bind(("127.0.0.1", 18080))
s.listen(1)'

# --- IPv6: a port published on the host's ::1 -------------------------------
if [ -e /proc/sys/net/ipv6 ] && "$PY" -c 'import socket; socket.socket(socket.AF_INET6).bind(("::1", 0))' 2>/dev/null; then
  ctl run -d -p '[::1]:18086:8000' -v "$tmp/www:/www:ro" -- "$PY" -m http.server 8000 --bind :: -d /www
  v6_id=$(cat "$tmp/out")
  check "ipv6: created with -p [::1]:18086:8000 ($(head -c 200 "$tmp/err"))" eq "$status" 0
  check "ipv6: one pasta for it" eq "$(pastas 18086 ::1)" 1
  fetch 'http://[::1]:18086/hello.txt'
  check "ipv6: curl from the host's ::1 gets the file" cmp -s "$tmp/out" "$tmp/www/hello.txt"
  check "ipv6: ... and the host's 127.0.0.1:18086 is not published" \
    eval '! curl -sf --max-time 2 -o /dev/null http://127.0.0.1:18086/hello.txt'
  ctl rm -f "$v6_id"
  check "ipv6: removed, its pasta gone" eq "$(pastas 18086 ::1)" 0
else
  check "ipv6: the test's namespace has ::1 (IPv6 disabled here?)" false
fi

# --- checkpoint and restore: the ports come back -----------------------------
# (daemon/README.md, "Restore and the network"): a restore publishes the
# image's ports again, and its restored listener serves on them; ports
# given to restore replace them; a recorded port still held on the host
# is refused as at create.
ctl run -d -p 18087:8000 -v "$tmp/www:/www:ro" -- "$PY" -m http.server 8000 -d /www
ck_id=$(cat "$tmp/out")
fetch http://127.0.0.1:18087/hello.txt
check "restore: the sandbox serves on 18087" cmp -s "$tmp/out" "$tmp/www/hello.txt"
ctl checkpoint "$ck_id" --image="$tmp/img" --leave-running
check "restore: checkpointed, left running ($(head -c 200 "$tmp/err"))" eq "$status" 0
ctl restore -d --image="$tmp/img"
check "restore: while the original holds 18087: exit 125" eq "$status" 125
check "... says which port" contains "$tmp/err" "port 18087 on 127.0.0.1 is already in use"
ctl restore -d --image="$tmp/img" -p 18088:8000
copy_id=$(cat "$tmp/out")
check "restore -p 18088:8000: a copy on a port of its own ($(head -c 200 "$tmp/err"))" eq "$status" 0
fetch http://127.0.0.1:18088/hello.txt
check "restore -p: the copy's restored listener serves on 18088" cmp -s "$tmp/out" "$tmp/www/hello.txt"
check "restore -p: 18087 has the original's pasta only" eq "$(pastas 18087)" 1
ctl rm -f "$ck_id"
check "restore: the original removed, its pasta gone" eq "$(pastas 18087)" 0
ctl restore -d --image="$tmp/img"
re2_id=$(cat "$tmp/out")
check "restore: the image's port once free ($(head -c 200 "$tmp/err"))" eq "$status" 0
fetch http://127.0.0.1:18087/hello.txt
check "restore: the restored listener serves on the image's 18087" cmp -s "$tmp/out" "$tmp/www/hello.txt"
ctl restore -d --image="$tmp/img" --network=none
none_id=$(cat "$tmp/out")
check "restore --network=none: no ports ($(head -c 200 "$tmp/err"))" eq "$status" 0
ctl rm -f "$copy_id" "$re2_id" "$none_id"
check "restore: the copies removed" eq "$status" 0
check "restore: their pastas gone" eq "$(( $(pastas 18087) + $(pastas 18088) ))" 0

# --- a Sentry that dies: its pasta ends too ---------------------------------
ctl run -d -p 18082:8000 -v "$tmp/www:/www:ro" -- "$PY" -m http.server 8000 -d /www
crash_id=$(cat "$tmp/out")
fetch http://127.0.0.1:18082/hello.txt
check "crash: the sandbox serves" cmp -s "$tmp/out" "$tmp/www/hello.txt"
ctl inspect "$crash_id"
sentry_pid=$("$PY" -c 'import json, sys; i = json.load(open(sys.argv[1])); print((i.get("sentry_pids") or i.get("sentryPids"))[0])' "$tmp/out" 2>/dev/null)
check "crash: inspect names the Sentry (${sentry_pid:-none})" ge "${sentry_pid:-0}" 1
[ -n "$sentry_pid" ] && kill -KILL "$sentry_pid"
for _ in $(seq 1 100); do [ "$(pastas 18082)" = 0 ] && break; sleep 0.05; done
check "crash: the killed Sentry's pasta is gone" eq "$(pastas 18082)" 0
ctl rm -f "$crash_id"
check "crash: removed" eq "$status" 0
check "crash: the daemon lives on" kill -0 "$daemon_pid"
if ! kill -0 "$daemon_pid" 2>/dev/null; then
  wait "$daemon_pid"
  echo "# sandboxd ended with status $?; its log ends:"
  tail -5 "$tmp/daemon.log" | sed 's/^/#   /'
fi

# --- nginx, a file from a bind mount ---------------------------------------
# A master and two workers (nginx's default master_process on): the master
# sets FIOASYNC and F_SETOWN on its channel socketpairs to the workers
# (sentry/fs/README.md, "Signal-driven I/O").
cat >"$tmp/nginx.conf" <<'EOF'
daemon off;
master_process on;
worker_processes 2;
pid /tmp/nginx.pid;
error_log stderr;
events { worker_connections 64; }
http {
  access_log off;
  client_body_temp_path /tmp;
  proxy_temp_path /tmp;
  fastcgi_temp_path /tmp;
  uwsgi_temp_path /tmp;
  scgi_temp_path /tmp;
  server {
    listen 8080;
    root /www;
  }
}
EOF
chmod 644 "$tmp/nginx.conf"
ctl run -d -p 18081:8080 -v "$tmp/www:/www:ro" -v "$tmp/nginx.conf:/etc/nginx/sbx.conf:ro" \
  -- /usr/sbin/nginx -e stderr -c /etc/nginx/sbx.conf
ngx_id=$(cat "$tmp/out")
check "nginx: created with -p 18081:8080 ($(head -c 200 "$tmp/err"))" eq "$status" 0
fetch http://127.0.0.1:18081/hello.txt
check "nginx: curl from the host gets the bind-mounted file" cmp -s "$tmp/out" "$tmp/www/hello.txt"
fetch http://127.0.0.1:18081/10k.txt
check "nginx: ... and a 10 KiB one" cmp -s "$tmp/out" "$tmp/www/10k.txt"
ok=0
for i in $(seq 1 20); do
  curl -sf --max-time 5 http://127.0.0.1:18081/hello.txt | cmp -s - "$tmp/www/hello.txt" && ok=$((ok + 1))
done
check "nginx: 20 requests in a row, 20 right ($ok)" eq "$ok" 20
ctl rm -f "$ngx_id"
check "nginx: removed, its pasta gone" eq "$(pastas 18081)" 0

# --- redis-server ----------------------------------------------------------
ctl run -d -p 16379:6379 -- redis-server --port 6379 --bind 0.0.0.0 --save '' \
  --appendonly no --protected-mode no
rds_id=$(cat "$tmp/out")
check "redis: created with -p 16379:6379 ($(head -c 200 "$tmp/err"))" eq "$status" 0
for _ in $(seq 1 120); do
  [ "$(redis-cli -p 16379 PING 2>/dev/null)" = PONG ] && break
  sleep 0.25
done
value="sandbox-$$-$RANDOM"
capture 20 redis-cli -p 16379 SET key1 "$value"
check "redis: SET from the host" eq "$(cat "$tmp/out")" "OK"
capture 20 redis-cli -p 16379 GET key1
check "redis: GET from the host" eq "$(cat "$tmp/out")" "$value"
ctl exec "$rds_id" -- redis-cli -p 6379 GET key1
check "redis: the same value inside the sandbox" eq "$(cat "$tmp/out")" "$value"
capture 20 redis-cli -p 16379 INCRBY counter 41
capture 20 redis-cli -p 16379 INCR counter
check "redis: INCR" eq "$(cat "$tmp/out")" "42"
ctl rm -f "$rds_id"
check "redis: removed, its pasta gone" eq "$(pastas 16379)" 0

# --- a restart of the daemon ---------------------------------------------------
# kill -9 of sandboxd leaves the sandbox and its pasta serving; the
# restarted daemon re-adopts the sandbox, and removing it then ends its
# pasta too.
ctl run -d -p 18083:8000 -v "$tmp/www:/www:ro" -- "$PY" -m http.server 8000 -d /www
re_id=$(cat "$tmp/out")
check "restart: created with -p 18083:8000" eq "$status" 0
fetch http://127.0.0.1:18083/hello.txt
check "restart: served before" cmp -s "$tmp/out" "$tmp/www/hello.txt"
kill -9 "$daemon_pid"
wait "$daemon_pid" 2>/dev/null
start_bg "$tmp/daemon2.log" "$SANDBOXD" --sentry="$SENTRY" --socket="$SOCK" \
  --state-dir="$tmp/state" --pool-size=1 --platforms=systrap --no-cgroups \
  --default-rootfs=/ --shutdown-kill
wait_for_daemon "$SANDBOXCTL" "$SOCK"
check "restart: the daemon is up again" eq "$?" 0
fetch http://127.0.0.1:18083/hello.txt
check "restart: still served through the published port" cmp -s "$tmp/out" "$tmp/www/hello.txt"
ctl rm -f "$re_id"
check "restart: removed by the new daemon ($(head -c 200 "$tmp/err"))" eq "$status" 0
for _ in $(seq 1 40); do [ "$(pastas 18083)" = 0 ] && break; sleep 0.05; done
check "restart: removed, its pasta gone" eq "$(pastas 18083)" 0
passed
