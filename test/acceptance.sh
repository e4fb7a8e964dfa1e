#!/usr/bin/env bash
# acceptance.sh SENTRY [SCENARIO...]
#
# Real, unmodified programs of the host's Debian installation, run natively
# and as `SENTRY run --rootfs=/ --cwd=WORK -- ...`, compared (stdout and exit
# status; stderr is shown on a mismatch). The host root is the sandbox's
# read-only rootfs: each scenario writes into WORK, an empty host directory,
# and must leave it empty on the host when it ran in the sandbox (its writes
# land in the sandbox's overlay, never on the host).
#
# Scenarios (default: all):
#   busybox   a busybox sh script: pipelines, subshells, traps, background
#             jobs, file operations, tar/gzip (test/acceptance/busybox_script.sh)
#   dash      the same script under Debian's /bin/sh (dash) with busybox applets
#   bash      bash -c with arrays, process substitution, coproc-free features
#   make      make + gcc build a C program and run it
#   python    multiprocessing (pool, queue, terminate, shared lock/value),
#             subprocess and os.fork (test/acceptance/mp_acceptance.py)
#   coreutils find | sort | xargs md5sum over /usr/share/common-licenses;
#             sort | uniq -c over a file; find /usr/lib -name '*.so*' | wc -l
#   ls        ls -la / (the lines of /dev and /proc, the sandbox's own
#             filesystems, and of /tmp, which other jobs change, aside;
#             runs of blanks squeezed: column widths follow /proc's link count)
#   tar       tar czf then tar xzf in /tmp, compared with diff -r
#   sqlite    the sqlite3 shell on a script (test/acceptance/sqlite_script.sql)
#   isolation (not compared) writes to /tmp, to a rootfs file and a delete
#             of a rootfs file are seen inside the sandbox and leave the
#             host unchanged
# A scenario whose program is not installed is skipped with one line.
# Exits 77 (CTest: skipped) when SENTRY does not exist, unless
# COMPARE_REQUIRE_SENTRY=1.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=test/lib.sh
. "$HERE/lib.sh"
usage_unless [ $# -ge 1 ] -- "SENTRY [SCENARIO...]"
SENTRY=$1
shift
require_sentry "$SENTRY"
SENTRY=$(readlink -f "$SENTRY")
DATA=$HERE/acceptance
scenarios=("$@")
[ ${#scenarios[@]} -gt 0 ] || scenarios=(busybox dash bash make python coreutils ls tar sqlite isolation)
make_tmp acceptance
TIMEOUT=${ACCEPTANCE_TIMEOUT:-240}
ENVS=(PATH=/usr/local/bin:/usr/bin:/bin HOME=/root LANG=C LC_ALL=C TERM=dumb)
fails=0

have() { [ -x "$1" ]; }

# scenario NAME PROGRAM ARGS...: runs it both ways and compares.
scenario() {
  local name=$1
  shift
  local work=$tmp/work.$name
  rm -rf "$work.native" "$work"
  mkdir -p "$work.native" "$work"
  (cd "$work.native" && timeout -k 5 "$TIMEOUT" env -i "${ENVS[@]}" "$@" \
    </dev/null >"$tmp/$name.native.out" 2>"$tmp/$name.native.err")
  local ns=$?
  local -a envflags=()
  for e in "${ENVS[@]}"; do envflags+=("--env=$e"); done
  timeout -k 5 "$TIMEOUT" "$SENTRY" run --rootfs=/ --cwd="$work" "${envflags[@]}" -- "$@" \
    </dev/null >"$tmp/$name.sandbox.out" 2>"$tmp/$name.sandbox.err"
  local ss=$?
  local ok=1
  if [ "$ns" != "$ss" ]; then
    echo "$name: exit status differs: native $ns, sandbox $ss"
    ok=0
  fi
  if ! diff -u "$tmp/$name.native.out" "$tmp/$name.sandbox.out" >"$tmp/$name.diff"; then
    echo "$name: stdout differs (- native, + sandbox):"
    head -60 "$tmp/$name.diff"
    ok=0
  fi
  if [ -n "$(ls -A "$work")" ]; then
    echo "$name: the sandbox wrote to the host directory $work:"
    ls -lA "$work" | head
    ok=0
  fi
  if [ $ok = 1 ] && [ "$ns" != 0 ]; then
    echo "$name: native run failed (exit $ns): the scenario is wrong on this host"
    head -20 "$tmp/$name.native.err"
    ok=0
  fi
  if [ $ok = 1 ]; then
    echo "ok - $name ($(wc -l <"$tmp/$name.native.out") lines of output agree)"
  else
    echo "--- native stderr:"; head -20 "$tmp/$name.native.err"
    echo "--- sandbox stderr:"; head -20 "$tmp/$name.sandbox.err"
    echo "not ok - $name"
    fails=$((fails + 1))
  fi
}

for s in "${scenarios[@]}"; do
  case "$s" in
    busybox)
      if have /bin/busybox || have /usr/bin/busybox; then
        bb=$(command -v busybox)
        scenario busybox "$bb" sh -c "BB=$bb; . $DATA/busybox_script.sh"
      else
        echo "skip - busybox: not installed (apt-get install busybox-static)"
      fi ;;
    dash)
      if have /bin/dash && command -v busybox >/dev/null; then
        scenario dash /bin/dash -c "BB=$(command -v busybox); . $DATA/busybox_script.sh"
      else
        echo "skip - dash: dash or busybox not installed"
      fi ;;
    bash)
      scenario bash /bin/bash -c '
        declare -a xs=(3 1 2); echo "${#xs[@]} items: ${xs[*]}"
        declare -A m=([k]=v [x]=y); for k in $(printf "%s\n" "${!m[@]}" | sort); do echo "$k=${m[$k]}"; done
        diff <(printf "a\nb\n") <(printf "a\nc\n"); echo "diff exit $?"
        mapfile -t lines < <(seq 3); echo "mapfile ${lines[*]}"
        printf -v s "%05d" 42; echo "$s"
        f() { local r=$(( $1 * 2 )); echo $r; }; echo "f: $(f 21)"
        sleep 0.1 & wait $!; echo "job done $?"
        set -o pipefail; false | true; echo "pipefail $?"
        (exit 3); echo "subshell $?"' ;;
    make)
      if have /usr/bin/make && have /usr/bin/gcc; then
        scenario make /bin/sh "$DATA/make_hello.sh"
      else
        echo "skip - make: make or gcc not installed"
      fi ;;
    python)
      if have /usr/bin/python3; then
        scenario python /usr/bin/python3 "$DATA/mp_acceptance.py"
      else
        echo "skip - python: /usr/bin/python3 not installed"
      fi ;;
    coreutils)
      scenario coreutils /bin/sh -c 'find /usr/share/common-licenses -type f | sort | xargs md5sum | head -20; ls /usr/share/common-licenses | wc -l; du -s /usr/share/common-licenses | cut -f1; tr -cs A-Za-z "\n" < /usr/share/common-licenses/GPL-3 | tr A-Z a-z | sort | uniq -c | sort -rn | head -15; find /usr/lib -name "*.so*" | wc -l' ;;
    ls)
      scenario ls /bin/sh -c "ls -la / | grep -Ev ' (dev|proc|tmp)\$' | tr -s ' '" ;;
    tar)
      scenario tar /bin/sh -c 'set -e; d=$(mktemp -d /tmp/acc-tar.XXXXXX); tar czf $d/l.tgz -C /usr/share common-licenses; mkdir $d/x; tar xzf $d/l.tgz -C $d/x; diff -r /usr/share/common-licenses $d/x/common-licenses && echo "tar round trip identical"; tar tzf $d/l.tgz | sort | head -5; rm -r $d' ;;
    sqlite)
      if have /usr/bin/sqlite3; then
        scenario sqlite /bin/sh -c "/usr/bin/sqlite3 < $DATA/sqlite_script.sql"
      else
        echo "skip - sqlite: /usr/bin/sqlite3 not installed"
      fi ;;
    isolation)
      marker=/tmp/sbx-acceptance-marker.$$
      victim=/etc/debian_version
      before=$(md5sum "$victim" /etc/hostname 2>/dev/null)
      timeout -k 5 "$TIMEOUT" "$SENTRY" run --rootfs=/ -- /bin/sh -c "
        echo inside > $marker && cat $marker &&
        echo appended >> $victim && tail -1 $victim &&
        rm /etc/hostname && { [ ! -e /etc/hostname ] && echo deleted; }" \
        </dev/null >"$tmp/iso.out" 2>"$tmp/iso.err"
      st=$?
      after=$(md5sum "$victim" /etc/hostname 2>/dev/null)
      if [ $st = 0 ] && [ "$(tr '\n' ' ' <"$tmp/iso.out")" = "inside appended deleted " ] &&
         [ ! -e "$marker" ] && [ "$before" = "$after" ]; then
        echo "ok - isolation (writes and deletes seen inside, host unchanged)"
      else
        echo "not ok - isolation: status $st, inside: $(tr '\n' ' ' <"$tmp/iso.out") $(head -c 300 "$tmp/iso.err")"
        [ -e "$marker" ] && { echo "  $marker reached the host"; rm -f "$marker"; }
        [ "$before" = "$after" ] || echo "  host files changed: $before -> $after"
        fails=$((fails + 1))
      fi ;;
    *) echo "unknown scenario $s" >&2; exit 2 ;;
  esac
done
[ $fails = 0 ] || { echo "$fails scenario(s) failed"; exit 1; }
echo "all scenarios passed"
