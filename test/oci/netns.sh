# netns.sh, sourced by the OCI suites (after lib.sh): a network namespace
# of the test's own, as CNI gives a pod one, with a TCP server on its
# loopback that the host's loopback does not have.
#
# netns_up NAME PORT: `ip netns add NAME` (removed at exit, the server
# stopped first), loopback up, and a server on 127.0.0.1:PORT in it that
# answers every connection with "from-netns NAME"; sets NETNS_PATH.
netns_up() {
  local name=$1 port=$2
  ip netns add "$name" || return 1
  on_exit "ip netns delete $name 2>/dev/null"
  ip netns exec "$name" ip link set lo up || return 1
  ip netns exec "$name" python3 -c '
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(8)
while True:
    c, _ = s.accept()
    c.sendall(("from-netns %s\n" % sys.argv[2]).encode())
    c.close()
' "$port" "$name" &
  local server=$!
  on_exit "stop_pid $server"
  for _ in $(seq 1 50); do
    ip netns exec "$name" python3 -c '
import socket, sys
socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=1).close()
' "$port" 2>/dev/null && break
    sleep 0.1
  done
  NETNS_PATH=/var/run/netns/$name
}
