#!/usr/bin/env bash
# cpu_quota_test.sh SENTRY [SANDBOXD SANDBOXCTL]
#
# CPU time under a CPU quota counts only the time the program ran, as on
# Linux under a cgroup's cpu.max (v2) or cpu.cfs_quota_us (v1): a Python
# loop that spins on the monotonic clock for 3 s in a cgroup allowed 20%
# of one CPU runs for about 0.6 s, and CLOCK_PROCESS_CPUTIME_ID,
# CLOCK_THREAD_CPUTIME_ID, getrusage(RUSAGE_SELF) and /proc/self/stat's
# utime+stime say so. Run natively and as `sentry run --cpus=0.2
# --rootfs=/` in such a cgroup (made here, v1 cpu or v2 with the cpu
# controller), and, given SANDBOXD and SANDBOXCTL, through a sandboxd with
# `sandboxctl run --cpus=0.2` (the daemon's own cgroup). Each figure must
# be within 0.3 s or half again of the native run's, never the 3 s of
# wall time. Root only; skipped without a cgroup with a CPU controller.
set -u
# shellcheck source=test/lib.sh
. "$(dirname "$0")/lib.sh"
usage_unless [ $# -eq 1 -o $# -eq 3 ] -- "SENTRY [SANDBOXD SANDBOXCTL]"
SENTRY=$1
require_sentry "$SENTRY"
SENTRY=$(readlink -f "$SENTRY")
[ "$(id -u)" = 0 ] || skip "needs root (a cgroup of its own)"
[ -x /usr/bin/python3 ] || skip "no /usr/bin/python3"
make_tmp cpu_quota_test
CHECK_OUT_BYTES=400

cat >"$tmp/spin.py" <<'EOF'
import os, resource, sys, time
def stat_secs():
    f = open("/proc/self/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
def rusage():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
secs = float(sys.argv[1])
w0, p0, t0, r0, s0 = (time.monotonic(), time.process_time(),
                      time.thread_time(), rusage(), stat_secs())
end = w0 + secs
while time.monotonic() < end:
    pass
print("wall %.3f" % (time.monotonic() - w0))
print("process_cputime %.3f" % (time.process_time() - p0))
print("thread_cputime %.3f" % (time.thread_time() - t0))
print("rusage %.3f" % (rusage() - r0))
print("proc_stat %.3f" % (stat_secs() - s0))
EOF

# A cgroup allowed 20 ms of CPU per 100 ms: v1's cpu controller, else v2.
cg=
if [ -w /sys/fs/cgroup/cpu/cgroup.procs ] && [ -e /sys/fs/cgroup/cpu/cpu.cfs_quota_us ]; then
  cg=/sys/fs/cgroup/cpu/sbx-cpu-quota-test.$$
  mkdir "$cg" && echo 100000 >"$cg/cpu.cfs_period_us" &&
    echo 20000 >"$cg/cpu.cfs_quota_us" || cg=
elif grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
  cg=/sys/fs/cgroup/sbx-cpu-quota-test.$$
  grep -qw cpu /sys/fs/cgroup/cgroup.subtree_control ||
    echo +cpu >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null
  mkdir "$cg" && echo "20000 100000" >"$cg/cpu.max" || cg=
fi
[ -n "$cg" ] || skip "no cgroup with a CPU controller to make here"
on_exit "rmdir $cg 2>/dev/null"

# in_cgroup CMD...: CMD in the quota's cgroup, under capture.
in_cgroup() {
  capture 60 /bin/sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$cg" "$@"
}
field() { awk -v k="$1" '$1 == k { print $2 }' "$2"; }
# near VALUE NATIVE: within 0.3 s or half again of the native figure.
near() {
  awk -v v="$1" -v n="$2" 'BEGIN { exit !(v != "" && v + 0 <= n * 1.5 + 0.3 && v + 0 > 0.05) }'
}

in_cgroup /usr/bin/python3 "$tmp/spin.py" 3
cp "$tmp/out" "$tmp/native"
echo "# native under the quota: $(tr '\n' ' ' <"$tmp/native")"
native=$(field process_cputime "$tmp/native")
awk -v n="${native:-9}" 'BEGIN { exit !(n < 1.2) }' ||
  skip "the quota does not hold natively here (process CPU time ${native:-?} s of 3)"

check_figures() { # WHAT FILE
  local k
  for k in process_cputime thread_cputime rusage proc_stat; do
    check "$1: $k counts only the time run ($(field "$k" "$2") s; native $(field "$k" "$tmp/native") s)" \
      near "$(field "$k" "$2")" "$(field "$k" "$tmp/native")"
  done
}

in_cgroup "$SENTRY" run --cpus=0.2 --rootfs=/ -- /usr/bin/python3 "$tmp/spin.py" 3
check "sentry run: exit 0" eq "$status" 0
echo "# sentry run under the quota: $(tr '\n' ' ' <"$tmp/out")"
cp "$tmp/out" "$tmp/sentry"
check_figures "sentry run --cpus=0.2" "$tmp/sentry"

# Without a quota the figures still follow the time run (a lower bound:
# the loop had most of a CPU unless the host is very busy).
capture 60 "$SENTRY" run --rootfs=/ -- /usr/bin/python3 "$tmp/spin.py" 1
check "sentry run without a quota: CPU time at most the wall time" \
  awk -v v="$(field process_cputime "$tmp/out")" 'BEGIN { exit !(v > 0.05 && v <= 1.05) }'

if [ $# -eq 3 ]; then
  require_built "$2" "$3"
  SANDBOXD=$(readlink -f "$2")
  SANDBOXCTL=$(readlink -f "$3")
  SOCK=$tmp/sandboxd.sock
  kill_recorded() {
    local f pid
    for f in "$tmp"/state/sentries/*; do
      [ -e "$f" ] || continue
      pid=$(basename "$f")
      [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = "$SENTRY" ] && kill -9 "$pid" 2>/dev/null
    done
    return 0
  }
  on_exit kill_recorded
  start_bg "$tmp/daemon.log" "$SANDBOXD" --sentry="$SENTRY" --socket="$SOCK" \
    --state-dir="$tmp/state" --pool-size=1 --cgroup-parent="cpu-quota-test-$$" --shutdown-kill \
    --default-rootfs=/
  if wait_for_daemon "$SANDBOXCTL" "$SOCK"; then
    cp "$tmp/spin.py" "$tmp/spin_d.py"
    capture 90 "$SANDBOXCTL" --socket="$SOCK" run --rm --cpus=0.2 \
      -v "$tmp:/work:ro" -- /usr/bin/python3 /work/spin_d.py 3
    check "sandboxctl run --cpus=0.2: exit 0" eq "$status" 0
    echo "# sandboxctl run --cpus=0.2: $(tr '\n' ' ' <"$tmp/out")"
    cp "$tmp/out" "$tmp/daemon"
    check_figures "sandboxctl run --cpus=0.2" "$tmp/daemon"
  else
    check "sandboxd answers" false
    sed 's/^/  daemon: /' "$tmp/daemon.log" | tail -5
  fi
fi
passed
