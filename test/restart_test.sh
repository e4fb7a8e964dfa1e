#!/usr/bin/env bash
# restart_test.sh SANDBOXD SANDBOXCTL SENTRY
#
# Sandboxes outlive their daemon (daemon/README.md, "Restarts"), on a
# private socket and state directory with the default cgroup parent:
#   - kill -9 of sandboxd: the Sentries of a detached and an attached
#     sandbox live on; the restarted daemon lists them RUNNING, `logs` has
#     the output from before and during the outage, exec, kill and rm work
#   - a sandbox whose init exited while no daemon ran is STOPPED with its
#     exit code; one whose Sentry was killed meanwhile is FAILED, with why;
#     so is one that had not been started
#   - SIGTERM leaves the sandboxes running; --shutdown-kill destroys them
#   - two daemons with their own state directories and the default cgroup
#     parent leave each other's sandboxes and cgroups alone (start, stop,
#     restart)
#   - exec'd processes (exec -d, and attached) run on through kill -9 of
#     the daemon: afterwards their output is all in `logs --pid`, and
#     `wait --pid` gives their exit codes
#   - attach (docker attach) before and after a restart: the init's output
#     follows, stdin reaches an init started with -i, ^P ^Q detaches from
#     a terminal; wait on a re-adopted sandbox whose init exits later
#   - two daemons given the same --cgroup-parent: neither touches the
#     other's sandboxes; the one that made the parent removes it once it
#     is empty, and the other makes it again at its next create
# Exits 77 (CTest: skipped) until the binaries exist.
set -u
# shellcheck source=test/lib.sh
. "$(dirname "$0")/lib.sh"
usage_unless [ $# -eq 3 ] -- "SANDBOXD SANDBOXCTL SENTRY"
require_built "$@"
SANDBOXD=$(readlink -f "$1")
SANDBOXCTL=$(readlink -f "$2")
SENTRY=$(readlink -f "$3")
make_tmp restart_test "${KEEP:-0}"
CHECK_OUT_BYTES=400

# Every Sentry a state directory of this test records is killed at exit,
# whatever happened to the daemons.
kill_recorded() {
  local f
  for f in "$tmp"/state*/sentries/*; do
    [ -e "$f" ] && kill -9 "$(basename "$f")" 2>/dev/null
  done
  return 0
}
on_exit kill_recorded

# daemon NAME [FLAGS...]: starts sandboxd with socket $tmp/NAME.sock and
# state directory $tmp/state-NAME; its pid is in $daemon_pid.
daemon_pid=
daemon() {
  local name=$1
  shift
  "$SANDBOXD" --sentry="$SENTRY" --socket="$tmp/$name.sock" \
    --state-dir="$tmp/state-$name" --pool-size=1 "$@" 2>>"$tmp/$name.log" &
  daemon_pid=$!
  on_exit "stop_pid $daemon_pid"
  wait_for_daemon "$SANDBOXCTL" "$tmp/$name.sock"
}
# ctl NAME ARGS...: sandboxctl against daemon NAME.
ctl() {
  local name=$1
  shift
  capture 60 "$SANDBOXCTL" --socket="$tmp/$name.sock" "$@"
}
# state NAME ID: the sandbox's state as ps prints it ("running", ...).
state() {
  "$SANDBOXCTL" --socket="$tmp/$1.sock" ps -a 2>/dev/null | awk -v id="$2" '$1 == id { print $2 }'
}
# sentry_pid NAME ID: the host pid of the sandbox's Sentry.
sentry_pid() {
  "$SANDBOXCTL" --socket="$tmp/$1.sock" inspect "$2" 2>/dev/null |
    tr -d ' \n' | sed -n 's/.*"sentry_pids":\[\([0-9]*\).*/\1/p'
}
# alive PID: runs, and is no zombie (an orphan that died waits for its
# new parent to reap it).
alive() {
  local st
  st=$(ps -o stat= -p "$1" 2>/dev/null) && [ "${st#Z}" = "$st" ]
}
gone() { alive "$1" || echo 1; }
# until_eq SECONDS WANT COMMAND...: waits until COMMAND prints WANT.
until_eq() {
  local secs=$1 want=$2 i
  shift 2
  for i in $(seq 1 $((secs * 10))); do
    [ "$("$@")" = "$want" ] && return 0
    sleep 0.1
  done
  return 1
}
# counted FILE: the lines "<word> N" of FILE count 0, 1, 2, ... without a gap.
counted() {
  awk 'NF != 2 || $2 != NR - 1 { bad = 1 } END { exit bad || NR == 0 }' "$1"
}
last_count() { tail -1 "$1" | awk '{ print $2 }'; }
count_loop='i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.1; done'

# --- kill -9 of the daemon ---------------------------------------------------
daemon a || { echo "not ok - sandboxd did not start"; cat "$tmp/a.log"; exit 1; }
ctl a create --name=loop --rootfs=/ -- /bin/sh -c "$count_loop"
ctl a start loop
check "detached sandbox started" eq "$status" 0
# Attached: the client's stream ends with the daemon; the sandbox does not.
"$SANDBOXCTL" --socket="$tmp/a.sock" run --name=att --rootfs=/ -- \
  /bin/sh -c "$count_loop" >"$tmp/att.out" 2>&1 &
att_client=$!
on_exit "stop_pid $att_client"
ctl a create --name=exiter --rootfs=/ -- /bin/sh -c 'sleep 2; exit 7'
ctl a start exiter
ctl a create --name=victim --rootfs=/ -- /bin/sleep 1000
ctl a start victim
ctl a create --name=notyet --rootfs=/ -- /bin/true
until_eq 10 running state a att
check "attached sandbox running" eq "$(state a att)" running
sleep 1
pids=()
for id in loop att exiter victim; do pids+=("$(sentry_pid a "$id")"); done
victim_pid=${pids[3]}
ctl a logs loop
before=$(last_count "$tmp/out")
kill -9 "$daemon_pid"
wait "$daemon_pid" 2>/dev/null
sleep 1
for i in 0 1 2 3; do
  check "kill -9 sandboxd: sentry ${pids[$i]} lives on" alive "${pids[$i]}"
done
# While no daemon runs: exiter's init exits (7), victim's Sentry is killed.
sleep 2
kill -9 "$victim_pid"
check "the client attached to the killed daemon has ended" until_eq 10 1 gone "$att_client"

daemon a
# At once: what follows `before` here was (all but a few lines) printed
# while no daemon ran.
ctl a logs loop
cp "$tmp/out" "$tmp/loop.log"
ctl a ps
check "restarted: loop RUNNING" eq "$(state a loop)" running
check "restarted: att RUNNING" eq "$(state a att)" running
check "restarted: exiter STOPPED" until_eq 5 stopped state a exiter
ctl a inspect exiter
check "restarted: exiter's exit code 7" contains "$tmp/out" '"code": 7'
check "restarted: victim FAILED" eq "$(state a victim)" failed
ctl a inspect victim
check "restarted: victim's reason names its sentry" contains "$tmp/out" \
  "sentry (pid $victim_pid) was gone when sandboxd restarted"
check "restarted: a sandbox never started is FAILED" eq "$(state a notyet)" failed
ctl a inspect notyet
check "restarted: ... saying it had not been started" contains "$tmp/out" "it had not been started"
check "logs: the counter from 0 without a gap" counted "$tmp/loop.log"
# The outage lasted over 3 s (at most 10 lines a second); the restart and
# one call took well under 0.3 s.
check "logs: output printed during the outage" ge "$(last_count "$tmp/loop.log")" $((before + 6))
ctl a logs att
cp "$tmp/out" "$tmp/att.log"
check "logs of the attached one: from 0 without a gap" counted "$tmp/att.log"
ctl a exec loop -- /bin/echo exec works
check "exec in a re-adopted sandbox" eq "$(cat "$tmp/out")" "exec works"
ctl a kill loop
check "kill of a re-adopted sandbox" eq "$status" 0
check "killed: loop STOPPED" until_eq 5 stopped state a loop
ctl a rm loop exiter victim notyet
check "rm of re-adopted and recovered-as-ended sandboxes" eq "$status" 0
check "rm: loop's sentry is gone" until_eq 5 1 gone "${pids[0]}"
check "rm: exiter's sentry is gone" until_eq 5 1 gone "${pids[2]}"
check "rm: their records are gone" eq "$(ls "$tmp/state-a/sandboxes")" att

# --- SIGTERM: the sandboxes stay; --shutdown-kill: they go -------------------
kill "$daemon_pid"
wait "$daemon_pid" 2>/dev/null
check "SIGTERM: att's sentry lives on" alive "${pids[1]}"
daemon a --shutdown-kill
check "after SIGTERM: att RUNNING" eq "$(state a att)" running
ctl a logs att
check "after SIGTERM: att's output goes on" ge "$(last_count "$tmp/out")" "$(last_count "$tmp/att.log")"
kill "$daemon_pid"
wait "$daemon_pid" 2>/dev/null
check "SIGTERM with --shutdown-kill: att's sentry is gone" until_eq 5 1 gone "${pids[1]}"
check "--shutdown-kill: no sandbox record left" eq "$(ls "$tmp/state-a/sandboxes")" ""

# --- two daemons, one default cgroup parent ----------------------------------
daemon b
b_pid=$daemon_pid
ctl b run -d --name=keep --rootfs=/ -- /bin/sh -c "$count_loop"
check "daemon b: a running sandbox" until_eq 5 running state b keep
keep_pid=$(sentry_pid b keep)
daemon c --shutdown-kill
c_pid=$daemon_pid
ctl c run --rm --rootfs=/ -- /bin/echo from c
check "daemon c beside b: run works" eq "$(cat "$tmp/out")" "from c"
check "daemon c's start left b's sandbox alone" alive "$keep_pid"
kill "$c_pid"
wait "$c_pid" 2>/dev/null
check "daemon c's stop left b's sandbox alone" alive "$keep_pid"
check "daemon c's stop: b's sandbox RUNNING" eq "$(state b keep)" running
ctl b run --rm --rootfs=/ -- /bin/echo b still creates
check "daemon c's stop: b still creates sandboxes" eq "$(cat "$tmp/out")" "b still creates"
daemon c --shutdown-kill
c_pid=$daemon_pid
check "daemon c restarted: b's sandbox alive" alive "$keep_pid"
kill -9 "$b_pid"
wait "$b_pid" 2>/dev/null
daemon b --shutdown-kill
check "daemon b restarted: keep RUNNING" eq "$(state b keep)" running
ctl c ps -aq
check "daemon c does not see b's sandbox" not_contains "$tmp/out" keep
kill "$c_pid" "$daemon_pid"
wait "$c_pid" "$daemon_pid" 2>/dev/null
check "both stopped (--shutdown-kill): keep's sentry is gone" until_eq 5 1 gone "$keep_pid"


# --- exec'd processes, attach and wait across a restart ----------------------
# has FILE TEXT: prints 1 once FILE holds TEXT.
has() { grep -q -- "$2" "$1" 2>/dev/null && echo 1; }
# stop_loop FLAG CODE: prints "pid N", then "tick N" lines until /tmp/FLAG
# exists in the sandbox, then exits CODE.
stop_loop() {
  echo "echo pid \$\$; i=0; while [ ! -e /tmp/$1 ]; do echo tick \$i; i=\$((i+1)); sleep 0.1; done; exit $2"
}
# stop_daemon PID: SIGTERM, and SIGKILL if it has not ended within 30 s
# (a daemon that hangs must not hang the test).
stop_daemon() {
  kill "$1" 2>/dev/null
  until_eq 30 1 gone "$1" || kill -9 "$1" 2>/dev/null
  wait "$1" 2>/dev/null
}
# to_fd7 TEXT: writes TEXT to descriptor 7; a reader that has gone is no
# reason for the test to die of SIGPIPE.
to_fd7() { (trap '' PIPE; printf "$1" >&7) 2>/dev/null; }
# ticks FILE: its "tick N" lines, into $tmp/ticks.
ticks() { grep '^tick ' "$1" >"$tmp/ticks"; }
daemon d --shutdown-kill
ctl d run -d --name=host --rootfs=/ -- /bin/sleep 100000
ctl d exec -d host -- /bin/sh -c "$(stop_loop stop1 3)"
dpid=$(head -1 "$tmp/out")
check "exec -d prints the process's pid" ge "${dpid:-0}" 2
"$SANDBOXCTL" --socket="$tmp/d.sock" exec host -- /bin/sh -c "$(stop_loop stop2 4)" \
  >"$tmp/ax.out" 2>"$tmp/ax.err" </dev/null &
ax_client=$!
on_exit "stop_pid $ax_client"
check "attached exec: running" until_eq 30 1 has "$tmp/ax.out" "^tick 2"
apid=$(sed -n 's/^pid //p' "$tmp/ax.out" | head -1)
ctl d run -d -i --name=reader --rootfs=/ -- /bin/sh -c 'read code; echo got $code; exit $code'
ctl d run -d --name=trapper --rootfs=/ -- /bin/sh -c 'trap "exit 6" TERM; while :; do sleep 0.1; done'
ctl d run -d -i -t --name=term --rootfs=/ -- /bin/cat
check "sandboxes with open stdin started" eq "$(state d reader)$(state d term)" runningrunning

# attach_term TEXT: attaches to `term` with stdin from a FIFO, sends
# TEXT, waits for its echo, then detaches with ^P ^Q; sets $status.
attach_term() {
  rm -f "$tmp/term.in"
  mkfifo "$tmp/term.in"
  "$SANDBOXCTL" --socket="$tmp/d.sock" attach term <"$tmp/term.in" >"$tmp/term.out" 2>"$tmp/term.err" &
  local client=$!
  exec 7>"$tmp/term.in"
  to_fd7 "$1\n"
  check "attach (tty): the echo of '$1' comes back" until_eq 30 1 has "$tmp/term.out" "$1"
  to_fd7 '\020\021'
  local i
  for i in $(seq 1 300); do
    alive "$client" || break
    sleep 0.1
  done
  wait "$client"
  status=$?
  exec 7>&-
}
attach_term hello1
check "^P ^Q detaches (exit 0)" eq "$status" 0
check "... saying so" contains "$tmp/term.err" "detached from term"
check "detached: the sandbox runs on" eq "$(state d term)" running
ctl d logs --pid="$dpid" host
ticks "$tmp/out"
before=$(last_count "$tmp/ticks")

kill -9 "$daemon_pid"
wait "$daemon_pid" 2>/dev/null
check "kill -9: the attached exec's client ends" until_eq 20 1 gone "$ax_client"
sleep 2
daemon d --shutdown-kill
ctl d exec host -- /bin/sh -c "kill -0 $dpid && kill -0 $apid && echo both alive"
check "restarted: both exec'd processes still run" eq "$(cat "$tmp/out")" "both alive"
ctl d inspect host
tr -d ' \n' <"$tmp/out" >"$tmp/inspect"
check "inspect lists the exec'd processes" contains "$tmp/inspect" "\"execs\":\[{\"pid\":$dpid,"
check "... running" contains "$tmp/inspect" '"running":true'
ctl d exec host -- /bin/touch /tmp/stop1 /tmp/stop2
ctl d wait --pid="$dpid" host
check "wait --pid after the restart: exec -d's exit code 3" eq "$status" 3
ctl d wait --pid="$apid" host
check "wait --pid after the restart: the attached exec's exit code 4" eq "$status" 4
ctl d logs --pid="$dpid" host
ticks "$tmp/out"
check "logs --pid: exec -d's output from 0 without a gap" counted "$tmp/ticks"
check "logs --pid: with what it printed during the outage" ge "$(last_count "$tmp/ticks")" $((before + 6))
ctl d logs --pid="$apid" host
ticks "$tmp/out"
check "logs --pid: the attached exec's output from 0 without a gap" counted "$tmp/ticks"
ctl d wait --pid=9999 host
check "wait --pid of no exec'd process: an error" eq "$status" 125
ctl d inspect host
tr -d ' \n' <"$tmp/out" >"$tmp/inspect"
check "inspect: the exec'd processes ended, with their codes" contains "$tmp/inspect" \
  "\"pid\":$dpid,\"process\":{[^}]*},\"exit\":{\"code\":3}"

IN=<(printf '5\n') ctl d attach reader
check "attach after the restart: stdin reaches the init (open stdin)" contains "$tmp/out" "got 5"
check "... and attach exits as the init did" eq "$status" 5
ctl d wait reader
check "wait on it: 5" eq "$status" 5
timeout 60 "$SANDBOXCTL" --socket="$tmp/d.sock" wait trapper >/dev/null 2>&1 &
waiter=$!
ctl d kill --signal=TERM trapper
wait "$waiter"
check "wait on a re-adopted sandbox whose init exits after the restart: 6" eq "$?" 6
check "... STOPPED" until_eq 10 stopped state d trapper
attach_term hello2
check "attach (tty) after the restart: ^P ^Q detaches" eq "$status" 0
ctl d attach notthere
check "attach to an unknown sandbox: an error" eq "$status" 125
stop_daemon "$daemon_pid"

# --- two daemons, one explicit cgroup parent ---------------------------------
parent=sbx-restart-test-$$
cg_dirs() { ls -d /sys/fs/cgroup/*/"$parent" /sys/fs/cgroup/"$parent" 2>/dev/null; }
on_exit "rmdir /sys/fs/cgroup/*/$parent /sys/fs/cgroup/$parent 2>/dev/null; true"
daemon e --cgroup-parent="$parent" --shutdown-kill
e_pid=$daemon_pid
if grep -q "no cgroups" "$tmp/e.log"; then
  echo "# no cgroups here: the shared-parent checks are skipped"
  stop_daemon "$e_pid"
  passed
  exit
fi
check "daemon e made the parent" test -n "$(cg_dirs)"
ctl e run -d --name=ekeep --rootfs=/ -- /bin/sleep 100000
ekeep_pid=$(sentry_pid e ekeep)
daemon f --cgroup-parent="$parent" --shutdown-kill --pool-size=0
f_pid=$daemon_pid
ctl f run -d --name=fkeep --rootfs=/ -- /bin/sleep 100000
check "same parent: daemon f's start left e's sandbox alone" alive "$ekeep_pid"
stop_daemon "$f_pid"
check "same parent: daemon f's stop left e's sandbox alone" alive "$ekeep_pid"
check "... and the parent, which it did not make" test -n "$(cg_dirs)"
daemon f --cgroup-parent="$parent" --shutdown-kill --pool-size=0
f_pid=$daemon_pid
stop_daemon "$e_pid"
check "daemon e's stop removed the parent it made (empty)" test -z "$(cg_dirs)"
ctl f run --rm --rootfs=/ -- /bin/echo parent again
check "daemon f creates again: the parent is made again" eq "$(cat "$tmp/out")" "parent again"
check "... there" test -n "$(cg_dirs)"
stop_daemon "$f_pid"
check "daemon f's stop removed the parent it made again" test -z "$(cg_dirs)"

passed
