#!/usr/bin/env bash
# oci_runtime_test.sh SANDBOXD_OCI [SENTRY [SANDBOXD SANDBOXCTL]]
#
# With SANDBOXD the suite starts one (private socket and state) and runs
# every case with SANDBOXD_OCI_SOCKET naming it: the sandboxes then come
# from its warm pool (client/oci/daemon_proxy.h); process.rlimits is then
# only logged, so that case is left out; update, pause, resume,
# checkpoint and restore go through sandboxd's Update, Pause, Resume,
# Checkpoint and Restore; a network namespace path is the daemon's
# network_namespace (its Sentry started in it).
#
# sandboxd-oci driven exactly as containerd's runc shim drives a runtime
# (test/oci/shim.py: a child subreaper that runs create with stdio pipes
# and --pid-file, start, kill, waits for the pid in the pid file, delete),
# on bundles made like `runc spec` makes them (test/oci/make_bundle.py)
# over a busybox rootfs. Where Debian's runc is installed, every case runs
# with runc on the same bundle too, and the two transcripts (state after
# create and after exit, the exit status as the shim sees it, stdout,
# stderr) must be the same:
#   - exit status, stdout and stderr; env, cwd, user, groups, host name
#   - stdin from the shim's pipe; a read-only root; process.rlimits
#   - kill TERM to a trapping init (status "running" before), kill KILL;
#     TERM and INT to an init without a handler ignored, KILL ends it
#   - bind mounts ro and rw of a host directory, a tmpfs mount
#   - a terminal: process.terminal with --console-socket (the pty master
#     sent with SCM_RIGHTS)
#   - exec --process --detach --pid-file (test/oci/exec.py, as the shim):
#     status, user, cwd, output; a signal to its pid; a terminal; kill
#     --all; exec without --detach
#   - a pod's namespaces as CRI gives them: the host name of its UTS
#     namespace; its IPC namespace not shared (a warning naming the field
#     in --log for a CRI container, refused otherwise); a network
#     namespace by path (`ip netns add`, a server on its loopback)
#   - run attached (status, stdout, stderr)
# and of sandboxd-oci alone: events --stats (runc's keys, the sandbox's
# numbers) and events --interval; update of memory, pids and CPU quota
# seen inside (/proc/meminfo, fork's EAGAIN, nproc) and in events, its
# refusals (also through sandboxd); run's signal forwarding and
# --detach; state's JSON, ps --format=json, pause and
# resume (then events of the paused container), checkpoint
# (--leave-running, and not) and restore of a counter
# that runs on from where it was, the errors
# runc gives (start twice, kill of a stopped container, delete of a
# running one, an unknown id, an id in use), delete --force, a config
# field it cannot honour refused naming it (on stderr and in the JSON
# --log), features, --version.
# Needs root (runc's namespaces; the bundles' uids). Exits 77 (CTest:
# skipped) until the binaries exist.
set -u
# shellcheck source=test/lib.sh
. "$(dirname "$0")/lib.sh"
usage_unless [ $# -eq 1 -o $# -eq 2 -o $# -eq 4 ] -- "SANDBOXD_OCI [SENTRY [SANDBOXD SANDBOXCTL]]"
require_built "$@"
OCI=$(readlink -f "$1")
if [ $# -ge 2 ]; then
  export SANDBOXD_OCI_SENTRY=$(readlink -f "$2")
fi
DAEMON=
[ $# -ge 4 ] && DAEMON=$(readlink -f "$3") && SANDBOXCTL=$(readlink -f "$4")
[ "$(id -u)" = 0 ] || skip "needs root"
BUSYBOX=$(command -v busybox || true)
[ -n "$BUSYBOX" ] && file -L "$BUSYBOX" 2>/dev/null | grep -q 'statically linked' ||
  skip "needs a static busybox (Debian's busybox-static)"
HERE=$(cd "$(dirname "$0")" && pwd)
SHIM="python3 $HERE/oci/shim.py"
RUNC=$(command -v runc || true)
[ -n "$RUNC" ] || echo "# runc not installed: sandboxd-oci's transcripts are checked alone"
make_tmp oci_runtime_test "${KEEP:-0}"
CHECK_OUT_BYTES=600
status=0
if [ -n "$DAEMON" ]; then
  start_bg "$tmp/sandboxd.log" "$DAEMON" --sentry="$SANDBOXD_OCI_SENTRY" \
    --socket="$tmp/sandboxd.sock" --state-dir="$tmp/sandboxd-state" --pool-size=1 \
    --cgroup-parent="oci-runtime-test-$$" --default-rootfs=/ --shutdown-kill
  check "sandboxd listens" wait_for_daemon "$SANDBOXCTL" "$tmp/sandboxd.sock"
  export SANDBOXD_OCI_SOCKET=$tmp/sandboxd.sock
fi

ROOTFS=$tmp/rootfs
"$HERE/oci/make_rootfs.sh" "$ROOTFS"
mkdir -p "$tmp/vol" "$tmp/ro"
echo from-host >"$tmp/ro/file"

# bundle NAME KEY=JSON...: $tmp/NAME/config.json over the busybox root.
bundle() {
  local name=$1
  shift
  python3 "$HERE/oci/make_bundle.py" "$tmp/$name" "$ROOTFS" "$@"
}

# run_case NAME SHIM-OPTIONS...: the bundle $tmp/NAME through sandboxd-oci
# ($tmp/NAME.sb) and runc ($tmp/NAME.runc); "after start" lines, which
# race with a short program's exit, are left out of the comparison.
run_case() {
  local name=$1
  shift
  capture 60 $SHIM "$OCI" "$tmp/root-sb" "$tmp/$name" "$name" "$@"
  cp "$tmp/out" "$tmp/$name.sb"
  cp "$tmp/err" "$tmp/$name.sb.err"
  sb_status=$status
  if [ -n "$RUNC" ]; then
    capture 60 $SHIM "$RUNC" "$tmp/root-runc" "$tmp/$name" "$name" "$@"
    cp "$tmp/out" "$tmp/$name.runc"
  fi
  # For the checks' diagnostics: ours.
  cp "$tmp/$name.sb" "$tmp/out"
  cp "$tmp/$name.sb.err" "$tmp/err"
  status=$sb_status
}

same_as_runc() {
  local name=$1
  [ -z "$RUNC" ] && return 0
  diff <(grep -v '^after start' "$tmp/$name.runc") \
       <(grep -v '^after start' "$tmp/$name.sb") >"$tmp/$name.diff" && return 0
  sed 's/^/  # /' "$tmp/$name.diff"
  return 1
}

# --- the program's output and exit status ------------------------------
bundle basic 'process.args=["sh","-c","echo hello; echo oops >&2; exit 3"]'
run_case basic
check "basic: the shim's run succeeds" eq "$status" 0
check "basic: created after create" contains "$tmp/basic.sb" '^after create: created$'
check "basic: exit status 3 through the init proxy" contains "$tmp/basic.sb" '^exit: 3$'
check "basic: stdout" contains "$tmp/basic.sb" '^out: hello$'
check "basic: stderr" contains "$tmp/basic.sb" '^err: oops$'
check "basic: stopped after exit" contains "$tmp/basic.sb" '^after exit: stopped$'
check "basic: delete works, state then fails" \
  contains "$tmp/basic.sb" '^state after delete: 1$'
check "basic: same as runc" same_as_runc basic

bundle ident 'process.args=["sh","-c","id; pwd; hostname; echo $FOO"]' \
  'process.user={"uid":1000,"gid":100,"additionalGids":[29,44]}' \
  'process.cwd="/home/u"' 'hostname="box1"' \
  'process.env=["PATH=/bin","FOO=bar baz"]'
run_case ident
check "ident: uid, gid and groups" \
  contains "$tmp/ident.sb" '^out: uid=1000(u) gid=100(users) groups=29(audio),44(video)'
check "ident: cwd" contains "$tmp/ident.sb" '^out: /home/u$'
check "ident: hostname" contains "$tmp/ident.sb" '^out: box1$'
check "ident: env" contains "$tmp/ident.sb" '^out: bar baz$'
check "ident: same as runc" same_as_runc ident

if [ -z "$DAEMON" ]; then
  bundle rlimit 'process.args=["sh","-c","ulimit -n; ulimit -Hn"]' \
    'process.rlimits=[{"type":"RLIMIT_NOFILE","hard":512,"soft":256}]'
  run_case rlimit
  check "rlimit: RLIMIT_NOFILE" eval 'contains "$tmp/rlimit.sb" "^out: 256$" && contains "$tmp/rlimit.sb" "^out: 512$"'
  check "rlimit: same as runc" same_as_runc rlimit
fi

bundle stdin 'process.args=["sh","-c","read a; echo got:$a"]'
run_case stdin --stdin $'line-from-shim\n'
check "stdin: the shim's pipe is the init's stdin" contains "$tmp/stdin.sb" '^out: got:line-from-shim$'
check "stdin: same as runc" same_as_runc stdin

bundle rofs 'root.readonly=true' \
  'process.args=["sh","-c","touch /x 2>/dev/null && echo wrote || echo read-only"]'
run_case rofs
check "rofs: root.readonly" contains "$tmp/rofs.sb" '^out: read-only$'
check "rofs: same as runc" same_as_runc rofs

# --- a pod's namespaces (as CRI gives them) --------------------------------
# A "pause" process with a UTS namespace (its host name) and an IPC one.
unshare --uts --ipc sh -c 'hostname pod-host; exec sleep 600' &
POD=$!
on_exit "stop_pid $POD"
for _ in $(seq 1 50); do
  [ "$(readlink /proc/$POD/ns/uts)" != "$(readlink /proc/self/ns/uts)" ] && break
  sleep 0.1
done
sleep 0.2
bundle pod 'process.args=["hostname"]' \
  "linux.namespaces=[{\"type\":\"pid\"},{\"type\":\"mount\"},{\"type\":\"uts\",\"path\":\"/proc/$POD/ns/uts\"},{\"type\":\"ipc\",\"path\":\"/proc/$POD/ns/ipc\"}]" \
  'hostname=-' 'annotations={"io.kubernetes.cri.container-type":"container"}'
run_case pod
check "pod: the host name of the pod's UTS namespace" contains "$tmp/pod.sb" '^out: pod-host$'
check "pod: same as runc" same_as_runc pod
capture 20 "$OCI" --root "$tmp/root-pod" --log "$tmp/pod.log" --log-format json create \
  --bundle "$tmp/pod" pod
check "pod: the IPC namespace not shared is a warning in --log, naming the field" python3 -c '
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
assert any(l["level"] == "warning" and "linux.namespaces[3].path" in l["msg"] for l in lines), lines
' "$tmp/pod.log"
"$OCI" --root "$tmp/root-pod" delete --force pod
bundle pod2 'process.args=["hostname"]' \
  "linux.namespaces=[{\"type\":\"pid\"},{\"type\":\"ipc\",\"path\":\"/proc/$POD/ns/ipc\"}]"
capture 20 "$OCI" --root "$tmp/root-pod" create --bundle "$tmp/pod2" pod2
check "pod: an IPC path outside a CRI container is refused" \
  eval '[ "$status" = 1 ] && contains "$tmp/err" "linux.namespaces\[1\].path: joining a ipc namespace"'
stop_pid "$POD"

# --- a network namespace by path (as CNI gives a pod's) ------------------
# With sandboxd the daemon starts the sandbox's Sentry in it.
. "$HERE/oci/netns.sh"
NSNAME=sbxoci-$$
NSPORT=$((20000 + $$ % 20000))
netns_up "$NSNAME" "$NSPORT"
check "netns: the test's namespace and its server" test -e "$NETNS_PATH"
check "netns: the server is not on the host's loopback" eval "! nc -w 1 127.0.0.1 $NSPORT </dev/null"
bundle netjoin "process.args=[\"sh\",\"-c\",\"nc -w 5 127.0.0.1 $NSPORT </dev/null\"]" \
  "linux.namespaces=[{\"type\":\"pid\"},{\"type\":\"mount\"},{\"type\":\"uts\"},{\"type\":\"network\",\"path\":\"$NETNS_PATH\"}]"
run_case netjoin
check "netns: the container's sockets are the given namespace's" \
  contains "$tmp/netjoin.sb" "^out: from-netns $NSNAME\$"
check "netns: same as runc" same_as_runc netjoin

# --- signals -----------------------------------------------------------
bundle term 'process.args=["sh","-c","trap \"echo term; exit 7\" TERM; echo up; while :; do sleep 0.1; done"]'
run_case term --kill TERM --after 1
check "term: running after start" contains "$tmp/term.sb" '^after start: running$'
check "term: kill succeeds" contains "$tmp/term.sb" '^kill: 0$'
check "term: the init's trap ran" contains "$tmp/term.sb" '^out: term$'
check "term: exit status 7" contains "$tmp/term.sb" '^exit: 7$'
check "term: same as runc" same_as_runc term

bundle killed 'process.args=["sleep","30"]'
run_case killed --kill KILL --after 0.5
check "killed: exit 137 (SIGKILL)" contains "$tmp/killed.sb" '^exit: 137$'
check "killed: same as runc" same_as_runc killed

# --- mounts ------------------------------------------------------------
bundle mounts \
  "mounts=[{\"destination\":\"/proc\",\"type\":\"proc\",\"source\":\"proc\"},
           {\"destination\":\"/vol\",\"type\":\"bind\",\"source\":\"$tmp/vol\",\"options\":[\"rbind\",\"rw\"]},
           {\"destination\":\"/ro\",\"type\":\"bind\",\"source\":\"$tmp/ro\",\"options\":[\"rbind\",\"ro\"]},
           {\"destination\":\"/scratch\",\"type\":\"tmpfs\",\"source\":\"tmpfs\",\"options\":[\"size=1m\"]}]" \
  'process.args=["sh","-c","cat /ro/file; echo x > /ro/y 2>/dev/null || echo ro-refused; echo made > /vol/new && echo rw-ok; echo t > /scratch/t && cat /scratch/t"]'
run_case mounts
check "mounts: ro bind readable" contains "$tmp/mounts.sb" '^out: from-host$'
check "mounts: ro bind refuses writes" contains "$tmp/mounts.sb" '^out: ro-refused$'
check "mounts: rw bind writes reach the host" eq "$(cat "$tmp/vol/new" 2>/dev/null)" made
check "mounts: tmpfs" contains "$tmp/mounts.sb" '^out: t$'
rm -f "$tmp/vol/new"
check "mounts: same as runc" same_as_runc mounts

# --- a terminal --------------------------------------------------------
bundle tty 'process.terminal=true' \
  'process.args=["sh","-c","test -t 0 && test -t 1 && echo is-a-tty; read a; echo got:$a"]'
run_case tty --console --stdin $'typed\n' --when is-a-tty
check "tty: the pty master came over --console-socket" \
  contains "$tmp/tty.sb" '^console: got a pty master$'
check "tty: stdin and stdout are the terminal" contains "$tmp/tty.sb" '^out: is-a-tty$'
check "tty: input through the master" contains "$tmp/tty.sb" '^out: got:typed$'
check "tty: exit 0" contains "$tmp/tty.sb" '^exit: 0$'
check "tty: same as runc" same_as_runc tty

# --- exec, as the shim runs it (test/oci/exec.py) -------------------------
# The init ignores SIGTERM itself: runc's init of a pid namespace would
# ignore one it has no handler for, the Sentry's does not (README.md,
# "Differences from runc").
bundle host 'process.args=["sh","-c","trap \"\" TERM; while :; do sleep 1; done"]'
EXEC="python3 $HERE/oci/exec.py"
RUNTIMES=("sb:$OCI:$tmp/root-sb")
[ -n "$RUNC" ] && RUNTIMES+=("runc:$RUNC:$tmp/root-runc")
for r in "${RUNTIMES[@]}"; do
  IFS=: read -r name bin root <<<"$r"
  "$bin" --root "$root" create --bundle "$tmp/host" host </dev/null >/dev/null 2>&1
  "$bin" --root "$root" start host
  capture 30 $EXEC "$bin" "$root" host \
    '{"args":["sh","-c","echo in-exec; id; pwd; echo e >&2; exit 4"],"cwd":"/tmp","user":{"uid":1000,"gid":100},"env":["PATH=/bin"]}'
  cp "$tmp/out" "$tmp/exec1.$name"
  capture 30 $EXEC "$bin" "$root" host '{"args":["sleep","30"],"cwd":"/","env":["PATH=/bin"]}' \
    --kill 15 --after 1
  cp "$tmp/out" "$tmp/exec2.$name"
  capture 30 $EXEC "$bin" "$root" host \
    '{"args":["sh","-c","test -t 0 && echo is-a-tty; read a; echo got:$a"],"cwd":"/","env":["PATH=/bin"],"terminal":true}' \
    --console --stdin $'typed\n' --when is-a-tty
  cp "$tmp/out" "$tmp/exec3.$name"
  capture 30 $EXEC "$bin" "$root" host '{"args":["sleep","30"],"cwd":"/","env":["PATH=/bin"]}' \
    --kill-all 15 --after 1
  cp "$tmp/out" "$tmp/exec4.$name"
  capture 30 "$bin" --root "$root" exec host sh -c 'echo attached; exit 6'
  echo "status $status" >>"$tmp/out"
  cp "$tmp/out" "$tmp/exec5.$name"
  capture 10 "$bin" --root "$root" ps --format=json host
  cp "$tmp/out" "$tmp/ps.$name"
  if [ "$name" = sb ]; then
    capture 30 $EXEC "$bin" "$root" host '{"args":["no-such-program"],"cwd":"/","env":["PATH=/bin"]}'
    cp "$tmp/out" "$tmp/exec6.$name"
  fi
  "$bin" --root "$root" delete --force host
done
cp "$tmp/exec1.sb" "$tmp/out"
check "exec: status, user, cwd, stdout and stderr" eval \
  'contains "$tmp/out" "^exit: 4$" && contains "$tmp/out" "^out: in-exec$" &&
   contains "$tmp/out" "^out: uid=1000(u) gid=100(users)" && contains "$tmp/out" "^out: /tmp$" &&
   contains "$tmp/out" "^err: e$"'
cp "$tmp/exec2.sb" "$tmp/out"
check "exec: a signal to the exec proxy reaches the process (143)" contains "$tmp/out" '^exit: 143$'
cp "$tmp/exec3.sb" "$tmp/out"
check "exec: a terminal over --console-socket" eval \
  'contains "$tmp/out" "^out: is-a-tty$" && contains "$tmp/out" "^out: got:typed$" && contains "$tmp/out" "^exit: 0$"'
cp "$tmp/exec4.sb" "$tmp/out"
check "exec: kill --all reaches an exec'd process" eval \
  'contains "$tmp/out" "^kill --all: 0" && contains "$tmp/out" "^exit: 143$"'
cp "$tmp/exec5.sb" "$tmp/out"
check "exec without --detach: its status and output" eval \
  'contains "$tmp/out" "^attached$" && contains "$tmp/out" "^status 6$"'
cp "$tmp/ps.sb" "$tmp/out"
check "ps --format=json: a JSON array of pids" python3 -c '
import json, sys
pids = json.load(open(sys.argv[1]))
assert pids and all(isinstance(p, int) for p in pids), pids
' "$tmp/out"
cp "$tmp/exec6.sb" "$tmp/out"
check "exec: a missing program fails the exec (1), naming it" eval \
  'contains "$tmp/out" "^exec: 1$" && contains "$tmp/out" "no-such-program"'
for i in 1 2 3 4 5; do
  if [ -n "$RUNC" ]; then
    check "exec $i: same as runc" diff "$tmp/exec$i.runc" "$tmp/exec$i.sb"
  fi
done

# --- sandboxd-oci's own commands, as the shim calls them -----------------
R=(--root "$tmp/root-cmd" --log "$tmp/cmd.log" --log-format json)
bundle long 'process.args=["sleep","60"]' 'annotations={"org.example/a":"b"}'
# create's init proxy is reparented to init (no subreaper here): reaped by it.
capture 20 "$OCI" "${R[@]}" create --bundle "$tmp/long" --pid-file "$tmp/long.pid" long
check "create: exit 0" eq "$status" 0
capture 20 "$OCI" "${R[@]}" create --bundle "$tmp/long" long
check "create: an id in use is refused" \
  eval '[ "$status" = 1 ] && contains "$tmp/err" "container with id exists: long"'
capture 10 "$OCI" "${R[@]}" state long
check "state: runc's JSON, created" python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))
assert s["ociVersion"] and s["id"] == "long" and s["status"] == "created", s
assert s["pid"] == int(open(sys.argv[2]).read()), s
assert s["bundle"] == sys.argv[3] and s["rootfs"] == sys.argv[4], s
assert s["created"].endswith("Z") and s["annotations"] == {"org.example/a": "b"}, s
' "$tmp/out" "$tmp/long.pid" "$tmp/long" "$ROOTFS"
capture 20 "$OCI" "${R[@]}" start long
check "start: exit 0" eq "$status" 0
capture 20 "$OCI" "${R[@]}" start long
check "start: twice is refused" \
  eval '[ "$status" = 1 ] && contains "$tmp/err" "cannot start an already running container"'
capture 10 "$OCI" "${R[@]}" state long
check "state: running" contains "$tmp/out" '"status": "running"'
capture 10 "$OCI" "${R[@]}" ps --format=json long
check "ps --format=json: the init proxy's pid first" python3 -c '
import json, sys
pids = json.load(open(sys.argv[1]))
assert pids and pids[0] == int(open(sys.argv[2]).read()), pids
' "$tmp/out" "$tmp/long.pid"
# pause and resume (with sandboxd: its Pause and Resume, the daemon's
# Sentry of the sandbox stopped; its state PAUSED there too).
capture 10 "$OCI" "${R[@]}" pause long
check "pause: exit 0" eq "$status" 0
capture 10 "$OCI" "${R[@]}" state long
check "state: paused" contains "$tmp/out" '"status": "paused"'
if [ -z "$DAEMON" ]; then
  check "pause: the Sentry's processes are stopped" eval \
    'for p in $("$OCI" "${R[@]}" ps --format=json long | tr -d "[]" | tr , " " | cut -d" " -f2-); do
       grep -q "^State:.*T" "/proc/$p/status" || exit 1; done'
else
  "$SANDBOXCTL" --socket="$tmp/sandboxd.sock" inspect long >"$tmp/inspect" 2>&1
  check "pause with sandboxd: the daemon's Sentry is stopped, the sandbox PAUSED" eval \
    'p=$(python3 -c "import json,sys; print(json.load(sys.stdin)[\"sentry_pids\"][0])" <"$tmp/inspect") &&
     grep -q "^State:.*T" "/proc/$p/status" && contains "$tmp/inspect" SANDBOX_STATE_PAUSED'
fi
# The stopped Sentry cannot answer: the figures the pause found (with
# sandboxd: the daemon's, from the sandbox's cgroup).
capture 10 "$OCI" "${R[@]}" events --stats long
check "events --stats of a paused container: a stats event, at once" python3 -c '
import json, sys
e = json.loads(open(sys.argv[1]).read())
assert e["type"] == "stats" and e["id"] == "long", e
assert e["data"]["memory"]["usage"]["usage"] > 0, e["data"]["memory"]
' "$tmp/out"
capture 10 "$OCI" "${R[@]}" exec long true
check "exec: refused while paused" eval '[ "$status" = 1 ] && contains "$tmp/err" "not running (paused)"'
capture 10 "$OCI" "${R[@]}" resume long
check "resume: exit 0, running again" eval \
  '[ "$status" = 0 ] && "$OCI" "${R[@]}" state long | grep -q "\"status\": \"running\""'
capture 30 "$OCI" "${R[@]}" exec long true
check "exec after resume: exit 0" eq "$status" 0
if [ -n "$DAEMON" ]; then
  # containerd's way: a paused container is checkpointed, and stays paused.
  "$OCI" "${R[@]}" pause long
  capture 60 "$OCI" "${R[@]}" checkpoint --image-path "$tmp/dimg" --leave-running long
  check "checkpoint with sandboxd of a paused container: the image written, still paused" eval \
    '[ "$status" = 0 ] && [ -s "$tmp/dimg/manifest.pb" ] &&
     "$OCI" "${R[@]}" state long | grep -q "\"status\": \"paused\""'
  "$OCI" "${R[@]}" resume long
fi
# events --stats: runc's JSON, with the Sentry's numbers.
capture 10 "$OCI" "${R[@]}" events --stats long
cp "$tmp/out" "$tmp/events.sb"
check "events --stats: runc's stats event with the sandbox's CPU, memory and tasks" python3 -c '
import json, sys
e = json.loads(open(sys.argv[1]).read())
assert e["type"] == "stats" and e["id"] == "long", e
d = e["data"]
assert d["cpu"]["usage"]["total"] > 0, d["cpu"]
assert d["cpu"]["usage"]["total"] == d["cpu"]["usage"]["kernel"] + d["cpu"]["usage"]["user"], d["cpu"]
assert d["memory"]["usage"]["usage"] > 0 and d["memory"]["usage"]["limit"] > 0, d["memory"]
assert d["pids"]["current"] >= 1, d["pids"]
' "$tmp/out"
if [ -n "$RUNC" ]; then
  bundle rlong 'process.args=["sleep","60"]'
  "$RUNC" --root "$tmp/root-runc" run -d --bundle "$tmp/rlong" rlong </dev/null >/dev/null 2>&1
  "$RUNC" --root "$tmp/root-runc" events --stats rlong >"$tmp/events.runc" 2>&1
  "$RUNC" --root "$tmp/root-runc" delete --force rlong >/dev/null 2>&1
  check "events --stats: the keys runc prints" python3 -c '
import json, sys
ours, runc = (json.loads(open(f).read()) for f in sys.argv[1:3])
assert set(ours) == set(runc) and set(ours["data"]) == set(runc["data"]), (ours, runc)
for k in ("cpu", "memory"):
    assert set(ours["data"][k]) == set(runc["data"][k]), k
assert set(runc["data"]["memory"]["usage"]) <= set(ours["data"]["memory"]["usage"]) | {"max"}
' "$tmp/events.sb" "$tmp/events.runc"
fi
capture 10 timeout 3 "$OCI" "${R[@]}" events --interval 1s long
check "events: a stats event every --interval while it runs" eval \
  '[ "$(grep -c "\"type\":\"stats\"" "$tmp/out")" -ge 2 ]'

# update: the running sandbox's limits (with sandboxd, its Update).
capture 10 "$OCI" "${R[@]}" update --memory 96m --pids-limit 6 long
check "update --memory --pids-limit: exit 0" eq "$status" 0
capture 10 "$OCI" "${R[@]}" events --stats long
check "update: events shows the new limits" eval \
  'contains "$tmp/out" "\"limit\":100663296" && contains "$tmp/out" "\"pids\":{\"current\":[0-9]*,\"limit\":6}"'
capture 30 "$OCI" "${R[@]}" exec long sh -c 'head -1 /proc/meminfo; for i in 1 2 3 4 5 6 7 8; do sleep 3 & done; wait'
check "update: /proc/meminfo's MemTotal follows, fork beyond the pids limit fails" eval \
  'contains "$tmp/out" "^MemTotal: *98304 kB" && contains "$tmp/err" "can.t fork"'
capture 10 sh -c "echo '{\"cpu\":{\"quota\":50000,\"period\":100000},\"pids\":{\"limit\":100}}' |
  '$OCI' --root '$tmp/root-cmd' update --resources - long"
check "update --resources - (containerd's shim's way): exit 0" eq "$status" 0
capture 30 "$OCI" "${R[@]}" exec long nproc
check "update: a CPU quota of half a CPU shows one CPU" eval '[ "$status" = 0 ] && contains "$tmp/out" "^1$"'
# -1 is unlimited, as runc's: the limits are lifted (the test's sandboxd
# has no default limits to fall back to).
capture 10 "$OCI" "${R[@]}" update --memory -1 --pids-limit -1 --cpu-quota -1 long
check "update -1: exit 0" eq "$status" 0
capture 10 "$OCI" "${R[@]}" events --stats long
check "update -1: events shows no memory or pids limit" python3 -c '
import json, sys
d = json.loads(open(sys.argv[1]).read())["data"]
assert d["memory"]["usage"]["limit"] == 9223372036854771712, d["memory"]
assert "limit" not in d["pids"], d["pids"]
' "$tmp/out"
capture 30 "$OCI" "${R[@]}" exec long sh -c 'head -1 /proc/meminfo; nproc; for i in 1 2 3 4 5 6 7 8; do sleep 1 & done; wait && echo forked'
lifted_as_host() {
  [ "$(sed -n 1p "$tmp/out" | awk '{print $2}')" = "$(awk '/^MemTotal/ {print $2}' /proc/meminfo)" ] &&
    [ "$(sed -n 2p "$tmp/out")" = "$(nproc)" ] && contains "$tmp/out" '^forked$'
}
check "update -1: the host's MemTotal and CPUs inside, fork past the old pids limit" lifted_as_host
if [ -z "$DAEMON" ]; then
  capture 10 "$OCI" "${R[@]}" update --memory 1m long
  check "update: a memory limit below what the sandbox uses is refused" eval \
    '[ "$status" = 1 ] && contains "$tmp/err" "memory limit 1048576"'
else
  # sandboxd's range (its memory limit covers the Sentry too) comes first.
  capture 10 "$OCI" "${R[@]}" update --memory 1m long
  check "update with sandboxd: a memory limit outside its range is refused, naming the field" eval \
    '[ "$status" = 1 ] && contains "$tmp/err" "limits.memory_bytes"'
fi
capture 10 "$OCI" "${R[@]}" update --cpuset-cpus 0 long
check "update: cpusets are refused, naming the flag" eval \
  '[ "$status" = 1 ] && contains "$tmp/err" "cpuset-cpus"'
capture 10 "$OCI" "${R[@]}" list --format=json
check "list --format=json" contains "$tmp/out" '"id": "long"'
capture 10 "$OCI" "${R[@]}" delete long
check "delete: a running container is refused without --force" \
  eval '[ "$status" = 1 ] && contains "$tmp/err" "that is not stopped: running"'
capture 20 "$OCI" "${R[@]}" delete --force long
check "delete --force: kills and removes" eq "$status" 0
check "delete --force: the init proxy is gone" \
  eval '! kill -0 "$(cat "$tmp/long.pid")" 2>/dev/null || grep -q "^State:.*Z" "/proc/$(cat "$tmp/long.pid")/status"'
capture 10 "$OCI" "${R[@]}" state long
check "state: an unknown id" \
  eval '[ "$status" = 1 ] && contains "$tmp/err" "container long does not exist"'
capture 10 "$OCI" "${R[@]}" delete --force long
check "delete --force: an unknown id is not an error" eq "$status" 0

# checkpoint and restore (with sandboxd: its Checkpoint and Restore): a
# counter that notes its own start once.
mkdir -p "$tmp/cvol"
bundle counter 'process.args=["sh","-c","echo start >> /vol/log; i=0; while :; do i=$((i+1)); echo $i > /vol/n; sleep 0.05; done"]' \
  "mounts=[{\"destination\":\"/proc\",\"type\":\"proc\",\"source\":\"proc\"},{\"destination\":\"/vol\",\"type\":\"bind\",\"source\":\"$tmp/cvol\",\"options\":[\"rbind\"]}]"
"$OCI" "${R[@]}" create --bundle "$tmp/counter" counter </dev/null >/dev/null 2>&1
"$OCI" "${R[@]}" start counter
sleep 1
capture 60 "$OCI" "${R[@]}" checkpoint --image-path "$tmp/img1" --leave-running counter
check "checkpoint --leave-running: exit 0, still running" eval \
  '[ "$status" = 0 ] && "$OCI" "${R[@]}" state counter | grep -q "\"status\": \"running\""'
capture 60 "$OCI" "${R[@]}" checkpoint --image-path "$tmp/img2" counter
at=$(cat "$tmp/cvol/n")
# (With sandboxd the init proxy ends when the daemon's sandbox has: soon.)
is_stopped() { "$OCI" "${R[@]}" state "$1" | grep -q '"status": "stopped"'; }
check "checkpoint: exit 0, the image written, the container stopped" eval \
  '[ "$status" = 0 ] && [ -s "$tmp/img2/manifest.pb" ] && until_true 5 is_stopped counter'
"$OCI" "${R[@]}" delete counter
capture 60 "$OCI" "${R[@]}" restore --image-path "$tmp/img2" --bundle "$tmp/counter" \
  --pid-file "$tmp/counter.pid" counter
check "restore: exit 0, running" eval \
  '[ "$status" = 0 ] && "$OCI" "${R[@]}" state counter | grep -q "\"status\": \"running\""'
sleep 1
check "restore: the counter runs on from where it was saved, not from its start" eval \
  '[ "$(cat "$tmp/cvol/n")" -gt "$at" ] && [ "$(grep -c start "$tmp/cvol/log")" = 1 ]'
capture 20 "$OCI" "${R[@]}" delete --force counter
check "restore: delete --force" eq "$status" 0

bundle short 'process.args=["true"]'
"$OCI" "${R[@]}" create --bundle "$tmp/short" short </dev/null >/dev/null 2>&1
"$OCI" "${R[@]}" start short >/dev/null 2>&1
for _ in $(seq 1 100); do
  "$OCI" "${R[@]}" state short 2>/dev/null | grep -q '"status": "stopped"' && break
  sleep 0.1
done
capture 10 "$OCI" "${R[@]}" kill short KILL
check "kill: a stopped container is refused" \
  eval '[ "$status" = 1 ] && contains "$tmp/err" "container not running"'
capture 10 "$OCI" "${R[@]}" delete short
check "delete: a stopped container" eq "$status" 0

# A signal the container's init has no handler for: a pid namespace's init
# ignores it (runc's), but SIGKILL from outside.
bundle nohandler 'process.args=["sleep","30"]'
for rt in sb runc; do
  if [ "$rt" = sb ]; then bin=$OCI; root=$tmp/root-cmd; else bin=$RUNC; root=$tmp/root-runc; fi
  [ -n "$bin" ] || continue
  "$bin" --root "$root" create --bundle "$tmp/nohandler" --pid-file "$tmp/nohandler.$rt.pid" nohandler </dev/null >/dev/null 2>&1
  "$bin" --root "$root" start nohandler
  sleep 0.5
  "$bin" --root "$root" kill nohandler TERM
  "$bin" --root "$root" kill nohandler INT
  sleep 1
  "$bin" --root "$root" state nohandler | sed -n 's/.*"status": "\(.*\)".*/after TERM, INT: \1/p' >"$tmp/nohandler.$rt"
  "$bin" --root "$root" kill nohandler KILL
  for _ in $(seq 1 50); do
    "$bin" --root "$root" state nohandler 2>/dev/null | grep -q '"status": "stopped"' && break
    sleep 0.1
  done
  "$bin" --root "$root" state nohandler | sed -n 's/.*"status": "\(.*\)".*/after KILL: \1/p' >>"$tmp/nohandler.$rt"
  "$bin" --root "$root" delete --force nohandler
done
cp "$tmp/nohandler.sb" "$tmp/out"
check "init without a handler: TERM and INT ignored, KILL ends it" eval \
  'contains "$tmp/out" "^after TERM, INT: running$" && contains "$tmp/out" "^after KILL: stopped$"'
if [ -z "$DAEMON" ]; then
  # --backend=run: `sentry run --container-init`; what needs a control
  # channel is refused, naming the backend.
  RR=(--backend=run --root "$tmp/root-run")
  "$OCI" "${RR[@]}" create --bundle "$tmp/nohandler" nohandler </dev/null >/dev/null 2>&1
  "$OCI" "${RR[@]}" start nohandler
  sleep 0.5
  "$OCI" "${RR[@]}" kill nohandler TERM
  "$OCI" "${RR[@]}" kill nohandler INT
  sleep 1
  check "--backend=run: TERM and INT to an init without a handler ignored" eval \
    '"$OCI" "${RR[@]}" state nohandler | grep -q "\"status\": \"running\""'
  capture 10 "$OCI" "${RR[@]}" events --stats nohandler
  check "--backend=run: events refused, naming the backend" eval \
    '[ "$status" = 1 ] && contains "$tmp/err" "backend=run"'
  capture 10 "$OCI" "${RR[@]}" update --memory 64m nohandler
  check "--backend=run: update refused, naming the backend" eval \
    '[ "$status" = 1 ] && contains "$tmp/err" "backend=run"'
  "$OCI" "${RR[@]}" kill nohandler KILL
  is_run_stopped() { "$OCI" "${RR[@]}" state nohandler | grep -q '"status": "stopped"'; }
  check "--backend=run: KILL ends it" until_true 5 is_run_stopped
  "$OCI" "${RR[@]}" delete --force nohandler
  check "--backend=run: nothing left under --root" eval '[ -z "$(ls "$tmp/root-run")" ]'
fi
if [ -n "$RUNC" ]; then
  check "init without a handler: the same as runc" diff "$tmp/nohandler.runc" "$tmp/nohandler.sb"
fi

# run: create and start, attached (the status and output as runc's), and
# --detach.
bundle runit 'process.args=["sh","-c","echo run-out; echo run-err >&2; exit 6"]'
capture 60 "$OCI" "${R[@]}" run --bundle "$tmp/runit" runit
cp "$tmp/out" "$tmp/run.sb"
check "run: the container's status, stdout and stderr" eval \
  '[ "$status" = 6 ] && contains "$tmp/out" "^run-out$" && contains "$tmp/err" "^run-err$"'
check "run: the container is deleted after it exits" eval '[ ! -e "$tmp/root-cmd/runit" ]'
if [ -n "$RUNC" ]; then
  capture 60 "$RUNC" --root "$tmp/root-runc" run --bundle "$tmp/runit" runit
  check "run: the same as runc run" eval '[ "$status" = 6 ] && diff "$tmp/out" "$tmp/run.sb"'
fi
bundle runtrap 'process.args=["sh","-c","trap \"echo got-term; exit 4\" TERM; echo ready; while :; do sleep 0.1; done"]'
"$OCI" "${R[@]}" run --bundle "$tmp/runtrap" runtrap </dev/null >"$tmp/runtrap.out" 2>&1 &
runpid=$!
for _ in $(seq 1 100); do grep -q ready "$tmp/runtrap.out" && break; sleep 0.1; done
kill -TERM "$runpid"
wait "$runpid"
rc=$?
check "run: a signal to run reaches the container's init (its trap's status)" eval \
  '[ "$rc" = 4 ] && grep -q "^got-term$" "$tmp/runtrap.out"'
capture 60 "$OCI" "${R[@]}" run --detach --bundle "$tmp/long" rdet
check "run --detach: exit 0, running" eval \
  '[ "$status" = 0 ] && "$OCI" "${R[@]}" state rdet | grep -q "\"status\": \"running\""'
"$OCI" "${R[@]}" delete --force rdet

bundle hooks 'hooks={"prestart":[{"path":"/bin/true"}]}'
capture 10 "$OCI" "${R[@]}" create --bundle "$tmp/hooks" hooks
check "create: a field it cannot honour is refused, naming it" \
  eval '[ "$status" = 1 ] && contains "$tmp/err" "config.json: hooks.prestart: "'
check "create: the error is in the JSON --log" python3 -c '
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
assert any(l["level"] == "error" and "hooks.prestart" in l["msg"] for l in lines), lines
' "$tmp/cmd.log"
check "create: nothing left of a refused container" eval '[ ! -e "$tmp/root-cmd/hooks" ]'
bundle netns 'linux.namespaces=[{"type":"pid"},{"type":"network","path":"/proc/1/ns/pid"}]'
capture 10 "$OCI" "${R[@]}" create --bundle "$tmp/netns" netns
check "create: a network path that is no network namespace is refused" \
  eval '[ "$status" = 1 ] && contains "$tmp/err" "network path"'

capture 10 "$OCI" features
check "features: JSON" python3 -c '
import json, sys
f = json.load(open(sys.argv[1]))
assert f["ociVersionMin"] and "pid" in f["linux"]["namespaces"], f
' "$tmp/out"
capture 10 "$OCI" --version
check "--version" contains "$tmp/out" '^sandboxd-oci version [0-9]'
check "nothing left under --root" eval '[ -z "$(ls "$tmp/root-cmd")" ] && [ -z "$(ls "$tmp/root-sb")" ]'
if [ -n "$DAEMON" ]; then
  # Every sandbox the daemon made for a container is gone from it.
  capture 10 "$SANDBOXCTL" --socket="$tmp/sandboxd.sock" ps -a -q
  check "sandboxd: every container's sandbox is gone from it" eval '[ "$status" = 0 ] && [ ! -s "$tmp/out" ]'
  capture 10 "$SANDBOXCTL" --socket="$tmp/sandboxd.sock" ps -a
  sed 's/^/# /' "$tmp/out"
fi
passed
