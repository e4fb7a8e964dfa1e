#!/usr/bin/env bash
# sentry run's network modes, inside a user and network namespace this test
# makes (unshare -Urn, loopback up), which plays the host's part:
#   - --network=none (the default): the sandbox has a namespace of its own
#     with loopback only: a server on the "host's" 127.0.0.1 is not
#     reachable (ECONNREFUSED); /etc/hosts has the localhost entries and
#     the sandbox's host name, /etc/resolv.conf no name server; ping -c1
#     127.0.0.1 and ::1 work (ping sockets);
#   - --network=host: the caller's namespace: that server answers, and a
#     server in the sandbox is reached from outside it; /etc/hosts and
#     /etc/resolv.conf are the host's;
#   - where no network namespace can be made (user.max_net_namespaces=0),
#     sentry run says so and the sandbox's sockets work in the caller's;
#   - --network=sandbox (pasta, given a veth "uplink" in the test's
#     namespace to copy): the host's loopback server answers at the
#     gateway address and not at the sandbox's own 127.0.0.1; resolv.conf
#     names the host's name server; ping -c1 127.0.0.1 works; -p publishes a server in the sandbox
#     to the host; pasta is gone when the sandbox ends; -p with
#     --network=none and a host port in use are usage errors (125);
#   - --network=bogus is a usage error (125).
# Exits 77 (CTest: skipped) without the sentry or user namespaces.
#
# usage: network_test.sh SENTRY
set -u
# shellcheck source=test/lib.sh
. "$(dirname "$0")/lib.sh"
usage_unless [ $# -eq 1 ] -- "SENTRY"
SENTRY=$(readlink -f "$1")
require_sentry "$SENTRY"
PY=/usr/bin/python3
[ -x "$PY" ] || skip "no /usr/bin/python3"
if [ -z "${SBX_NETWORK_TEST_NS:-}" ]; then
  unshare -Urn true 2>/dev/null || skip "unshare -Urn is refused here"
  exec unshare -Urn env SBX_NETWORK_TEST_NS=1 "$0" "$@"
fi
PATH=$PATH:/usr/sbin:/sbin
ip link set lo up || skip "cannot bring lo up in the test's namespace"
make_tmp network_test

# A server on the "host's" loopback: says "host server" to each client.
start_bg "$tmp/server.err" "$PY" -c '
import socket, sys
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(8)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(s.getsockname()[1]))
import os
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
while True:
    c, _ = s.accept()
    c.sendall(b"host server\n")
    c.close()
' "$tmp/port"
for _ in $(seq 1 100); do [ -s "$tmp/port" ] && break; sleep 0.05; done
port=$(cat "$tmp/port" 2>/dev/null)
check "the host's server is up (port ${port:-?})" ge "${port:-0}" 1

client='
import errno, socket, sys
c = socket.socket()
c.settimeout(10)
try:
    c.connect(("127.0.0.1", int(sys.argv[1])))
    print(c.recv(64).decode().strip())
except OSError as e:
    print(errno.errorcode.get(e.errno, e.errno))
'

# none
capture 60 "$SENTRY" run --rootfs=/ -- "$PY" -c "$client" "$port"
check "none: the host's server is not reachable ($(head -c 200 "$tmp/err"))" \
  eq "$(cat "$tmp/out")" "ECONNREFUSED"
capture 60 "$SENTRY" run --rootfs=/ --hostname=box1 -- /bin/cat /etc/hosts
check "none: /etc/hosts has localhost" grep -qP '^127\.0\.0\.1\tlocalhost$' "$tmp/out"
check "none: ... ::1" grep -qP '^::1\tlocalhost ' "$tmp/out"
check "none: ... and the host name" grep -qP '^127\.0\.1\.1\tbox1$' "$tmp/out"
capture 60 "$SENTRY" run --rootfs=/ -- /bin/cat /etc/resolv.conf
check "none: /etc/resolv.conf names no name server" \
  eval '[ "$status" = 0 ] && ! grep -q nameserver "$tmp/out"'
# ping over ping sockets (the Sentry has no CAP_NET_RAW): the namespace's
# ping_group_range lets the Sentry's group make them.
check "ping is installed (tools/install_deps.sh)" eval "[ -x /usr/bin/ping ]"
for a in 127.0.0.1 ::1; do
  capture 60 "$SENTRY" run --rootfs=/ -- /usr/bin/ping -c1 -W5 "$a"
  check "none: ping -c1 $a ($(head -c 200 "$tmp/err"))" \
    eval '[ "$status" = 0 ] && grep -q "1 received" "$tmp/out" && grep -q "ttl=64" "$tmp/out"'
  check "none: ... with no warning" eval '! grep -qi warn "$tmp/err"'
done

# host
capture 60 "$SENTRY" run --rootfs=/ --network=host -- "$PY" -c "$client" "$port"
check "host: the host's server answers ($(head -c 200 "$tmp/err"))" \
  eq "$(cat "$tmp/out")" "host server"
for f in hosts resolv.conf; do
  if [ -r "/etc/$f" ]; then
    capture 60 "$SENTRY" run --rootfs=/ --network=host -- /bin/cat "/etc/$f"
    check "host: /etc/$f is the host's" cmp -s "$tmp/out" "/etc/$f"
  fi
done
# A server in the sandbox, reached from outside it.
rm -f "$tmp/sport"
"$SENTRY" run --rootfs=/ --network=host -- "$PY" -c '
import socket, sys
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(1)
print(s.getsockname()[1], flush=True)
c, _ = s.accept()
c.sendall(b"sandbox server\n")
c.close()
' >"$tmp/sport" 2>"$tmp/sandbox_server.err" &
spid=$!
on_exit "stop_pid $spid"
for _ in $(seq 1 200); do [ -s "$tmp/sport" ] && break; sleep 0.05; done
sport=$(head -1 "$tmp/sport")
capture 30 "$PY" -c "$client" "${sport:-1}"
check "host: a server in the sandbox is reached from outside" \
  eq "$(cat "$tmp/out")" "sandbox server"
wait "$spid"
check "host: the sandbox's server exits 0" eq "$?" 0

# sandbox: pasta copies the uplink's address and route.
check "sandbox: pasta is installed (tools/install_deps.sh)" eval "command -v pasta >/dev/null"
ip link add sbx-up type veth peer name sbx-peer &&
  ip link set sbx-peer up && ip addr add 10.9.0.2/24 dev sbx-up &&
  ip link set sbx-up up && ip route add default via 10.9.0.1
check "sandbox: the test's namespace has an uplink" eq "$?" 0
client_at='
import errno, socket, sys
c = socket.socket()
c.settimeout(10)
try:
    c.connect((sys.argv[1], int(sys.argv[2])))
    print(c.recv(64).decode().strip())
except OSError as e:
    print(errno.errorcode.get(e.errno, e.errno))
'
capture 60 "$SENTRY" run --rootfs=/ --network=sandbox -- "$PY" -c "$client_at" 10.9.0.1 "$port"
check "sandbox: the host's loopback server at the gateway address ($(head -c 200 "$tmp/err"))" \
  eq "$(cat "$tmp/out")" "host server"
capture 60 "$SENTRY" run --rootfs=/ --network=sandbox -- "$PY" -c "$client_at" 127.0.0.1 "$port"
check "sandbox: ... not at the sandbox's own 127.0.0.1" eq "$(cat "$tmp/out")" "ECONNREFUSED"
capture 60 "$SENTRY" run --rootfs=/ --network=sandbox --hostname=box2 -- /bin/cat /etc/resolv.conf /etc/hosts
grep '^nameserver' /etc/resolv.conf | grep -v ' 127\.' | grep -v ' ::1' >"$tmp/want_ns"
grep '^nameserver' "$tmp/out" | grep -v '8\.8\.[48]\.[48]' >"$tmp/got_ns"
check "sandbox: resolv.conf names the host's non-loopback name servers" cmp -s "$tmp/want_ns" "$tmp/got_ns"
check "sandbox: ... and some name server" contains "$tmp/out" "^nameserver "
check "sandbox: hosts has the host name" grep -qP '^127\.0\.1\.1\tbox2$' "$tmp/out"
capture 60 "$SENTRY" run --rootfs=/ --network=sandbox -- /usr/bin/ping -c1 -W5 127.0.0.1
check "sandbox: ping -c1 127.0.0.1 ($(head -c 200 "$tmp/err"))" \
  eval '[ "$status" = 0 ] && grep -q "1 received" "$tmp/out"'
# A server in the sandbox, published on the host's 127.0.0.1:18180.
rm -f "$tmp/ready"
"$SENTRY" run --rootfs=/ -p 127.0.0.1:18180:8000 -- "$PY" -c '
import socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 8000))
s.listen(1)
print("ready", flush=True)
c, _ = s.accept()
c.sendall(b"published server\n")
c.close()
' >"$tmp/ready" 2>"$tmp/published.err" &
ppid_=$!
on_exit "stop_pid $ppid_"
for _ in $(seq 1 400); do [ -s "$tmp/ready" ] && break; sleep 0.05; done
pastas() { ps -eo args | grep -c "[p]asta.*127.0.0.1/18180:"; }
check "sandbox -p: one pasta for the sandbox" eq "$(pastas)" 1
capture 30 "$PY" -c "$client_at" 127.0.0.1 18180
check "sandbox -p: the sandbox's server is reached from the host ($(head -c 200 "$tmp/published.err"))" \
  eq "$(cat "$tmp/out")" "published server"
wait "$ppid_"
check "sandbox -p: the sandbox's server exits 0" eq "$?" 0
for _ in $(seq 1 40); do [ "$(pastas)" = 0 ] && break; sleep 0.05; done
check "sandbox -p: pasta is gone with the sandbox" eq "$(pastas)" 0
capture 30 "$SENTRY" run --rootfs=/ -p "127.0.0.1:$port:80" -- /bin/true
check "sandbox -p: a host port in use is a usage error" eq "$status" 125
check "sandbox -p: ... that says so" contains "$tmp/err" "port $port on 127.0.0.1 is already in use"
capture 30 "$SENTRY" run --rootfs=/ --network=none -p 18181:80 -- /bin/true
check "-p with --network=none: usage error" eq "$status" 125

# No network namespace can be made: the caller's, said on stderr.
capture 60 sh -c 'echo 0 >/proc/sys/user/max_net_namespaces && exec "$@"' sh \
  "$SENTRY" run --rootfs=/ -- "$PY" -c "$client" "$port"
check "fallback: the sandbox's sockets are in the caller's namespace" \
  eq "$(cat "$tmp/out")" "host server"
check "fallback: sentry run says so" contains "$tmp/err" \
  "no network namespace of its own"

capture 30 "$SENTRY" run --network=bogus -- /bin/true
check "--network=bogus: usage error" eq "$status" 125
passed
