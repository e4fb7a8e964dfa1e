# A shell pipeline mid-flight across a checkpoint (test/checkpoint_test.sh).
i=0
while [ $i -lt 12 ]; do echo "line $i"; i=$((i + 1)); sleep 0.05; done |
  while read -r l; do echo "$l" | tr a-z A-Z; done | cat -n
