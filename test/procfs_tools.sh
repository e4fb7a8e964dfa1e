#!/usr/bin/env bash
# procfs_tools.sh SENTRY
#
# Real procps and coreutils programs from the host's Debian rootfs
# (`--rootfs=/`, read-only) read the sandbox's /proc:
#   - ps lists exactly the sandbox's processes: sh as pid 1, itself as 2
#   - ps aux, top -bn1, uptime, free run and print the sandbox's view
#     (free: the host's MemTotal, the sandbox's own usage)
#   - ls -l /proc/self/fd, cat /proc/self/status, readlink /proc/self/exe
# A tool that is not installed on the host is skipped with a reason.
# Exits 77 (CTest: skipped) when SENTRY does not exist yet.
set -u
# shellcheck source=test/lib.sh
. "$(dirname "$0")/lib.sh"
usage_unless [ $# -eq 1 ] -- "SENTRY"
SENTRY=$1
require_sentry "$SENTRY"
SENTRY=$(readlink -f "$SENTRY")
make_tmp procfs_tools
CHECK_OUT_BYTES=600 CHECK_ERR_BYTES=300

# insandbox 'SHELL COMMANDS': runs them under /bin/sh in the sandbox; sets
# $status and $tmp/out, $tmp/err. The trailing `true` keeps sh from
# exec'ing the last command in place, so that sh stays pid 1.
insandbox() { capture 60 "$SENTRY" run --rootfs=/ -- /bin/sh -c "$1; true"; }
has() { grep -qE -- "$1" "$tmp/out"; }
have_tool() { # have_tool NAME: installed on the host, or a skip line
  if command -v "$1" >/dev/null 2>&1; then return 0; fi
  echo "ok - # SKIP $1: not installed on this host"
  return 1
}

if have_tool ps; then
  insandbox 'ps -e -o pid=,ppid=,comm='
  check "ps: exit 0" eq "$status" 0
  check "ps: sh is pid 1" has '^ *1 +0 sh$'
  check "ps: ps is pid 2, child of sh" has '^ *2 +1 ps$'
  check "ps: nothing else (no host processes)" eq "$(wc -l <"$tmp/out" | tr -d ' ')" 2

  insandbox 'ps aux'
  check "ps aux: exit 0" eq "$status" 0
  check "ps aux: header" has '^USER +PID +%CPU +%MEM +VSZ +RSS +TTY +STAT +START +TIME +COMMAND$'
  check "ps aux: lists itself with its arguments" has '^root +[23] .* ps aux$'
  check "ps aux: lists the shell with its command line" has '^root +1 .* /bin/sh -c ps aux; true$'
fi

if have_tool free; then
  insandbox 'free -k'
  host_total=$(awk '/^MemTotal:/ { print $2 }' /proc/meminfo)
  check "free: exit 0" eq "$status" 0
  total=$(awk '/^Mem:/ { print $2 }' "$tmp/out")
  used=$(awk '/^Mem:/ { print $3 }' "$tmp/out")
  check "free: total is the host's MemTotal" eq "$total" "$host_total"
  # The sandbox's own usage: some memory, far less than the host's total.
  check "free: used is the sandbox's (0 < used < 1 GiB)" \
    test "${used:-0}" -gt 0 -a "${used:-0}" -lt 1048576
fi

if have_tool top; then
  insandbox 'top -bn1'
  check "top: exit 0" eq "$status" 0
  check "top: task summary" has '^Tasks: +[0-9]+ total'
  check "top: lists itself" has ' top$'
fi

if have_tool vmstat; then
  insandbox 'vmstat'
  check "vmstat: exit 0" eq "$status" 0
  check "vmstat: one sample, no swap" has '^ *[0-9]+ +[0-9]+ +0 +[0-9]+ +0 +0 +0 +0 '
fi

if have_tool uptime; then
  insandbox 'uptime'
  check "uptime: exit 0" eq "$status" 0
  check "uptime: load average" has 'load average: 0\.00, 0\.00, 0\.00'
fi

if have_tool ls; then
  insandbox 'ls -l /proc/self/fd'
  check "ls -l /proc/self/fd: exit 0" eq "$status" 0
  check "ls -l /proc/self/fd: stdin is /dev/null" has ' 0 -> /dev/null$'
  check "ls -l /proc/self/fd: the directory's own fd" has ' 3 -> /proc/2/fd$'
fi

if have_tool cat; then
  insandbox 'cat /proc/self/status'
  check "cat status: exit 0" eq "$status" 0
  check "cat status: Name" has $'^Name:\tcat$'
  check "cat status: Pid 2, PPid 1" \
    eq "$(grep -E '^(Pid|PPid):' "$tmp/out" | tr '\n\t' ' _')" "Pid:_2 PPid:_1 "
fi

if have_tool readlink; then
  insandbox 'readlink /proc/self/exe; cd /tmp && readlink /proc/self/cwd'
  check "readlink: exit 0" eq "$status" 0
  check "readlink /proc/self/exe is the sandbox path" has '^/(usr/)?bin/readlink$'
  check "readlink /proc/self/cwd" has '^/tmp$'
fi

echo "1..$n"
if [ "$fails" -ne 0 ]; then
  echo "FAIL: $fails of $n checks failed"
  exit 1
fi
echo "PASS: $n checks"
