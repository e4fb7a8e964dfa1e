#!/usr/bin/env bash
# daemon_connections_test.sh SANDBOXD SANDBOXCTL SENTRY
#
# sandboxd cannot be wedged by connections: one process opens far more
# unix socket connections than the daemon allows (idle ones that never
# send anything), and while they are held
#   - sandboxd is alive, holds no more of them than its limits, and its
#     memory stays bounded
#   - `sandboxctl ps` and a run work for another client (another uid)
# and once they are released, `sandboxctl ps` works for the flooding uid
# too. Then two uids flood at once: the total stays within
# --max-connections. Idle connections are closed after
# --connection-idle-timeout.
# Exits 77 (CTest: skipped) until the binaries exist.
set -u
# shellcheck source=test/lib.sh
. "$(dirname "$0")/lib.sh"
usage_unless [ $# -eq 3 ] -- "SANDBOXD SANDBOXCTL SENTRY"
require_built "$@"
SANDBOXD=$(readlink -f "$1")
SANDBOXCTL=$(readlink -f "$2")
SENTRY=$(readlink -f "$3")
[ "$(id -u)" = 0 ] || skip "needs root (a second uid connects)"
command -v setpriv >/dev/null || skip "needs setpriv (util-linux)"
command -v ss >/dev/null || skip "needs ss (iproute2)"
[ -x /usr/bin/python3 ] || skip "needs /usr/bin/python3"
# Under /tmp: the other uid must reach the socket (a test runner's TMPDIR
# may sit below directories only root can enter).
TMPDIR=/tmp make_tmp daemon_connections_test
CHECK_OUT_BYTES=400
IN=/dev/null
# The other client: nobody, who may enter $tmp and use the socket.
OTHER=(setpriv --reuid=65534 --regid=65534 --clear-groups)
chmod 0755 "$tmp"
"${OTHER[@]}" test -x "$tmp" || skip "uid 65534 cannot enter $tmp"
mkdir "$tmp/nobody" && chown 65534:65534 "$tmp/nobody"

SOCK=$tmp/sandboxd.sock
PER_CLIENT=32
TOTAL=48
FLOOD=3000
IDLE=6
# RSS (KiB) the daemon may grow by while flooded.
RSS_GROWTH_KIB=$((16 * 1024))
start_bg "$tmp/daemon.log" "$SANDBOXD" --sentry="$SENTRY" --socket="$SOCK" \
  --state-dir="$tmp/state" --pool-size=1 --cgroup-parent="conn-test-$$" \
  --default-rootfs=/ --shutdown-kill --max-connections=$TOTAL \
  --max-connections-per-client=$PER_CLIENT --connection-idle-timeout=$IDLE
daemon=$bg_pid
if ! wait_for_daemon "$SANDBOXCTL" "$SOCK"; then
  echo "not ok - sandboxd did not start"
  cat "$tmp/daemon.log"
  exit 1
fi
chmod 0666 "$SOCK"

rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$daemon/status"; }
# The daemon's connected sockets on $SOCK: the connections it holds.
held() {
  ss -xpH | grep -F "pid=$daemon," | grep -cF "$SOCK "
}

# flood N READY RELEASE: opens N connections that never send anything
# (raising its own descriptor limit), touches READY, holds them until
# RELEASE exists, then closes them all.
cat >"$tmp/flood.py" <<'PY'
import os, resource, socket, sys, time
n, ready, release, path = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
held, failed = [], 0
for _ in range(n):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        held.append(s)
    except OSError:
        failed += 1
        s.close()
open(ready, "w").write("%d %d\n" % (len(held), failed))
while not os.path.exists(release):
    time.sleep(0.05)
for s in held:
    s.close()
PY
wait_file() {
  for _ in $(seq 1 600); do [ -e "$1" ] && return 0; sleep 0.05; done
  return 1
}

baseline_rss=$(rss_kib)

# One uid (root) floods.
/usr/bin/python3 "$tmp/flood.py" $FLOOD "$tmp/ready1" "$tmp/release1" "$SOCK" &
flooder=$!
on_exit "touch $tmp/release1; stop_pid $flooder"
wait_file "$tmp/ready1"
check "the flood connected" test -e "$tmp/ready1"
sleep 1  # the accept loop works through the backlog
check "sandboxd alive while flooded" kill -0 "$daemon"
held=$(held)
check "connections held while flooded: $held <= $PER_CLIENT" ge "$PER_CLIENT" "$held"
capture 30 "${OTHER[@]}" "$SANDBOXCTL" --socket="$SOCK" ps
check "ps from another uid while flooded" eq "$status" 0
capture 60 "${OTHER[@]}" "$SANDBOXCTL" --socket="$SOCK" run --rm -- /bin/echo served
check "run from another uid while flooded" contains "$tmp/out" "served"
rss=$(rss_kib)
check "RSS while flooded: ${rss} KiB (baseline ${baseline_rss})" \
  ge $((baseline_rss + RSS_GROWTH_KIB)) "$rss"
check "sandboxd logs the refusals" contains "$tmp/daemon.log" "refusing connections of uid 0"

touch "$tmp/release1"
wait "$flooder"
capture 30 "$SANDBOXCTL" --socket="$SOCK" ps
check "ps from the flooding uid once released" eq "$status" 0
check "sandboxd alive after the flood" kill -0 "$daemon"

# Two uids flood: the total stays within --max-connections.
/usr/bin/python3 "$tmp/flood.py" $FLOOD "$tmp/ready2" "$tmp/release2" "$SOCK" &
f1=$!
"${OTHER[@]}" /usr/bin/python3 "$tmp/flood.py" $FLOOD "$tmp/nobody/ready" \
  "$tmp/nobody/release" "$SOCK" &
f2=$!
on_exit "touch $tmp/release2 $tmp/nobody/release; stop_pid $f1; stop_pid $f2"
wait_file "$tmp/ready2"
wait_file "$tmp/nobody/ready"
sleep 1
held=$(held)
check "two floods: $held held <= $TOTAL in all" ge "$TOTAL" "$held"
check "two floods: the second uid got its share" ge "$held" $((PER_CLIENT + 1))
check "sandboxd alive under two floods" kill -0 "$daemon"
touch "$tmp/release2" "$tmp/nobody/release"
wait "$f1" "$f2"
capture 30 "$SANDBOXCTL" --socket="$SOCK" run --rm -- /bin/echo after
check "run after both floods" contains "$tmp/out" "after"
rss=$(rss_kib)
check "RSS after the floods: ${rss} KiB (baseline ${baseline_rss})" \
  ge $((baseline_rss + RSS_GROWTH_KIB)) "$rss"

# Connections that never send anything are closed after
# --connection-idle-timeout (the client still holds its end).
/usr/bin/python3 "$tmp/flood.py" 10 "$tmp/ready4" "$tmp/release4" "$SOCK" &
f4=$!
on_exit "touch $tmp/release4; stop_pid $f4"
wait_file "$tmp/ready4"
sleep 0.5
check "idle connections held at first" ge "$(held)" 10
sleep $((IDLE + 2))
check "idle connections closed after --connection-idle-timeout=$IDLE" \
  eq "$(held)" 0
touch "$tmp/release4"
wait "$f4"

passed
