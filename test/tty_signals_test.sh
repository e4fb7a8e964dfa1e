#!/usr/bin/env bash
# tty_signals_test.sh SANDBOXD SANDBOXCTL SENTRY
#
# Signals and terminals through sandboxd, as a docker or runsc user types
# them. A real pty on the client's side (python3's pty module) drives
# sandboxctl:
#   - run -it: the terminal is /dev/pts/0 of the sandbox's own devpts; ^C
#     and ^\ reach the foreground process group's traps; a resize of the
#     client's window is a SIGWINCH inside with the new `stty size`;
#     run -t alone: ^C is sandboxctl's, proxied to the init
#   - run -it sh -i: ^Z stops a foreground job (job control on)
#   - exec -t: `tty` names a path that exists inside the sandbox; -it: ^C
#   - without -t: kill -INT/-TERM/-HUP of an attached `run` (and -INT of
#     `exec`) reach the program's traps and it runs on (docker's signal
#     proxy); --sig-proxy=false leaves them to sandboxctl
#   - stop -t 1 of an init that ignores TERM: killed after ~1 s (137)
#   - checkpoint of a run -d -it sandbox, restore: ^C reaches the program,
#     /dev/console opens (the restored terminal)
# Exits 77 (CTest: skipped) until the binaries exist.
set -u
# shellcheck source=test/lib.sh
. "$(dirname "$0")/lib.sh"
usage_unless [ $# -eq 3 ] -- "SANDBOXD SANDBOXCTL SENTRY"
require_built "$@"
command -v python3 >/dev/null || skip "python3 is needed for the client's pty"
SANDBOXD=$(readlink -f "$1")
SANDBOXCTL=$(readlink -f "$2")
SENTRY=$(readlink -f "$3")
make_tmp tty_signals_test
SOCK=$tmp/sandboxd.sock
CHECK_OUT_BYTES=600

IN=/dev/null
ctl() { capture 120 "$SANDBOXCTL" --socket="$SOCK" "$@"; }

# term ROWS COLS STEP... -- COMMAND...: runs COMMAND on a new pty of
# ROWS x COLS and plays the steps: `expect:TEXT` (waits up to 30 s for
# TEXT in the output), `send:TEXT` (with \xNN and \r escapes),
# `resize:ROWS,COLS`, `sleep:SECONDS`. The output goes to $tmp/out (CRs
# dropped), "TIMEOUT at step expect N" when an expect failed; $status is
# COMMAND's exit status (99 when it did not exit within 60 s).
cat >"$tmp/term.py" <<'PY'
import codecs, fcntl, os, pty, select, signal, struct, sys, termios, time
rows, cols = int(sys.argv[1]), int(sys.argv[2])
sep = sys.argv.index("--")
steps, cmd = sys.argv[3:sep], sys.argv[sep + 1:]
pid, fd = pty.fork()
if pid == 0:
    fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    os.execv(cmd[0], cmd)
out = b""
def pump(timeout):
    global out
    r, _, _ = select.select([fd], [], [], timeout)
    if not r:
        return True
    try:
        data = os.read(fd, 4096)
    except OSError:
        return False
    if not data:
        return False
    out += data
    return True
ok = True
for step in steps:
    kind, _, arg = step.partition(":")
    if kind == "expect":
        want, start, seen = arg.encode(), time.time(), len(out)
        while want not in out[seen:] and time.time() - start < 30:
            if not pump(0.1):
                break
        if want not in out[seen:]:
            out += b"\nTIMEOUT at step " + step.split(":")[0].encode() + b" " + \
                str(steps.index(step) + 1).encode() + b"\n"
            ok = False
            break
    elif kind == "send":
        os.write(fd, codecs.escape_decode(arg.encode())[0])
    elif kind == "resize":
        r, c = (int(x) for x in arg.split(","))
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", r, c, 0, 0))
    elif kind == "sleep":
        end = time.time() + float(arg)
        while time.time() < end and pump(0.05):
            pass
if not ok:
    os.kill(pid, signal.SIGKILL)
done, status, start = 0, 0, time.time()
while time.time() - start < 60:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        while pump(0.05):
            pass
        break
    pump(0.1)
else:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    status = 99 << 8
sys.stdout.write(out.decode(errors="replace").replace("\r", ""))
sys.exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))
PY
term() {
  {
    timeout -k 5 120 python3 "$tmp/term.py" "$@" >"$tmp/out" 2>"$tmp/err"
    status=$?
  } 2>/dev/null
}

start_bg "$tmp/daemon.log" "$SANDBOXD" --sentry="$SENTRY" --socket="$SOCK" --state-dir="$tmp/state" \
  --pool-size=1 --cgroup-parent="tty-signals-test-$$" --default-rootfs=/ --shutdown-kill
wait_for_daemon "$SANDBOXCTL" "$SOCK" || { echo "sandboxd did not start"; cat "$tmp/daemon.log"; exit 1; }
CTL=("$SANDBOXCTL" --socket="$SOCK")

# --- run -it: ^C and ^\ become signals inside the sandbox ----------------------
term 24 80 'expect:ready' 'send:\x03' 'expect:got INT' 'send:\x1c' 'expect:got QUIT' -- \
  "${CTL[@]}" run --rm -it -- /bin/sh -c \
  'tty; trap "echo got INT" INT; trap "echo got QUIT; exit 3" QUIT; echo ready; while :; do sleep 0.1; done'
check "run -it: the terminal is /dev/pts/0 of the sandbox" contains "$tmp/out" '^/dev/pts/0$'
check "run -it: ^C runs the program's INT trap" contains "$tmp/out" "got INT"
check "run -it: ^\\ runs its QUIT trap" contains "$tmp/out" "got QUIT"
check "run -it: exit status 3" eq "$status" 3

# -t without -i sends no keys: the local terminal stays cooked, its ^C is
# sandboxctl's SIGINT, which goes to the init (the signal proxy).
term 24 80 'expect:ready' 'send:\x03' 'expect:got INT' -- \
  "${CTL[@]}" run --rm -t -- /bin/sh -c \
  'trap "echo got INT; exit 2" INT; test -t 1 && echo ready; while :; do sleep 0.1; done'
check "run -t (no -i): ^C reaches the init's trap" contains "$tmp/out" "got INT"
check "run -t (no -i): exit status 2" eq "$status" 2

# --- run -t: resizes reach the sandbox's pts as SIGWINCH ---------------------
term 33 99 'expect:ready' 'resize:41,121' 'expect:now 41 121' 'send:\x03' -- \
  "${CTL[@]}" run --rm -it -- /bin/sh -c \
  'trap "echo now \$(stty size)" WINCH; trap "exit 4" INT; echo "first $(stty size)"; echo ready; while :; do sleep 0.1; done'
check "run -it: the initial size" contains "$tmp/out" "^first 33 99"
check "run -it: a resize is SIGWINCH with the new stty size" contains "$tmp/out" "^now 41 121"
check "run -it: exit status 4 (^C)" eq "$status" 4

# --- run -it sh -i: job control -----------------------------------------------
# dash's `wait` skips a job it still counts as stopped: the `sleep 1` (a
# foreground job, whose wait reaps every child) lets it learn of the kill
# first, or `exit` refuses with "You have stopped jobs".
term 24 80 'expect:# ' 'send:sleep 30\r' 'sleep:1' 'send:\x1a' 'expect:Stopped' \
  'send:kill -9 %1; sleep 1; wait; exit 7\r' -- \
  "${CTL[@]}" run --rm -it -- /bin/sh -i
check "run -it sh -i: ^Z stops the foreground job" contains "$tmp/out" "Stopped.*sleep 30"
check "run -it sh -i: the shell goes on (exit 7)" eq "$status" 7

# --- exec -t: a terminal that exists inside the sandbox ----------------------
ctl run -d --name=box -- /bin/sh -c 'while :; do sleep 1; done'
check "run -d: started" eq "$status" 0
term 24 80 -- "${CTL[@]}" exec -t box -- /bin/sh -c 'p=$(tty); echo "tty=$p"; test -e "$p" && echo exists; test -t 0 && echo is-a-tty'
check "exec -t: tty names /dev/pts/N" contains "$tmp/out" '^tty=/dev/pts/[0-9]*$'
check "exec -t: that path exists inside the sandbox" contains "$tmp/out" '^exists$'
check "exec -t: stdin is a terminal" contains "$tmp/out" '^is-a-tty$'
term 24 80 'expect:ready' 'send:\x03' 'expect:got INT' -- \
  "${CTL[@]}" exec -it box -- /bin/sh -c 'trap "echo got INT; exit 9" INT; echo ready; while :; do sleep 0.1; done'
check "exec -it: ^C runs the INT trap" contains "$tmp/out" "got INT"
check "exec -it: exit status 9" eq "$status" 9

# --- without -t: the attached client passes its signals on -------------------
# proxied OUT SIGNAL...: waits for "ready" in OUT, then sends each signal
# to $client and waits for "got SIGNAL".
proxied() {
  local out=$1 sig i
  shift
  for i in $(seq 1 300); do grep -q ready "$out" && break; sleep 0.1; done
  for sig in "$@"; do
    kill -"$sig" "$client"
    for i in $(seq 1 100); do grep -q "got $sig" "$out" && break; sleep 0.1; done
  done
}
prog='for s in INT TERM HUP; do trap "echo got $s" $s; done; echo ready; i=0; while [ $i -lt 40 ]; do sleep 0.1; i=$((i+1)); done; echo finished; exit 5'
"${CTL[@]}" run --rm -- /bin/sh -c "$prog" >"$tmp/proxy.out" 2>"$tmp/proxy.err" &
client=$!
proxied "$tmp/proxy.out" INT TERM HUP
wait "$client"
status=$?
cp "$tmp/proxy.out" "$tmp/out"
cp "$tmp/proxy.err" "$tmp/err"
check "run: kill -INT of sandboxctl reaches the program's trap" contains "$tmp/out" "got INT"
check "run: so do TERM and HUP" eq "$(grep -c '^got ' "$tmp/out")" 3
check "run: the program runs on to its end" contains "$tmp/out" "finished"
check "run: exit status 5" eq "$status" 5

"${CTL[@]}" exec box -- /bin/sh -c \
  'trap "echo got INT; exit 8" INT; echo ready; i=0; while [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done; exit 1' \
  >"$tmp/proxy.out" 2>"$tmp/proxy.err" &
client=$!
proxied "$tmp/proxy.out" INT
wait "$client"
status=$?
cp "$tmp/proxy.out" "$tmp/out"
check "exec: kill -INT of sandboxctl reaches the exec'd program's trap" contains "$tmp/out" "got INT"
check "exec: exit status 8" eq "$status" 8

# (TERM: a script's background job starts with SIGINT ignored.)
"${CTL[@]}" run --rm --sig-proxy=false -- /bin/sh -c 'trap "echo got TERM" TERM; echo ready; sleep 5' \
  >"$tmp/proxy.out" 2>"$tmp/proxy.err" &
client=$!
for i in $(seq 1 300); do grep -q ready "$tmp/proxy.out" && break; sleep 0.1; done
kill -TERM "$client"
wait "$client"
status=$?
cp "$tmp/proxy.out" "$tmp/out"
check "run --sig-proxy=false: SIGTERM ends sandboxctl (143)" eq "$status" 143
check "run --sig-proxy=false: the program did not get it" not_contains "$tmp/out" "got TERM"

# --- stop -----------------------------------------------------------------------
# started: waits until sandbox $1's log has $2 (its trap is set).
started() {
  local i
  for i in $(seq 1 100); do
    "${CTL[@]}" logs "$1" 2>/dev/null | grep -q "$2" && return 0
    sleep 0.1
  done
  return 1
}
ctl run -d --name=stubborn -- /bin/sh -c 'trap "" TERM; echo ignoring; while :; do sleep 0.1; done'
check "stubborn: ignores TERM" started stubborn ignoring
start=$(date +%s.%N)
ctl stop -t 1 stubborn
elapsed=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
check "stop -t 1: exit 0" eq "$status" 0
check "stop -t 1: prints the id" eq "$(cat "$tmp/out")" stubborn
check "stop -t 1 of an init that ignores TERM: about 1 s ($elapsed s)" \
  awk -v e="$elapsed" 'BEGIN { exit !(e >= 0.9 && e < 6) }'
capture 20 "${CTL[@]}" wait stubborn
check "stop -t 1: killed (137)" eq "$status" 137
ctl run -d --name=polite -- /bin/sh -c 'trap "exit 6" TERM; echo trapping; while :; do sleep 0.1; done'
check "polite: traps TERM" started polite trapping
start=$(date +%s.%N)
ctl stop polite
elapsed=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
check "stop of an init that exits on TERM: at once ($elapsed s)" \
  awk -v e="$elapsed" 'BEGIN { exit !(e < 5) }'
capture 20 "${CTL[@]}" wait polite
check "stop: the init's own exit status (6)" eq "$status" 6
ctl stop polite
check "stop of a stopped sandbox: exit 0" eq "$status" 0
ctl stop nosuch
check "stop of an unknown sandbox: 125" eq "$status" 125

# --- checkpoint and restore of a sandbox whose init has a terminal -----------
# The pts is saved with the sandbox and relayed to the restored one's.
# /dev/console is that terminal, before and after the restore: a resize
# through it is the program's terminal's.
ctl run -d -i -t --name=termck -- /bin/sh -c \
  'trap "echo got INT; echo console-\$(stty rows 33 </dev/console; stty size) >/dev/console" INT
  trap "exit 5" QUIT; echo ready; echo console-open >/dev/console
  while :; do sleep 0.1; done'
check "run -d -it: its trap is set" started termck ready
check "run -d -it: /dev/console is its terminal" started termck console-open
ctl checkpoint termck --image="$tmp/img"
check "checkpoint of a sandbox with a terminal: exit 0" eq "$status" 0
term 24 80 'sleep:2' 'send:\x03' 'expect:got INT' 'expect:console-' 'send:\x1c' -- \
  "${CTL[@]}" restore -i --rm --image="$tmp/img"
check "restored: ^C reaches the restored program's trap" contains "$tmp/out" "got INT"
check "restored: /dev/console opens, it is the program's terminal (resized there)" \
  contains "$tmp/out" "console-33 80"
check "restored: ^\\ ends it (exit 5)" eq "$status" 5

ctl rm -f box stubborn polite termck
echo "1..$n"
if [ "$fails" -ne 0 ]; then
  echo "$fails of $n checks failed; daemon log:"
  tail -20 "$tmp/daemon.log"
  exit 1
fi
exit 0
