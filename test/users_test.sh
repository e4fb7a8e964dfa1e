#!/usr/bin/env bash
# users_test.sh SENTRY [ROOTFS]
#
# Users and privileges with the rootfs's own tools (default: out/rootfs,
# the Debian root tools/build_rootfs.sh builds; skipped without it), each
# scenario also run natively where the host has the tool, outputs
# compared:
#   - `sentry run --user=33:33`: id, files it makes, a root-only file
#   - setpriv --reuid/--regid/--clear-groups (a daemon dropping to
#     www-data), then reading a root-only file: EACCES
#   - su -s /bin/sh -c CMD www-data as root
#   - a www-data process may not signal root's: EPERM
#   - /proc/self/status Uid/Gid lines after the drop
# Exits 77 (CTest: skipped) when SENTRY or ROOTFS does not exist.
set -u
# shellcheck source=test/lib.sh
. "$(dirname "$0")/lib.sh"
usage_unless [ $# -ge 1 -a $# -le 2 ] -- "SENTRY [ROOTFS]"
SENTRY=$1
ROOTFS=${2:-$(dirname "$0")/../out/rootfs}
require_sentry "$SENTRY"
[ -x "$ROOTFS/usr/bin/setpriv" ] || skip "no setpriv in $ROOTFS (tools/build_rootfs.sh)"
[ "$(id -u)" = 0 ] || skip "needs root (the native runs drop to www-data)"
fails=0
n=0
check() { # check DESCRIPTION GOT WANT
  n=$((n + 1))
  if [ "$2" = "$3" ]; then
    echo "ok $n - $1"
  else
    echo "not ok $n - $1: got '$2', want '$3'"
    fails=$((fails + 1))
  fi
}
insandbox() { # insandbox FLAGS... -- PROGRAM ARGS...
  timeout -k 5 60 "$SENTRY" run --rootfs="$ROOTFS" --env=PATH=/usr/sbin:/usr/bin:/sbin:/bin \
    "$@" </dev/null 2>&1
}

check "--user=33:33 id" "$(insandbox --user=33:33 -- /usr/bin/id)" \
  "uid=33(www-data) gid=33(www-data) groups=33(www-data)"
check "--user=33:33,4,24 groups" "$(insandbox --user=33:33,4,24 -- /usr/bin/id -G)" "33 4 24"
check "--user: a root-only file" \
  "$(insandbox --user=33:33 -- /bin/cat /etc/shadow; echo "status $?")" \
  "/bin/cat: /etc/shadow: Permission denied
status 1"
check "--user: new files belong to the user" \
  "$(insandbox --user=33:33 -- /bin/sh -c 'touch /tmp/f && stat -c %u:%g /tmp/f')" "33:33"
check "--user: /proc/self/status" \
  "$(insandbox --user=33:33 -- /bin/grep -E '^(Uid|Gid|CapEff)' /proc/self/status)" \
  "Uid:	33	33	33	33
Gid:	33	33	33	33
CapEff:	0000000000000000"
check "--user=bad refused" "$(insandbox --user=abc -- /bin/true >/dev/null; echo $?)" 125

# The same commands natively (the host's setpriv and su) and inside.
both() { # both DESCRIPTION SHELL-COMMANDS
  local native inside
  native=$(timeout -k 5 60 env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin /bin/sh -c "$2" </dev/null 2>&1)
  inside=$(insandbox -- /bin/sh -c "$2")
  check "$1" "$inside" "$native"
}
drop='setpriv --reuid=33 --regid=33 --clear-groups'
both "setpriv drops to www-data" "$drop id"
both "setpriv: a root-only file" "$drop cat /etc/shadow 2>&1 | sed 's/^[^:]*: //'; echo \$?"
both "setpriv: status lines" "$drop grep -E '^(Uid|Gid|Groups)' /proc/self/status"
both "setpriv: root's process is out of reach" \
  "sleep 30 & p=\$!; $drop sh -c \"kill \$p\" 2>&1 | sed \"s/\$p/PID/\"; kill \$p"
both "setpriv --init-groups" "setpriv --reuid=33 --regid=33 --init-groups id -G"
both "su to www-data" "su -s /bin/sh -c 'id -un; id -gn' www-data"

echo "$((n - fails))/$n passed"
[ "$fails" = 0 ]
