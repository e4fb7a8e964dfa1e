#!/usr/bin/env bash
# The host terminal inside the sandbox: runs `sentry run` under a real
# pseudo-terminal (python3's pty module) and checks what the sandbox sees:
# tty(1) names /dev/console, stty size is the host's, ^C typed on the host
# terminal interrupts the sandbox's foreground program (not the Sentry),
# and a host resize reaches the foreground job as SIGWINCH. Each scenario
# runs natively too, and the outputs must agree (but for tty's name).
#
# usage: host_tty_test.sh SENTRY
set -u
# shellcheck source=test/lib.sh
. "$(dirname "$0")/lib.sh"
usage_unless [ $# -eq 1 ] -- "SENTRY"
SENTRY=$1
require_sentry "$SENTRY"
command -v python3 >/dev/null || skip "no python3"
exec python3 - "$SENTRY" <<'PY'
import fcntl, os, pty, select, struct, sys, termios, time

SENTRY = sys.argv[1]
failures = 0

def run(argv, actions=(), timeout=30):
    """Runs argv on a new pty (33x99); actions: (marker, fn(master_fd))."""
    pid, fd = pty.fork()
    if pid == 0:
        fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 33, 99, 0, 0))
        os.execv(argv[0], argv)
    out, done, start = b"", set(), time.time()
    while time.time() - start < timeout:
        for i, (marker, fn) in enumerate(actions):
            if i not in done and marker in out:
                done.add(i)
                fn(fd)
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
    else:
        os.kill(pid, 9)
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return out.decode(errors="replace").replace("\r\n", "\n"), status, time.time() - start

def both(name, script, actions=(), expect=None):
    global failures
    native = run(["/bin/sh", "-c", script], actions)
    sandbox = run([SENTRY, "run", "--", "/bin/sh", "-c", script], actions)
    ok = native[0] == sandbox[0] and native[1] == sandbox[1]
    if expect is not None:
        ok = ok and expect(sandbox[0])
    print("%s: %s" % (name, "ok" if ok else "FAIL"))
    if not ok:
        failures += 1
        print("  native:  %r status %d" % (native[0], native[1]))
        print("  sandbox: %r status %d" % (sandbox[0], sandbox[1]))

def type_after(delay, data):
    def fn(fd):
        time.sleep(delay)
        os.write(fd, data)
    return fn

def resize_after(delay, rows, cols):
    def fn(fd):
        time.sleep(delay)
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    return fn

# tty(1): the sandbox calls the host terminal /dev/console.
out, status, _ = run([SENTRY, "run", "--", "/bin/sh", "-c", "tty; test -t 0 && test -t 1 && echo both"])
ok = out == "/dev/console\nboth\n" and status == 0
print("tty is /dev/console: %s" % ("ok" if ok else "FAIL %r %d" % (out, status)))
failures += not ok

both("stty size is the host's", "stty size", expect=lambda o: o == "33 99\n")
both("stty settings reach the host terminal",
     "stty -echo; stty -a | grep -o -- ' -echo ' ; stty echo",
     expect=lambda o: o == " -echo \n")
both("^C interrupts the foreground program",
     'trap "echo caught" INT; echo ready; sleep 100; echo "after $?"',
     [(b"ready", type_after(0.5, b"\x03"))],
     expect=lambda o: o.endswith("caught\nafter 130\n"))
both("a host resize is SIGWINCH",
     'trap "stty size; exit 0" WINCH; echo ready; while :; do sleep 0.1; done',
     [(b"ready", resize_after(0.5, 40, 120))],
     expect=lambda o: o == "ready\n40 120\n")
print("RESULT: %s" % ("FAIL" if failures else "PASS"))
sys.exit(1 if failures else 0)
PY
