#!/usr/bin/env bash
# sandboxctl_test.sh SANDBOXD SANDBOXCTL SENTRY
#
# sandboxctl against a real sandboxd (with that sentry) on
# a private socket, state directory and cgroup parent:
#   - no daemon: one line on stderr saying so and how to start it, exit 125
#   - run --rm: output, exit status (42; 139 for SIGSEGV), nothing left over
#   - run --rm of a missing program: 127 and one line on stderr
#   - run -i (stdin), SANDBOXD_SOCKET, run -t under a real pty (with
#     /dev/console the same terminal)
#   - create / start / wait / logs / ps (--json) / inspect / exec / kill / rm
#   - update --memory --pids-limit of a running sandbox: inspect, MemTotal,
#     fork's EAGAIN; its refusals (below the usage, unknown id, stopped)
#   - pause / unpause: the Sentry stopped on the host (T), PAUSED in
#     inspect and ps, exec refused meanwhile, the program running on after;
#     kill -s KILL and rm -f of a paused sandbox
#   - --systrap-patch=on|off: a Sentry started with it (pool miss), patching
# Exits 77 (CTest: skipped) until the binaries exist.
set -u
# shellcheck source=test/lib.sh
. "$(dirname "$0")/lib.sh"
usage_unless [ $# -eq 3 ] -- "SANDBOXD SANDBOXCTL SENTRY"
require_built "$@"
SANDBOXD=$(readlink -f "$1")
SANDBOXCTL=$(readlink -f "$2")
SENTRY=$(readlink -f "$3")
make_tmp sandboxctl_test
SOCK=$tmp/sandboxd.sock
CHECK_OUT_BYTES=400
PY=/usr/bin/python3

# ctl ARGS...: runs sandboxctl with stdin from $IN (default /dev/null);
# sets $status, $tmp/out, $tmp/err.
IN=/dev/null
ctl() { capture 120 "$SANDBOXCTL" --socket="$SOCK" "$@"; }

# sandboxctl is linked statically in both build lanes (a dynamic one spends
# milliseconds of every command in the loader).
file -L "$SANDBOXCTL" >"$tmp/out" 2>&1
status=$?
check "sandboxctl is statically linked" contains "$tmp/out" "statically linked"

# No daemon yet.
ctl run --rm -- /bin/true
check "no daemon: exit 125" eq "$status" 125
check "no daemon: exactly one line on stderr" eq "$(lines "$tmp/err")" 1
check "no daemon: says how to start it" contains "$tmp/err" "sandboxd --socket=$SOCK"

# TCP is served only with TLS and a bearer token: a self-signed certificate
# for 127.0.0.1 and a token file readable by its owner only.
tcp_args=()
if command -v openssl >/dev/null &&
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$tmp/key.pem" -out "$tmp/cert.pem" -days 1 -subj /CN=localhost \
    -addext subjectAltName=IP:127.0.0.1 2>"$tmp/openssl.log"; then
  (umask 077 && echo "t0ken-$$" >"$tmp/token" && echo "wrong" >"$tmp/bad-token")
  tcp_args=(--tcp=127.0.0.1:0 --tls-cert="$tmp/cert.pem" --tls-key="$tmp/key.pem"
    --token-file="$tmp/token")
fi
# Warm KVM Sentries too, where the kvm platform's probe passes.
platforms_here "$SENTRY"
start_bg "$tmp/daemon.log" "$SANDBOXD" --sentry="$SENTRY" --socket="$SOCK" --state-dir="$tmp/state" \
  --pool-size=1 --platforms="$platforms" --cgroup-parent="sandboxctl-test-$$" \
  --default-rootfs=/ --shutdown-kill "${tcp_args[@]}"
wait_for_daemon "$SANDBOXCTL" "$SOCK"

ctl run --rm -- /bin/echo hello world
check "run --rm echo: exit 0" eq "$status" 0
if [ "$platforms" = systrap,kvm ]; then
  ctl run --rm --platform=kvm -- /bin/sh -c 'echo on kvm; exit 3'
  check "run --rm --platform=kvm: exit status 3" eq "$status" 3
  check "run --rm --platform=kvm: output" eq "$(cat "$tmp/out")" "on kvm"
fi
ctl run --rm -- /bin/echo hello world
check "run --rm echo: exit 0" eq "$status" 0
check "run --rm echo: output" eq "$(cat "$tmp/out")" "hello world"

# --user: the program runs as that user of the sandbox, with Linux's checks.
ctl run --rm --user 33:33 -- /bin/sh -c 'id -u; id -g; cat /etc/shadow >/dev/null 2>&1; echo $?'
check "run --user 33:33: ids and a root-only file" eq "$(cat "$tmp/out")" "33
33
1"

ctl run --rm -- /bin/sh -c 'echo out; echo err >&2; exit 42'
check "run --rm: exit status 42" eq "$status" 42
check "run --rm: stdout" eq "$(cat "$tmp/out")" "out"
check "run --rm: stderr" eq "$(cat "$tmp/err")" "err"

ctl run --rm -- /bin/sh -c 'kill -SEGV $$'
check "run --rm: SIGSEGV gives 139" eq "$status" 139

ctl run --rm -- /nonexistent/program
check "run --rm missing program: exit 127" eq "$status" 127
check "run --rm missing program: one line on stderr" eq "$(lines "$tmp/err")" 1
check "run --rm missing program: nothing on stdout" eq "$(lines "$tmp/out")" 0

# --network=host: the sandbox's sockets are in the daemon's network
# namespace (a Sentry of the kind "+hostnet"); by default (none) in the
# Sentry's own, where a server on the daemon's loopback is not reachable.
rm -f "$tmp/port"
"$PY" -c '
import os, socket, sys
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(8)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(s.getsockname()[1]))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
while True:
    c, _ = s.accept()
    c.sendall(b"host server\n")
    c.close()
' "$tmp/port" 2>/dev/null &
server_pid=$!
on_exit "stop_pid $server_pid"
for _ in $(seq 1 100); do [ -s "$tmp/port" ] && break; sleep 0.05; done
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
ctl run --rm --network=host -- "$PY" -c "$client" "$(cat "$tmp/port")"
check "run --network=host: exit 0" eq "$status" 0
check "run --network=host: a server on the daemon's loopback answers" \
  eq "$(cat "$tmp/out")" "host server"
ctl run --rm -- "$PY" -c "$client" "$(cat "$tmp/port")"
check "run (network none): that server is not reachable" \
  eq "$(cat "$tmp/out")" "ECONNREFUSED"

seq 1 50000 >"$tmp/in"
IN=$tmp/in ctl run --rm -i -- /usr/bin/wc -l
check "run -i: stdin reaches the program" eq "$(tr -d ' ' <"$tmp/out")" 50000
IN=$tmp/in ctl run --rm -- /usr/bin/wc -l
check "run without -i: stdin is empty" eq "$(tr -d ' ' <"$tmp/out")" 0

SANDBOXD_SOCKET=$SOCK timeout 60 "$SANDBOXCTL" run --rm -- /bin/echo via-env >"$tmp/out" 2>"$tmp/err"
status=$?
check "SANDBOXD_SOCKET names the socket" eq "$(cat "$tmp/out")" "via-env"

ctl ps -aq
check "run --rm leaves no sandbox" eq "$(lines "$tmp/out")" 0

if [ ${#tcp_args[@]} -gt 0 ]; then
  port=$(sed -n 's/.* and tcp port \([0-9]*\).*/\1/p' "$tmp/daemon.log" | head -1)
  tcp() {
    timeout 60 "$SANDBOXCTL" --tcp="127.0.0.1:$port" --ca-cert="$tmp/cert.pem" "$@" \
      </dev/null >"$tmp/out" 2>"$tmp/err"
    status=$?
  }
  tcp --token-file="$tmp/token" run --rm -- /bin/echo over-tcp
  check "TCP with TLS and the token: runs" eq "$(cat "$tmp/out")" "over-tcp"
  tcp --token-file="$tmp/bad-token" run --rm -- /bin/echo over-tcp
  check "TCP with a wrong token: refused (125)" eq "$status" 125
  check "TCP with a wrong token: says why" contains "$tmp/err" "nauthenticated\|token"
fi

# Detached: create, start, wait, logs, ps, inspect, rm.
ctl create --name=job1 --label=team=a -- /bin/sh -c 'echo logged; echo logged-err >&2; exit 3'
check "create prints the id" eq "$(cat "$tmp/out")" "job1"
ctl ps -a --json
check "ps --json lists it as CREATED" contains "$tmp/out" '"state": "SANDBOX_STATE_CREATED"'
ctl start job1
check "start: exit 0" eq "$status" 0
ctl wait job1
check "wait: exits as the program did (3)" eq "$status" 3
ctl logs -f job1
check "logs: stdout kept" eq "$(cat "$tmp/out")" "logged"
check "logs: stderr kept" eq "$(cat "$tmp/err")" "logged-err"
ctl inspect job1
check "inspect: JSON with the exit code" contains "$tmp/out" '"code": 3'
ctl ps -a
check "ps: a header and one sandbox" eq "$(lines "$tmp/out")" 2
check "ps: state stopped" contains "$tmp/out" "stopped"
ctl rm job1
check "rm: exit 0" eq "$status" 0
ctl inspect job1
check "inspect after rm: error" eq "$status" 125
check "inspect after rm: one line" eq "$(lines "$tmp/err")" 1

# exec and kill in a running sandbox.
ctl run -d --name=svc -- /bin/sleep 600
check "run -d prints the id" eq "$(cat "$tmp/out")" "svc"
ctl exec svc -- /bin/sh -c 'echo in-sandbox; exit 4'
check "exec: output" eq "$(cat "$tmp/out")" "in-sandbox"
check "exec: exit status" eq "$status" 4
IN=$tmp/in ctl exec -i svc -- /usr/bin/tail -n 1
check "exec -i: stdin" eq "$(cat "$tmp/out")" "50000"
# update: the running sandbox's limits, seen by its programs and inspect.
ctl update --memory=96m --pids-limit=8 svc
check "update --memory --pids-limit: exit 0, the id" eval '[ "$status" = 0 ] && [ "$(cat "$tmp/out")" = svc ]'
ctl inspect svc
check "update: inspect shows the new limits" eval \
  'contains "$tmp/out" "\"memory_bytes\": \"100663296\"" && contains "$tmp/out" "\"pids\": \"8\""'
ctl exec svc -- /bin/sh -c 'head -1 /proc/meminfo; for i in 1 2 3 4 5 6 7 8 9 10; do sleep 3 & done; wait'
check "update: /proc/meminfo's MemTotal follows, fork beyond the pids limit fails" eval \
  'contains "$tmp/out" "^MemTotal: *98304 kB" && contains "$tmp/err" "[Cc]an.t fork\|Cannot fork"'
ctl exec svc -- /bin/sh -c 'dd if=/dev/zero of=/tmp/big bs=1M count=40 2>/dev/null'
ctl update --memory=20m svc
check "update: a memory limit below what the application uses is refused, saying so" eval \
  '[ "$status" = 125 ] && contains "$tmp/err" "the application uses"'
ctl update --pids-limit=5 no-such
check "update of an unknown sandbox: an error naming it" eval \
  '[ "$status" = 125 ] && contains "$tmp/err" "no-such"'
ctl update svc
check "update without a limit: an error naming the flags" eval \
  '[ "$status" = 125 ] && contains "$tmp/err" "pids-limit"'
ctl rm svc
check "rm of a running sandbox needs -f" eq "$status" 125
ctl kill -s TERM svc
check "kill -s TERM: exit 0" eq "$status" 0
ctl wait svc
check "wait after SIGTERM: 143" eq "$status" 143
ctl update --memory=64m svc
check "update of a stopped sandbox: refused, saying so" eval \
  '[ "$status" = 125 ] && contains "$tmp/err" "not running"'
ctl rm -f svc
check "rm -f: exit 0" eq "$status" 0

# pause / unpause: every host process of the sandbox stopped, then on.
ctl run -d --name=ctr -- /bin/sh -c 'while :; do echo x >>/tmp/n; sleep 0.1; done'
ctl pause ctr
check "pause: exit 0, the id" eval '[ "$status" = 0 ] && [ "$(cat "$tmp/out")" = ctr ]'
ctl inspect ctr
sentry_pid=$($PY -c 'import json,sys; print(json.load(sys.stdin)["sentry_pids"][0])' <"$tmp/out")
check "pause: inspect says PAUSED" contains "$tmp/out" '"state": "SANDBOX_STATE_PAUSED"'
check "pause: the Sentry is stopped on the host" eval \
  '[ "$(awk "{print \$3}" /proc/$sentry_pid/stat)" = T ]'
ctl ps
check "pause: ps (without -a) lists it as paused" contains "$tmp/out" "^ctr  *paused"
ctl exec ctr -- /bin/true
check "exec while paused: refused, saying so" eval '[ "$status" = 125 ] && contains "$tmp/err" "paused"'
ctl pause ctr
check "pause of a paused sandbox: refused" eval '[ "$status" = 125 ] && contains "$tmp/err" "not running"'
ctl unpause ctr
check "unpause: exit 0, the id" eval '[ "$status" = 0 ] && [ "$(cat "$tmp/out")" = ctr ]'
check "unpause: the Sentry runs on" eval '[ "$(awk "{print \$3}" /proc/$sentry_pid/stat)" != T ]'
ctl exec ctr -- /bin/sh -c 'wc -l </tmp/n'
n1=$(cat "$tmp/out")
sleep 1
ctl exec ctr -- /bin/sh -c 'wc -l </tmp/n'
check "unpause: the program runs on" eval '[ "$(cat "$tmp/out")" -gt "$n1" ]'
ctl unpause ctr
check "unpause of a running sandbox: refused" eval '[ "$status" = 125 ] && contains "$tmp/err" "not paused"'
ctl pause ctr
ctl kill -s KILL ctr
check "kill -s KILL of a paused sandbox: exit 0" eq "$status" 0
ctl wait ctr
check "wait after kill -s KILL of a paused sandbox: 137" eq "$status" 137
ctl rm ctr
ctl run -d --name=ctr -- /bin/sleep 600
ctl pause ctr
ctl rm -f ctr
check "rm -f of a paused sandbox: exit 0" eq "$status" 0
ctl pause no-such
check "pause of an unknown sandbox: an error naming it" eval \
  '[ "$status" = 125 ] && contains "$tmp/err" "no-such"'

# A sandbox whose init blocked its stub thread's host signals (a forged
# rt_sigreturn from stub code, test/isolation/stub_code.c) and spins:
# kill -s KILL is a host kill of the Sentry's pid namespace and cgroup,
# done in milliseconds.
spin=${SANDBOXCTL_TEST_SPIN_PROG:-}
if [ -n "$spin" ] && [ -x "$spin" ]; then
  spin=$(readlink -f "$spin")
  ctl run -d --name=spin -- "$spin" spin
  check "run -d of the spinner" eq "$status" 0
  sleep 0.5
  t0=$(date +%s%N)
  ctl kill -s KILL spin
  check "kill -s KILL of the spinner: exit 0" eq "$status" 0
  ctl wait spin
  t1=$(date +%s%N)
  check "wait after kill -s KILL: 137" eq "$status" 137
  ms=$(((t1 - t0) / 1000000))
  echo "kill -s KILL to the end of wait: $ms ms"
  check "kill -s KILL ends it within 1 s" ge 999 "$ms"
  ctl rm -f spin
  check "rm -f of the spinner: exit 0" eq "$status" 0
else
  echo "SKIP the spinner: SANDBOXCTL_TEST_SPIN_PROG not set"
fi

# Syscall patching (spec.systrap.patch): the daemon's default (off here)
# for pooled Sentries; --systrap-patch=on gets a Sentry started with it (a
# pool miss), whose hot getpid site is patched: [sbx-patch] in its maps.
hot_getpid='import os
for _ in range(200): os.getpid()
print(open("/proc/self/maps").read().count("[sbx-patch]"))'
if [ ! -x /usr/bin/python3 ]; then
  echo "SKIP patching checks: no /usr/bin/python3 in the rootfs"
elif sentry_probe "$SENTRY" --systrap-patch=on; then
  ctl run --rm --systrap-patch=on -- /usr/bin/python3 -c "$hot_getpid"
  check "run --systrap-patch=on: the hot site is patched" eq "$(cat "$tmp/out")" "1"
  ctl run --rm -- /usr/bin/python3 -c "$hot_getpid"
  check "run with the daemon's default (off): nothing patched" eq "$(cat "$tmp/out")" "0"
  ctl run --rm --systrap-patch=off -- /usr/bin/python3 -c "$hot_getpid"
  check "run --systrap-patch=off: nothing patched" eq "$(cat "$tmp/out")" "0"
  ctl run -d --name=patched --systrap-patch=on -- /bin/sleep 600
  ctl inspect patched
  cp "$tmp/out" "$tmp/inspect"
  check "--systrap-patch=on: a pool miss" not_contains "$tmp/inspect" '"pool_hit": true'
  check "--systrap-patch=on: in the spec" contains "$tmp/inspect" '"patch": "SYSTRAP_PATCH_ON"'
  spid=$(tr -d ' \n' <"$tmp/inspect" | sed -n 's/.*"sentry_pids":\[\([0-9]*\).*/\1/p')
  check "--systrap-patch=on: the Sentry was started with it" \
    grep -qa -- "--systrap-patch=on" "/proc/$spid/cmdline"
  ctl rm -f patched
else
  echo "SKIP patching checks: $probe_why"
fi
if [ "$platforms" = systrap,kvm ]; then
  ctl run --rm --platform=kvm --systrap-patch=on -- /bin/true
  check "--systrap-patch=on with kvm: refused" eq "$status" 125
  check "--systrap-patch=on with kvm: names the field" contains "$tmp/err" "spec.systrap.patch"
fi
ctl run --rm --systrap-patch=maybe -- /bin/true
check "--systrap-patch=maybe: a usage error" contains "$tmp/err" "want on or off"

ctl checkpoint nosuch --image="$tmp/img"
check "checkpoint of an unknown sandbox: NOT_FOUND" contains "$tmp/err" 'no sandbox with id "nosuch"'
check "checkpoint of an unknown sandbox: no image directory made" test ! -e "$tmp/img"

# -t with a real terminal: the program sees a tty of the local size.
if command -v python3 >/dev/null; then
  python3 - "$SANDBOXCTL" "$SOCK" >"$tmp/out" 2>"$tmp/err" <<'PY'
import fcntl, os, pty, select, struct, sys, termios, time
ctl, sock = sys.argv[1], sys.argv[2]
pid, fd = pty.fork()
if pid == 0:
    fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 33, 99, 0, 0))
    os.execv(ctl, [ctl, "--socket=" + sock, "run", "--rm", "-t", "--",
                   "/bin/sh", "-c", "stty size; test -t 0 && echo is-a-tty; "
                   "stty -F /dev/console size | sed s/^/console-/; "
                   "echo via-console >/dev/console; exit 6"])
out, start = b"", time.time()
while time.time() - start < 60:
    r, _, _ = select.select([fd], [], [], 0.2)
    if not r:
        continue
    try:
        data = os.read(fd, 4096)
    except OSError:
        break
    if not data:
        break
    out += data
_, status = os.waitpid(pid, 0)
sys.stdout.write(out.decode(errors="replace").replace("\r\n", "\n"))
sys.exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 99)
PY
  status=$?
  check "run -t: exit status" eq "$status" 6
  check "run -t: the terminal's size" contains "$tmp/out" "33 99"
  check "run -t: stdin is a tty" contains "$tmp/out" "is-a-tty"
  # docker's /dev/console with -t: the same terminal as stdio.
  check "run -t: /dev/console is that terminal (its size)" contains "$tmp/out" "console-33 99"
  check "run -t: a write to /dev/console reaches it" contains "$tmp/out" "via-console"
fi

ctl ps -aq
check "nothing left at the end" eq "$(lines "$tmp/out")" 0

echo "1..$n"
if [ "$fails" -ne 0 ]; then
  echo "$fails of $n checks failed; daemon log:"
  tail -20 "$tmp/daemon.log"
  exit 1
fi
exit 0
