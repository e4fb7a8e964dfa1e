#!/usr/bin/env bash
# oci_podman_test.sh SANDBOXD_OCI [SENTRY]
#
# sandboxd-oci as podman's runtime (`podman --runtime`, Debian's podman 4.3
# through conmon), with podman's storage and run directories in a
# temporary directory and a busybox root as `--rootfs` (no image, no
# network: --network=none). Where runc is installed, `podman run --rm` is
# run with it too and must print the same. Then a detached container:
# podman exec (output and status), exec -t (a terminal through conmon's
# console socket), podman stop (the init's trap runs; the exit code podman
# records), podman logs. The rlimits podman puts in every spec are given
# as --ulimit (RLIMIT_NOFILE and RLIMIT_NPROC at 1024): this machine does
# not let root raise a hard limit, for runc either.
# Needs root. Exits 77 (CTest: skipped) where podman is not installed.
set -u
# shellcheck source=test/lib.sh
. "$(dirname "$0")/lib.sh"
usage_unless [ $# -ge 1 ] -- "SANDBOXD_OCI [SENTRY]"
require_built "$@"
OCI=$(readlink -f "$1")
[ $# -ge 2 ] && export SANDBOXD_OCI_SENTRY=$(readlink -f "$2")
[ "$(id -u)" = 0 ] || skip "needs root"
for b in podman conmon busybox; do
  command -v "$b" >/dev/null || skip "$b not installed"
done
HERE=$(cd "$(dirname "$0")" && pwd)
RUNC=$(command -v runc || true)
make_tmp oci_podman_test "${KEEP:-0}"
CHECK_OUT_BYTES=600
status=0
"$HERE/oci/make_rootfs.sh" "$tmp/rootfs"
PODMAN=(podman --root "$tmp/storage" --runroot "$tmp/runroot" --cgroup-manager=cgroupfs
  --events-backend=file)
# podman runs its runtime with an environment of its own: the Sentry goes
# as a global flag of the runtime's (--sentry), which podman passes on.
P=("${PODMAN[@]}" --runtime "$OCI")
[ -n "${SANDBOXD_OCI_SENTRY:-}" ] && P+=(--runtime-flag "sentry=$SANDBOXD_OCI_SENTRY")
on_exit '"${P[@]}" rm -af >/dev/null 2>&1'
U=(--ulimit nofile=1024:1024 --ulimit nproc=1024:1024 --network=none --rootfs "$tmp/rootfs")
PROG='echo hello podman; id; hostname | wc -c; ls /run/.containerenv; ulimit -n; echo oops >&2; exit 4'

capture 60 "${P[@]}" run --rm "${U[@]}" sh -c "$PROG"
cp "$tmp/out" "$tmp/run.sb"
check "podman run --rm: exit status 4" eq "$status" 4
check "podman run --rm: stdout" eval 'contains "$tmp/out" "^hello podman$" && contains "$tmp/out" "^uid=0(root)"'
check "podman run --rm: stderr" contains "$tmp/err" '^oops$'
if [ -n "$RUNC" ]; then
  capture 60 "${PODMAN[@]}" --runtime "$RUNC" run --rm "${U[@]}" sh -c "$PROG"
  check "podman run --rm: the same as with runc" eval '[ "$status" = 4 ] && diff "$tmp/out" "$tmp/run.sb"'
fi

capture 60 "${P[@]}" run -d --name p1 "${U[@]}" \
  sh -c 'trap "echo term; exit 9" TERM; echo up; while :; do sleep 0.1; done'
check "podman run -d: exit 0" eq "$status" 0
capture 10 "${P[@]}" ps --format '{{.Names}} {{.Status}}'
check "podman ps: p1 is up" grep -q '^p1 Up' "$tmp/out"
capture 30 "${P[@]}" exec p1 sh -c 'echo from-exec; exit 3'
check "podman exec: status 3 and output" eval '[ "$status" = 3 ] && contains "$tmp/out" "^from-exec$"'
capture 30 "${P[@]}" exec -t p1 sh -c 'test -t 0 && echo on-a-tty'
check "podman exec -t: a terminal" eval '[ "$status" = 0 ] && grep -q "on-a-tty" "$tmp/out"'
capture 30 "${P[@]}" update --memory 128m p1
check "podman update --memory: exit 0" eq "$status" 0
capture 30 "${P[@]}" exec p1 head -1 /proc/meminfo
check "podman update: the sandbox's memory limit follows (/proc/meminfo)" \
  contains "$tmp/out" '^MemTotal: *131072 kB'
capture 30 "${P[@]}" stop -t 10 p1
check "podman stop: exit 0" eq "$status" 0
capture 10 "${P[@]}" inspect p1 --format '{{.State.ExitCode}}'
check "podman inspect: the trap's exit code 9" eval 'grep -qx 9 "$tmp/out"'
capture 10 "${P[@]}" logs p1
check "podman logs: the init's output" eval 'contains "$tmp/out" "^up$" && contains "$tmp/out" "^term$"'
capture 10 "${P[@]}" rm p1
check "podman rm" eq "$status" 0
check "no init proxy left" eval '! pgrep -f "init-proxy --bundle=$tmp" >/dev/null'
passed
