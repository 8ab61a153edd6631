#!/bin/sh
# Passes when the "step N loss X" lines that examples/fsdp_minimal printed (file $1) number at
# least two and the last loss is below half of the first; otherwise says what it saw.
#   loss_falls.sh OUTPUT_FILE LABEL
set -eu
awk -v label="$2" '
  $1 == "step" && $3 == "loss" { if (n++ == 0) first = $4; last = $4 }
  END {
    if (n >= 2 && last < first / 2) { printf "%s: loss %s -> %s over %d steps\n", label, first, last, n; exit 0 }
    printf "FAIL: %s: the loss did not fall by half (%d step lines, first %s, last %s)\n", label, n, first, last
    exit 1
  }' "$1"
