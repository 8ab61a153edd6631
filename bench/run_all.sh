#!/usr/bin/env bash
# Runs every benchmark built in build/ and leaves JSON results in build/bench-results/.
set -euo pipefail
cd "$(dirname "$(readlink -f "$0")")/.."
out=build/bench-results
mkdir -p "$out"
echo "== training step vs PyTorch =="
build/bench/core/bench_training_step --json "$out/training_step.json" "$@"
for b in build/bench/policies/bench_* build/bench/comm/bench_*; do
  [ -x "$b" ] || continue
  echo "== $(basename "$b") =="
  "$b" || echo "(exit $?)"
done
