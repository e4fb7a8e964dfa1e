#!/usr/bin/env bash
# consistency_test.sh SANDBOXD SANDBOXCTL SENTRY
#
# What behaves alike through sandboxd, as docker's run and exec do:
#   - exec inherits the sandbox's env (exec's -e on top), cwd (unless -w)
#     and user (unless -u)
#   - exit codes, run and exec alike: 127 missing program, 126 not
#     executable, 125 the request failed
#   - a spec that cannot start (missing cwd, cwd not a directory, missing
#     program) is refused at create naming the field, and leaves nothing
#   - HOME, HOSTNAME and PATH set when the spec names none; /etc/hostname
#     agrees with `hostname`
#   - an exited sandbox holds no Sentry process until rm, while logs,
#     inspect and wait answer, also after a daemon restart
#   - ps lists the running sandboxes (-a: all), -q ids only, a table
#     whose columns stay aligned; messages name states in words
#   - a memory-limit kill: 137, the reason in run's message, ps and
#     inspect, and sandboxd_sandbox_exits_total{reason="oom"} (with cgroups)
#   - /metrics has no sandboxd_kvm_* family when kvm is not offered
# Exits 77 (CTest: skipped) until the binaries exist.
set -u
# shellcheck source=test/lib.sh
. "$(dirname "$0")/lib.sh"
usage_unless [ $# -eq 3 ] -- "SANDBOXD SANDBOXCTL SENTRY"
require_built "$@"
SANDBOXD=$(readlink -f "$1")
SANDBOXCTL=$(readlink -f "$2")
SENTRY=$(readlink -f "$3")
make_tmp consistency_test
SOCK=$tmp/sandboxd.sock
CHECK_OUT_BYTES=400
command -v curl >/dev/null || skip "no curl"

IN=/dev/null
ctl() { capture 120 "$SANDBOXCTL" --socket="$SOCK" "$@"; }

# Every Sentry the state directory records that still runs is killed at
# exit, whatever happened to the daemons.
kill_recorded() {
  local f pid
  for f in "$tmp"/state/sentries/*; do
    [ -e "$f" ] || continue
    pid=$(basename "$f")
    # Only a Sentry: an ended sandbox's recorded pid may be another
    # process's by now.
    [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = "$SENTRY" ] && kill -9 "$pid" 2>/dev/null
  done
  return 0
}
on_exit kill_recorded

daemon_pid=
start_daemon() {
  "$SANDBOXD" --sentry="$SENTRY" --socket="$SOCK" --state-dir="$tmp/state" --pool-size=1 \
    --cgroup-parent="consistency-test-$$" --metrics-address=127.0.0.1:0 \
    --default-rootfs=/ 2>>"$tmp/daemon.log" &
  daemon_pid=$!
  on_exit "stop_pid $daemon_pid"
  wait_for_daemon "$SANDBOXCTL" "$SOCK"
}
start_daemon
metrics=$(sed -n 's|.*metrics at http://\([^/]*\)/metrics.*|\1|p' "$tmp/daemon.log" | tail -1)

# sentry_of ID: the sandbox's Sentry pid, from inspect.
sentry_of() {
  "$SANDBOXCTL" --socket="$SOCK" inspect "$1" 2>/dev/null |
    tr -d '\n ' | sed -n 's/.*"sentry_pids":\[\([0-9]*\).*/\1/p'
}
gone() { ! kill -0 "$1" 2>/dev/null; }

# --- exec inherits env and cwd --------------------------------------------
ctl run -d --name=envbox -e FOO=spec -e BAR=keep -e PATH=/custom:/usr/bin:/bin -w /tmp \
  -- /bin/sleep 600
check "envbox started" eq "$status" 0
ctl exec envbox -- /bin/sh -c 'echo "$FOO $BAR"; pwd; echo "$PATH"'
check "exec: the sandbox's env, cwd and PATH" eq "$(cat "$tmp/out")" "spec keep
/tmp
/custom:/usr/bin:/bin"
ctl exec -e FOO=exec -w /etc envbox -- /bin/sh -c 'echo "$FOO $BAR"; pwd'
check "exec -e and -w: on top of the sandbox's" eq "$(cat "$tmp/out")" "exec keep
/etc"

ctl run -d --name=userbox --user 33:33 -- /bin/sleep 600
check "userbox started" eq "$status" 0
ctl exec userbox -- /usr/bin/id -u
check "exec: the sandbox's user" eq "$(cat "$tmp/out")" "33"
ctl exec -u 0 userbox -- /bin/sh -c 'id -u; echo "$HOME"'
check "exec -u 0: its own user, and that user's HOME" eq "$(cat "$tmp/out")" "0
/root"
ctl rm -f userbox

# --- exit codes: run and exec alike ---------------------------------------
ctl run --rm -- /nonexistent/program
check "run missing program: 127" eq "$status" 127
ctl run --rm -- /etc/passwd
check "run not executable: 126" eq "$status" 126
check "run not executable: one line on stderr" eq "$(lines "$tmp/err")" 1
ctl run --rm --memory=1k -- /bin/true
check "run refused request: 125" eq "$status" 125
ctl exec envbox -- /nonexistent/program
check "exec missing program: 127" eq "$status" 127
ctl exec envbox -- /etc/passwd
check "exec not executable: 126" eq "$status" 126
ctl exec no-such-box -- /bin/true
check "exec in an unknown sandbox: 125" eq "$status" 125

# --- refused at create ------------------------------------------------------
ctl create --name=bad1 --cwd=/nonexistent-dir -- /bin/true
check "create with a missing cwd: refused (125)" eq "$status" 125
check "create with a missing cwd: names spec.process.cwd" contains "$tmp/err" "spec.process.cwd"
ctl create --name=bad2 --cwd=/etc/passwd -- /bin/true
check "create with a cwd that is a file: not a directory" contains "$tmp/err" "spec.process.cwd: \"/etc/passwd\" is not a directory"
ctl create --name=bad3 -- /nonexistent/program
check "create of a missing program: names spec.process.argv[0]" contains "$tmp/err" "spec.process.argv\[0\]"
ctl create --name=bad4 -- no-such-program-anywhere
check "create of a missing name: says PATH was searched" contains "$tmp/err" "searched PATH="
ctl ps -a
check "refused creates leave nothing" not_contains_word "$tmp/out" "bad[0-9]*"

# --- HOME, HOSTNAME, PATH, /etc/hostname -----------------------------------
ctl run --rm --name=hn1 -- /bin/sh -c 'echo "$HOME $HOSTNAME"; cat /etc/hostname; hostname'
check "run: HOME and HOSTNAME by default; /etc/hostname agrees" eq "$(cat "$tmp/out")" "/root hn1
hn1
hn1"
ctl run --rm --hostname=web --user 33:33 -- /bin/sh -c 'echo "$HOME $HOSTNAME"; cat /etc/hostname'
check "run --user 33 --hostname=web: its passwd HOME" eq "$(cat "$tmp/out")" "/var/www web
web"
ctl run --rm -e HOME=/mine -e HOSTNAME=given -- /bin/sh -c 'echo "$HOME $HOSTNAME"'
check "run: the spec's HOME and HOSTNAME win" eq "$(cat "$tmp/out")" "/mine given"
ctl exec -e PATH= envbox -- /usr/bin/env
check "exec: HOSTNAME of the sandbox" contains "$tmp/out" "^HOSTNAME=envbox$"

# --- ps --------------------------------------------------------------------
ctl run -d --name=short -- /bin/sh -c 'echo bye; exit 7'
ctl wait short
check "wait short: 7" eq "$status" 7
ctl ps
check "ps: the running sandbox" contains "$tmp/out" "^envbox "
check "ps: not the stopped one" not_contains "$tmp/out" "^short "
ctl ps -a
check "ps -a: the stopped one too" contains "$tmp/out" "^short  *stopped "
ctl ps -q
check "ps -q: ids of the running ones" eq "$(cat "$tmp/out")" "envbox"
long=a-rather-long-sandbox-name-that-is-wider-than-fourteen
ctl create --name=$long -- /bin/true
ctl ps -a
hdr=$(head -1 "$tmp/out" | grep -bo STATE | cut -d: -f1)
col=$(grep "^$long " "$tmp/out" | grep -bo ' created ' | cut -d: -f1)
check "ps -a: a long id keeps the columns aligned" eq "$((col + 1))" "$hdr"
ctl start envbox
check "start of a running sandbox: in words" contains "$tmp/err" "sandbox envbox is running, not created"
check "start of a running sandbox: no enum name" not_contains "$tmp/err" "SANDBOX_STATE"
ctl rm -f $long

# --- an exited sandbox holds no Sentry -------------------------------------
spid=$(sentry_of short)
check "short: inspect names its sentry ($spid)" test -n "$spid"
check "short: its sentry is gone after the init's exit" until_true 10 gone "${spid:-1}"
ctl logs short
check "short: logs answer" eq "$(cat "$tmp/out")" "bye"
ctl inspect short
check "short: inspect has the exit" contains "$tmp/out" '"code": 7'
kill -9 "$daemon_pid"
wait "$daemon_pid" 2>/dev/null
start_daemon
ctl logs short
check "after a daemon restart: logs answer" eq "$(cat "$tmp/out")" "bye"
ctl wait short
check "after a daemon restart: wait answers 7" eq "$status" 7
ctl inspect short
check "after a daemon restart: inspect has the exit" contains "$tmp/out" '"code": 7'
ctl rm short
check "rm short" eq "$status" 0
metrics=$(sed -n 's|.*metrics at http://\([^/]*\)/metrics.*|\1|p' "$tmp/daemon.log" | tail -1)

# --- out of memory ---------------------------------------------------------
if grep -q "no cgroups" "$tmp/daemon.log" || ! command -v python3 >/dev/null; then
  echo "# SKIP out of memory: no cgroups or no python3"
else
  ctl run --name=oom1 --memory=64m -- /usr/bin/python3 -c '
a = []
while True:
    a.append(bytearray(1 << 20))'
  check "oom: exit 137" eq "$status" 137
  check "oom: run says out of memory" contains "$tmp/err" "sandbox oom1: out of memory"
  ctl ps -a
  check "oom: ps says out of memory" contains "$tmp/out" "^oom1 .*out of memory"
  ctl inspect oom1
  check "oom: inspect has the reason" contains "$tmp/out" '"reason": "out of memory'
  curl -s "http://$metrics/metrics" >"$tmp/metrics"
  check "oom: sandboxd_sandbox_exits_total{reason=\"oom\"} 1" \
    contains "$tmp/metrics" '^sandboxd_sandbox_exits_total{reason="oom"} 1$'
  ctl rm oom1
fi

# --- metrics of a platform that is not enabled --------------------------------
# The daemon runs with its default --platforms (systrap alone).
curl -s "http://$metrics/metrics" >"$tmp/metrics"
check "metrics: the families of systrap, offered" contains "$tmp/metrics" "^# TYPE sandboxd_systrap_"
check "metrics: no family of kvm, not offered" not_contains "$tmp/metrics" "sandboxd_kvm_"

ctl rm -f envbox
ctl ps -aq
check "nothing left at the end" eq "$(lines "$tmp/out")" 0
passed
