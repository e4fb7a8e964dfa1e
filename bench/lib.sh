# shellcheck shell=bash
# Helpers shared by the bench scripts (sourced, not run): test/lib.sh's
# (the temporary directory and clean-up, stop_pid, wait_for_daemon,
# sentry_probe), and the statistics of the tables below.

# shellcheck source=test/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../test/lib.sh"

# median FILE: the median of the numeric lines of FILE ("fail" lines
# ignored); "n/a" when there are none.
median() {
  grep -v fail "$1" 2>/dev/null | sort -g | awk '{a[NR]=$1} END {if (NR==0) print "n/a"; else if (NR%2) print a[(NR+1)/2]; else printf "%.1f\n", (a[NR/2]+a[NR/2+1])/2}'
}

# spread FILE: "min..max" of the numeric lines of FILE, "-" when none.
spread() {
  grep -v fail "$1" 2>/dev/null | sort -g | awk 'NR==1{lo=$1} {hi=$1} END {if (NR) printf "%s..%s", lo, hi; else print "-"}'
}

# percentile FILE P: the P-th percentile (nearest rank) of the numeric
# lines of FILE, "n/a" when none.
percentile() {
  grep -v fail "$1" 2>/dev/null | sort -g | awk -v p="$2" '{a[NR]=$1} END {
    if (NR == 0) { print "n/a"; exit }
    r = int((p / 100) * NR + 0.999999); if (r < 1) r = 1; if (r > NR) r = NR; print a[r] }'
}

# ratio A B: "A/Bx" with one decimal, "n/a" unless both are numbers.
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a ~ /^[0-9.]+$/ && b ~ /^[0-9.]+$/ && b > 0) printf "%.1fx", a / b; else print "n/a" }'; }
