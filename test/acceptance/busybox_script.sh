# A shell script of the kind a distribution's tools run, for busybox sh:
# pipelines, subshells, functions, traps, background jobs, redirections, the
# usual applets, and files created, renamed and deleted in the working
# directory. Its output is deterministic; acceptance.sh compares it natively
# and in the sandbox.
set -e
bb=${BB:-busybox}
say() { echo "== $*"; }

say pipelines
seq 1 200 | $bb awk '{s += $1} END {print "sum", s}'
printf 'pear\napple\nfig\napple\n' | $bb sort | $bb uniq -c | $bb sed 's/^ *//'
echo "a:b:c" | $bb cut -d: -f2
$bb yes word | $bb head -n 3 | $bb tr a-z A-Z

say subshells and status
(exit 3) || echo "subshell exit $?"
x=$(echo inner; echo second) ; echo "captured: $x" | $bb tr '\n' ' '; echo
if $bb false; then echo no; else echo "false is false"; fi
v=$($bb expr 6 \* 7); echo "expr $v"

say functions and loops
fib() { a=0; b=1; i=0; while [ $i -lt "$1" ]; do t=$b; b=$((a + b)); a=$t; i=$((i + 1)); done; echo $a; }
for n in 1 5 10 20; do echo "fib $n = $(fib $n)"; done
case "hello.tar.gz" in *.tar.gz) echo "a tarball";; *) echo other;; esac

say files
mkdir -p d/sub
echo one > d/a.txt
echo two >> d/a.txt
$bb cp d/a.txt d/sub/b.txt
$bb mv d/sub/b.txt d/sub/c.txt
ln -s ../a.txt d/sub/link
$bb ls d d/sub | $bb sed 's/^/  /'
cat d/sub/link
$bb wc -l < d/a.txt
$bb readlink d/sub/link
$bb stat -c '%n %s' d/a.txt
chmod 600 d/a.txt && $bb stat -c '%a' d/a.txt
$bb find d -type f | $bb sort
$bb tar -cf t.tar d && $bb tar -tf t.tar | $bb sort
$bb gzip -c d/a.txt > a.gz && $bb gunzip -c a.gz
rm -r d t.tar a.gz
[ ! -e d ] && echo "removed"

say here documents and redirections
cat <<END | $bb grep -c line
line 1
line 2
not this one? yes, a line too
END
{ echo to-stderr >&2; echo to-stdout; } 2>/dev/null
exec 3>fd3.txt; echo via fd 3 >&3; exec 3>&-; cat fd3.txt; rm fd3.txt

say background jobs and wait
( sleep 0.2; echo "slow job" ) &
p1=$!
( echo "fast job" ) &
p2=$!
wait $p2; echo "fast done $?"
wait $p1; echo "slow done $?"
( exit 7 ) &
wait $! || echo "background exit $?"

say traps and signals
trap 'echo "got USR1"' USR1
kill -USR1 $$
trap - USR1
( trap 'echo "child got TERM"; exit 0' TERM; $bb sleep 2 & wait ) &
sh_pid=$!
$bb sleep 0.3
kill -TERM $sh_pid
wait $sh_pid || true; echo "child ended"

say environment
export SBX_VAR="with space"
$bb env | $bb grep '^SBX_VAR='
$bb sh -c 'echo "nested sh sees: $SBX_VAR"'
say done
