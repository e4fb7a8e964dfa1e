#!/usr/bin/env bash
# redis-server in `sentry run --network=host` under redis-benchmark GET
# from the host, for an A/B of Sentry binaries or flags interleaved in one
# run: per round, each configuration in turn. Prints requests/s and the
# CPU time of the Sentry and its stub processes per request (user + sys,
# start-up included), and the load average; then the medians.
#
#   CONFIGS="main:/path/to/main/sentry:;new:out/bin/sentry:;patched:out/bin/sentry:--systrap-patch=on" \
#     bench/redis_ab.sh ROUNDS N CONNECTIONS
#
# With REDIS_AB_STRACE=1 (one configuration at a time, strace installed)
# it prints instead the host calls per request of the Sentry and its stubs
# (strace -f attached after a warm-up), by call and by thread.
set -u
ROUNDS=${1:-5}; N=${2:-20000}; C=${3:-50}
CONFIGS=${CONFIGS:-"sentry:$(cd "$(dirname "$0")/.." && pwd)/out/bin/sentry:"}
TMP=$(mktemp -d /tmp/redis_ab.XXXXXX)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT
port=$((26600 + RANDOM % 300))
start() {  # start BIN FLAGS: redis-server in the sandbox on $port
  port=$((port + 1))
  # shellcheck disable=SC2086
  /usr/bin/time -f '%U %S' -o "$TMP/time" "$1" run --network=host $2 -- \
    /usr/bin/redis-server --port "$port" --save '' --appendonly no >/dev/null 2>&1 &
  pid=$!
  for _ in $(seq 1 400); do
    [ "$(redis-cli -p "$port" PING 2>/dev/null)" = PONG ] && return 0
    sleep 0.05
  done
  echo "redis-server did not answer on $port" >&2
  return 1
}
finish() {
  redis-cli -p "$port" shutdown nosave >/dev/null 2>&1
  wait "$pid" 2>/dev/null
  pid=
}
bench() { redis-benchmark -p "$port" -c "$C" -n "$1" -t get -q 2>/dev/null |
            tr '\r' '\n' | grep -o '[0-9.]* requests' | tail -1 | cut -d' ' -f1; }

IFS=';' read -ra cs <<<"$CONFIGS"
if [ "${REDIS_AB_STRACE:-0}" = 1 ]; then
  for c in "${cs[@]}"; do
    IFS=: read -r label bin flags <<<"$c"
    start "$bin" "$flags" || exit 1
    bench 200 >/dev/null
    # Every process under `sentry run` (itself under time(1)): the Sentry
    # and its stub processes.
    args=()
    todo=$(cat /proc/"$pid"/task/*/children)
    while [ -n "$todo" ]; do
      next=
      for k in $todo; do
        args+=(-p "$k")
        next="$next $(cat /proc/"$k"/task/*/children 2>/dev/null)"
      done
      todo=$(echo $next)
    done
    strace -f -qq "${args[@]}" -o "$TMP/trace" 2>/dev/null &
    spid=$!
    sleep 1
    bench "$N" >/dev/null
    kill -INT "$spid"; wait "$spid" 2>/dev/null
    finish
    echo "# $label: host calls per request (c=$C, n=$N, load $(cut -d' ' -f1 /proc/loadavg))"
    python3 - "$N" "$TMP/trace" <<'P'
import collections, re, sys
n = int(sys.argv[1]); calls = collections.Counter()
by_tid = collections.defaultdict(collections.Counter)
for line in open(sys.argv[2]):
    m = re.match(r'(\d+)\s+(\w+)\(', line)
    if m:
        calls[m[2]] += 1; by_tid[m[1]][m[2]] += 1
print('total %.2f' % (sum(calls.values()) / n))
for c, k in calls.most_common(10): print('  %-14s %.2f' % (c, k / n))
for t, cc in sorted(by_tid.items(), key=lambda x: -sum(x[1].values()))[:6]:
    print('  thread %s: %s' % (t, ' '.join('%s=%.2f' % (c, k / n) for c, k in cc.most_common(6))))
P
  done
  exit 0
fi

for _ in $(seq 1 "$ROUNDS"); do
  for c in "${cs[@]}"; do
    IFS=: read -r label bin flags <<<"$c"
    start "$bin" "$flags" || exit 1
    rps=$(bench "$N")
    finish
    cpu=$(awk -v n="$N" '{printf "%.1f", ($1 + $2) * 1e6 / n}' "$TMP/time")
    printf '%-12s c%s rps=%9s cpu_us/req=%6s load=%s\n' "$label" "$C" "$rps" "$cpu" \
      "$(cut -d' ' -f1 /proc/loadavg)" | tee -a "$TMP/rows"
  done
done
python3 - "$TMP/rows" <<'P'
import collections, re, statistics, sys
d = collections.defaultdict(list)
for line in open(sys.argv[1]):
    m = re.match(r'(\S+)\s+c\d+ rps=\s*([\d.]+) cpu_us/req=\s*([\d.]+)', line)
    if m: d[m[1]].append((float(m[2]), float(m[3])))
for k, xs in d.items():
    print('median %-12s rps %.0f  cpu_us/req %.1f  (%d rounds)' % (
        k, statistics.median(x[0] for x in xs), statistics.median(x[1] for x in xs), len(xs)))
P
