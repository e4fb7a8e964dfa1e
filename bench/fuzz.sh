#!/usr/bin/env bash
# bench/fuzz.sh: the syscall fuzzer's long run (minutes): SEEDS seeds of
# SECONDS each on every usable platform, through test/fuzz/fuzz.sh, and
# one summary line per platform (calls fuzzed, crashes, hangs, OOMs,
# failed seeds). The CI slice (ctest -L fuzz) runs 6 of these seeds for
# 8 s each.
#
#   bench/fuzz.sh                    # seeds 1..20, 20 s each, systrap + kvm
#   SEEDS="1 5 7" SECONDS_PER_SEED=60 bench/fuzz.sh
#
# Environment: SENTRY, FUZZER (out/bin/sentry,
# out/build/test/bin/fuzz/syscall_fuzz), SEEDS, SECONDS_PER_SEED,
# PLATFORMS ("systrap kvm"); FUZZ_WORKERS, FUZZ_THREADS, FUZZ_ARGS as in
# test/fuzz/fuzz.sh.
set -u
cd "$(dirname "$0")/.."
SENTRY=${SENTRY:-out/bin/sentry}
FUZZER=${FUZZER:-out/build/test/bin/fuzz/syscall_fuzz}
read -r -a seeds <<<"${SEEDS:-$(seq -s ' ' 1 20)}"
secs=${SECONDS_PER_SEED:-20}
echo "bench/fuzz.sh $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null), load $(cut -d' ' -f1-3 /proc/loadavg)"
status=0
summary=()
for p in ${PLATFORMS:-systrap kvm}; do
  log=$(mktemp "${TMPDIR:-/tmp}/bench-fuzz.$p.XXXXXX")
  FUZZ_PLATFORM=$p FUZZ_SECONDS=$secs test/fuzz/fuzz.sh "$SENTRY" "$FUZZER" \
    "${seeds[@]}" | tee "$log"
  rc=${PIPESTATUS[0]}
  [ "$rc" = 1 ] && status=1
  if [ "$rc" = 77 ]; then
    summary+=("$p: skipped ($(grep -m1 SKIP "$log"))")
  else
    summary+=("$p: $(grep -m1 '^calls fuzzed' "$log"); $(grep -m1 '^runs:' "$log"); $(grep -m1 '^FAILED' "$log" || echo 'no failed seeds')")
  fi
  rm -f "$log"
done
echo "== summary, ${#seeds[@]} seeds x $secs s, load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%s\n' "${summary[@]}"
exit $status
