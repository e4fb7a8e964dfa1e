#!/usr/bin/env bash
# bench/harness.sh — many sandboxes under a CPU quota.
#
# For each configuration (workload, N sandboxes, CPU quota) and each mode,
# starts N copies of bench_harness_workload together in one fresh cgroup
# whose CFS quota is the configuration's CPUs (period 100 ms), lets them run
# HARNESS_SECONDS (default 45) and measures the last third (15 s):
#
#   work/s        work units done in the window by all N, per second (a
#                 unit is ~1 µs of calibrated integer work; for getppid one
#                 call), and the ratio to native in the same configuration
#   app cpu       the workload's own CPU: units x their native CPU cost
#                 (bench_harness_workload calibrate, run once at the start)
#   cg cpu        all CPU of the cgroup over the window (cpuacct.usage, v2
#                 cpu.stat usage_usec): workload, Sentry, stubs, runsc...
#   ovh/app       (cg cpu - app cpu) / app cpu
#   cs/s          host context switches per second of the cgroup's threads
#                 (voluntary + nonvoluntary of /proc/TID/status, summed over
#                 the threads alive at the window's end; threads that exit
#                 inside the window are not counted)
#   host cs/s     /proc/stat ctxt delta per second: the whole machine, for
#                 reference only when other jobs run
#   thr/s         CFS periods throttled per second (the quota ran out)
#
# Modes: native (the workload processes alone, same cgroup and quota),
# adaptive / timer / off (`sentry run --systrap-fastpath=MODE --`), runsc
# (`runsc --platform=ptrace --network=none do`, as bench/workloads.sh).
# Within a configuration the modes run one after the other, so machine drift
# hits them alike; the same workload binary runs everywhere (static).
#
# Environment:
#   HARNESS_SECONDS=45   run length; the last third is measured (6: smoke)
#   HARNESS_CONFIGS="burner:5:0.25 burner:5:1 tick1ms:1:0.25 tick1ms:1:1
#                    tick10ms:7:1 getppid:1:1 sparse50ms:7:1"
#                        WORKLOAD:N:CPUS, workloads burner tick1ms tick10ms
#                        sparse50ms getppid
#   HARNESS_MODES="native adaptive timer off runsc"
#   HARNESS_RUNSC_CONFIGS="burner:5:1 tick1ms:1:1 getppid:1:1"
#                        the configurations runsc runs in ("all": every one)
#   SENTRY=… RUNSC=runsc HARNESS_WORKLOAD=…   binaries (default out/bin)
#   RUNSC_FLAGS="--platform=ptrace --network=none --ignore-cgroups" (without
#                        --ignore-cgroups runsc moves its sandbox out of the
#                        harness's cgroup: no quota, no usage)
# The defaults (7 configurations, 4 modes, runsc in 3) take ~24 minutes.
# Needs root and a cgroup cpu controller (v1 cpu+cpuacct, or v2 with cpu).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WL=${HARNESS_WORKLOAD:-$ROOT/out/bin/bench_harness_workload}
SENTRY=${SENTRY:-$ROOT/out/bin/sentry}
RUNSC=${RUNSC:-runsc}
SECONDS_RUN=${HARNESS_SECONDS:-45}
CONFIGS=${HARNESS_CONFIGS:-burner:5:0.25 burner:5:1 tick1ms:1:0.25 tick1ms:1:1 tick10ms:7:1 getppid:1:1 sparse50ms:7:1}
MODES=${HARNESS_MODES:-native adaptive timer off runsc}
RUNSC_CONFIGS=${HARNESS_RUNSC_CONFIGS:-burner:5:1 tick1ms:1:1 getppid:1:1}
# shellcheck disable=SC2206
RUNSC_FLAGS=(${RUNSC_FLAGS:---platform=ptrace --network=none --ignore-cgroups})
PERIOD_US=100000

die() { echo "harness: $*" >&2; exit 1; }
[ -x "$WL" ] || die "no workload at $WL; build first (see bench/README.md)"
# Absolute paths: the runs start in a scratch directory.
WL=$(realpath "$WL")
[ -e "$SENTRY" ] && SENTRY=$(realpath "$SENTRY")
[ "$(id -u)" = 0 ] || die "needs root (cgroups)"

# --- cgroups: v1 (cpu and cpuacct hierarchies, maybe co-mounted) or v2 ----
CG_CPU="" CG_ACCT="" CG_V2=""
while read -r _ mnt type opts _; do
  [ "$type" = cgroup ] || continue
  case ",$opts," in *,cpu,*) CG_CPU=$mnt ;; esac
  case ",$opts," in *,cpuacct,*) CG_ACCT=$mnt ;; esac
done </proc/mounts
if [ -z "$CG_CPU" ] || [ -z "$CG_ACCT" ]; then
  CG_CPU="" CG_ACCT=""
  v2=$(awk '$3 == "cgroup2" {print $2; exit}' /proc/mounts)
  if [ -n "$v2" ] && grep -qw cpu "$v2/cgroup.controllers" 2>/dev/null; then
    CG_V2=$v2
    grep -qw cpu "$v2/cgroup.subtree_control" || echo +cpu >"$v2/cgroup.subtree_control" ||
      die "cannot enable the cpu controller in $v2"
  else
    die "no cgroup cpu controller (v1 cpu+cpuacct or v2 cpu)"
  fi
fi

# cg_dirs NAME: the cgroup's directories (one per hierarchy).
cg_dirs() {
  if [ -n "$CG_V2" ]; then echo "$CG_V2/$1"
  elif [ "$CG_CPU" = "$CG_ACCT" ]; then echo "$CG_CPU/$1"
  else echo "$CG_CPU/$1 $CG_ACCT/$1"; fi
}
# cg_create NAME CPUS: a fresh cgroup with a quota of CPUS (e.g. 0.25).
cg_create() {
  local quota d
  quota=$(awk -v c="$2" -v p=$PERIOD_US 'BEGIN {printf "%d", c * p}')
  for d in $(cg_dirs "$1"); do mkdir -p "$d" || return 1; done
  if [ -n "$CG_V2" ]; then
    echo "$quota $PERIOD_US" >"$CG_V2/$1/cpu.max"
  else
    echo $PERIOD_US >"$CG_CPU/$1/cpu.cfs_period_us" && echo "$quota" >"$CG_CPU/$1/cpu.cfs_quota_us"
  fi
}
cg_join() { local d; for d in $(cg_dirs "$1"); do echo "$BASHPID" >"$d/cgroup.procs"; done; }
# cg_usage NAME: CPU ns of the cgroup so far.
cg_usage() {
  if [ -n "$CG_V2" ]; then awk '$1 == "usage_usec" {print $2 * 1000}' "$CG_V2/$1/cpu.stat"
  else cat "$CG_ACCT/$1/cpuacct.usage"; fi
}
cg_throttled() { awk '$1 == "nr_throttled" {print $2}' "${CG_V2:-$CG_CPU}/$1/cpu.stat"; }
cg_threads() {
  if [ -n "$CG_V2" ]; then cat "$CG_V2/$1/cgroup.threads"; else cat "$CG_CPU/$1/tasks"; fi
}
# cg_ctxsw NAME: "TID switches" for each thread in the cgroup.
cg_ctxsw() {
  local t
  for t in $(cg_threads "$1"); do
    awk -v t="$t" '/ctxt_switches/ {s += $2} END {if (NR) print t, s}' "/proc/$t/status" 2>/dev/null
  done
}
cg_remove() {
  local d i
  for d in $(cg_dirs "$1"); do
    for i in 1 2 3 4 5 6 7 8 9 10; do rmdir "$d" 2>/dev/null && break; sleep 0.2; done
  done
}
host_ctxt() { awk '$1 == "ctxt" {print $2}' /proc/stat; }
now_ns() { date +%s%N; }
sleep_until() { # NS since the epoch
  local d=$(($1 - $(now_ns)))
  [ $d -gt 0 ] && sleep "$(awk -v d=$d 'BEGIN {printf "%.3f", d / 1e9}')"
  return 0
}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/harness.XXXXXX")
CG=sbx-harness-$$
cleanup() {
  local p
  for p in $(jobs -p); do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  cg_remove "$CG"
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The native cost of a unit and of a getppid, once, outside any quota.
cal=$("$WL" calibrate) || die "calibration failed"
NS_UNIT=$(awk '/^ns_per_unit /{print $2}' <<<"$cal")
NS_GETPPID=$(awk '/^ns_per_getppid /{print $2}' <<<"$cal")

# prefix MODE: the command that runs the workload in that mode ("" = native;
# MISSING when the binary is not there).
prefix() {
  case $1 in
    native) echo "" ;;
    adaptive | timer | off)
      if [ -x "$SENTRY" ]; then echo "$SENTRY run --systrap-fastpath=$1 --"; else echo MISSING; fi ;;
    runsc)
      if command -v "$RUNSC" >/dev/null 2>&1; then echo "$RUNSC ${RUNSC_FLAGS[*]} do"; else echo MISSING; fi ;;
    *) echo MISSING ;;
  esac
}

# run_one KEY WORKLOAD N CPUS MODE: one run; writes $tmp/res.KEY with
# "ok units cg_ns ctxsw host_ctxt throttled window_ns".
run_one() {
  local key=$1 wl=$2 n=$3 cpus=$4 mode=$5 pre start t1 t2 i
  pre=$(prefix "$mode")
  if [ "$pre" = MISSING ]; then echo "$key: $mode: binary missing" >>"$tmp/errors"; return; fi
  cg_create "$CG" "$cpus" || { echo "$key: cannot create cgroup $CG" >>"$tmp/errors"; return; }
  start=$(now_ns)
  t1=$((start + SECONDS_RUN * 2000000000 / 3))
  t2=$((start + SECONDS_RUN * 1000000000))
  local pids=()
  for i in $(seq 1 "$n"); do
    (
      cg_join "$CG"
      cd "$tmp" || exit 1
      # shellcheck disable=SC2086
      exec timeout -k 5 $((SECONDS_RUN + 60)) $pre "$WL" "$wl" "$NS_UNIT" "$t1" "$t2"
    ) </dev/null >"$tmp/out.$key.$i" 2>"$tmp/err.$key.$i" &
    pids+=($!)
  done
  sleep_until "$t1"
  local u1 c1 h1 r1 u2 c2 h2 r2 tw1 tw2
  tw1=$(now_ns); u1=$(cg_usage "$CG"); h1=$(host_ctxt); r1=$(cg_throttled "$CG")
  cg_ctxsw "$CG" >"$tmp/cs1"
  sleep_until "$t2"
  # The per-thread counts first: the workloads exit right after t2.
  cg_ctxsw "$CG" >"$tmp/cs2"
  tw2=$(now_ns); u2=$(cg_usage "$CG"); h2=$(host_ctxt); r2=$(cg_throttled "$CG")
  local rc ok=0 units=0 a b
  for i in $(seq 1 "$n"); do
    wait "${pids[$((i - 1))]}"
    rc=$?
    a=$(awk '/^units_t1 /{print $2}' "$tmp/out.$key.$i")
    b=$(awk '/^units_t2 /{print $2}' "$tmp/out.$key.$i")
    if [ "$rc" = 0 ] && [ -n "$a" ] && [ -n "$b" ]; then
      ok=$((ok + 1)); units=$((units + b - a))
    else
      echo "$key: $mode #$i exit $rc: $(head -c 200 "$tmp/err.$key.$i" | tr '\n' ' ')" >>"$tmp/errors"
    fi
  done
  local cs
  cs=$(awk 'NR == FNR {c[$1] = $2; next} {s += $2 - c[$1]} END {print s + 0}' "$tmp/cs1" "$tmp/cs2")
  echo "$ok $units $((u2 - u1)) $cs $((h2 - h1)) $((r2 - r1)) $((tw2 - tw1))" >"$tmp/res.$key"
  cg_remove "$CG"
}

load_start=$(cut -d' ' -f1-3 /proc/loadavg)
time_start=$(date -u +%H:%MZ)
for c in $CONFIGS; do
  IFS=: read -r wl n cpus <<<"$c"
  for mode in $MODES; do
    if [ "$mode" = runsc ] && [ "$RUNSC_CONFIGS" != all ] && [[ " $RUNSC_CONFIGS " != *" $c "* ]]; then
      continue
    fi
    run_one "$wl.$n.$cpus.$mode" "$wl" "$n" "$cpus" "$mode"
  done
done

echo "many-sandbox harness — $(date -u +%Y-%m-%d) $time_start..$(date -u +%H:%MZ), $(nproc) CPUs," \
  "kernel $(uname -r), load average $load_start at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end"
echo "run ${SECONDS_RUN} s, measured the last third; cgroup ${CG_V2:+v2}${CG_V2:-v1}, CFS period ${PERIOD_US} us;" \
  "unit = $NS_UNIT ns of work (getppid: $NS_GETPPID ns), native calibration"
[ -x "$SENTRY" ] && echo "sentry: $SENTRY run --systrap-fastpath=MODE"
command -v "$RUNSC" >/dev/null 2>&1 && echo "runsc:  $($RUNSC --version 2>/dev/null | head -1), flags: ${RUNSC_FLAGS[*]}"
echo
printf '%-11s %2s %5s %-9s %4s %11s %7s %8s %8s %8s %9s %10s %6s\n' \
  workload n cpus mode ok work/s "x nat" "app cpu" "cg cpu" ovh/app cs/s "host cs/s" thr/s
for c in $CONFIGS; do
  IFS=: read -r wl n cpus <<<"$c"
  nat_rate=""
  for mode in $MODES; do
    key=$wl.$n.$cpus.$mode
    [ -f "$tmp/res.$key" ] || continue
    read -r ok units cg cs host thr win <"$tmp/res.$key"
    ns=$NS_UNIT
    [ "$wl" = getppid ] && ns=$NS_GETPPID
    line=$(awk -v ok="$ok" -v n="$n" -v u="$units" -v cg="$cg" -v cs="$cs" -v h="$host" \
      -v thr="$thr" -v w="$win" -v ns="$ns" -v nat="$nat_rate" '
      BEGIN {
        s = w / 1e9; rate = u / s; app = u * ns
        xn = (nat != "" && nat > 0) ? sprintf("%.2f", rate / nat) : "-"
        ovh = app > 0 ? sprintf("%.2f", (cg - app) / app) : "n/a"
        printf "%d/%d %11.0f %7s %8.3f %8.3f %8s %9.0f %10.0f %6.1f|%f",
          ok, n, rate, xn, app / w, cg / w, ovh, cs / s, h / s, thr / s, rate
      }')
    [ "$mode" = native ] && nat_rate=${line##*|}
    printf '%-11s %2s %5s %-9s %s\n' "$wl" "$n" "$cpus" "$mode" "${line%|*}"
  done
done
echo
echo "work/s: units per second, all sandboxes; app cpu / cg cpu: CPUs (cores) used by the"
echo "workload's own work / by everything in the cgroup; ovh/app = (cg - app) / app;"
echo "cs/s: context switches of the cgroup's threads; thr/s: CFS periods throttled."
if [ -s "$tmp/errors" ]; then
  echo
  echo "failures:"
  sort "$tmp/errors" | head -20
fi
