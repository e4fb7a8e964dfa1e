#!/usr/bin/env bash
# python_stdlib_test.sh SENTRY
#
# CPython's own regression tests (Debian's libpython3.11-testsuite, run as
# `python3 -m test MODULE`) natively and in the sandbox (`sentry run
# --rootfs=/`, the host's Debian /usr/bin/python3), one module at a time:
# every module that passes natively must pass in the sandbox. A module that
# fails natively on this host is listed, not checked.
#
# The sandbox's pid 1 is a /bin/sh that waits for python (a docker user's
# --init): regrtest reaps the children it left behind, and as pid 1 it
# would also be handed every orphan of the tests, which a native run's
# init takes.
#
# Modules: $SBX_PYTEST_MODULES (space-separated) if set; else the CI list
# below (about two minutes here), or with SBX_PYTEST_LONG=1 the longer
# list as well. SBX_PYTEST_TIMEOUT: seconds per module and run (300).
# SBX_PYTEST_LOGS=DIR keeps the sandbox's output of each failing module.
# Exits 77 (skipped) without SENTRY or without the test suite installed.
set -u
# shellcheck source=test/lib.sh
. "$(dirname "$0")/lib.sh"
usage_unless [ $# -eq 1 ] -- "SENTRY"
SENTRY=$1
require_sentry "$SENTRY"
SENTRY=$(readlink -f "$SENTRY")
PY=/usr/bin/python3
[ -x "$PY" ] || skip "$PY is not installed"
PYVER=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
[ -f "/usr/lib/python$PYVER/test/test_posix.py" ] ||
  skip "/usr/lib/python$PYVER/test: install libpython$PYVER-testsuite (tools/install_deps.sh)"
make_tmp python_stdlib
TIMEOUT=${SBX_PYTEST_TIMEOUT:-300}

CI_MODULES="test_posix test_logging test_os test_select test_selectors
  test_fcntl test_pty test_mmap test_tempfile test_shutil test_epoll
  test_poll test_resource test_pwd test_grp test_stat test_fileio
  test_file test_pipes test_sched test_getpass test_genericpath
  test_posixpath test_glob test_time"
LONG_MODULES="test_signal test_subprocess test_threading test_sys
  test_socket test_asyncio test_io test_multiprocessing_fork
  test_concurrent_futures test_thread test_threadsignals test_wait3
  test_wait4 test_fork1 test_ioctl test_pathlib
  test_zipfile test_tarfile test_sqlite3 test_json test_re"
if [ -n "${SBX_PYTEST_MODULES:-}" ]; then
  MODULES=$SBX_PYTEST_MODULES
elif [ "${SBX_PYTEST_LONG:-0}" = 1 ]; then
  MODULES="$CI_MODULES $LONG_MODULES"
else
  MODULES=$CI_MODULES
fi

# Both runs: the same environment, a fresh working directory under /tmp
# (regrtest writes its temporary files there), no terminal on stdin.
ENVV=(PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/tmp LANG=C.UTF-8 TERM=dumb)
run_native() { # MODULE: $status, $tmp/out
  local d="$tmp/native.$1"
  mkdir -p "$d"
  capture "$TIMEOUT" env -i "${ENVV[@]}" /bin/sh -c \
    "cd '$d' && exec $PY -m test -v $1"
}
run_sandbox() { # MODULE
  local flags=() e
  for e in "${ENVV[@]}"; do flags+=("--env=$e"); done
  capture "$TIMEOUT" "$SENTRY" run --rootfs=/ "${flags[@]}" -- /bin/sh -c \
    "mkdir -p /tmp/sbx.$1 && cd /tmp/sbx.$1 && $PY -m test -v $1; exit \$?"
}
# The failing tests' names (unittest's summary lines) in the output.
failing() {
  cat "$tmp/out" "$tmp/err" >"$tmp/both"
  grep -E '^(FAIL|ERROR): ' "$tmp/both" | head -20 | sed 's/^/    /'
  grep -E '^Timeout \(|^test_[a-z0-9_]+ (failed|crashed)' "$tmp/both" |
    head -5 | sed 's/^/    /'
}

native_failed=()
for m in $MODULES; do
  if [ ! -e "/usr/lib/python$PYVER/test/$m.py" ] &&
    [ ! -d "/usr/lib/python$PYVER/test/$m" ]; then
    echo "ok - # SKIP $m: not in this Python's test suite"
    continue
  fi
  start=$(date +%s)
  run_native "$m"
  nstatus=$status
  ntime=$(($(date +%s) - start))
  if [ "$nstatus" != 0 ]; then
    native_failed+=("$m")
    echo "ok - # SKIP $m: fails natively here (status $nstatus, ${ntime}s)"
    failing
    continue
  fi
  start=$(date +%s)
  run_sandbox "$m"
  stime=$(($(date +%s) - start))
  check "$m passes in the sandbox as natively (native ${ntime}s, sandbox ${stime}s)" \
    eq "$status" 0
  if [ "$status" != 0 ]; then
    echo "    status=$status"
    failing
    [ -z "${SBX_PYTEST_LOGS:-}" ] || cat "$tmp/out" "$tmp/err" >"$SBX_PYTEST_LOGS/$m.log"
  fi
done
[ ${#native_failed[@]} -eq 0 ] || echo "# failing natively: ${native_failed[*]}"
passed
