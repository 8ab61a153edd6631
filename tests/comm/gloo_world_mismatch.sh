#!/bin/sh
# Ranks that disagree on the world size (rank 0 told WORLD_SIZE=2, ranks 1 and 2 told 3): every
# rank ends non-zero within the timeout, and ranks 0 and 1 say in our words why, without gloo's
# internal "enforce fail" text (issue 12). Usage: gloo_world_mismatch.sh TEST_COMM_GLOO
set -u
exe=$1
dir=$(mktemp -d "${TMPDIR:-/tmp}/fsdp-gloo-mismatch.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
export MASTER_ADDR=127.0.0.1 MASTER_PORT=$((20000 + $$ % 20000)) FSDP_TIMEOUT_MS=5000
unset FSDP_STORE_PATH
run() {
  RANK=$1 WORLD_SIZE=$2 timeout 60 "$exe" --run_test=collective_matrix >"$dir/r$1.log" 2>&1
  echo $? >"$dir/r$1.rc"
}
run 0 2 &
run 1 3 &
run 2 3 &
wait
fail=0
for r in 0 1 2; do
  rc=$(cat "$dir/r$r.rc")
  if [ "$rc" = 0 ] || [ "$rc" = 124 ]; then
    echo "FAIL: rank $r exit status $rc"; fail=1
  fi
done
for r in 0 1; do
  if ! grep -q "rendezvous through tcp store .* failed: the ranks disagree on the group" \
      "$dir/r$r.log"; then
    echo "FAIL: rank $r does not say the ranks disagree:"; cat "$dir/r$r.log"; fail=1
  fi
  if grep -q "enforce fail" "$dir/r$r.log"; then
    echo "FAIL: rank $r shows gloo's internal text:"; cat "$dir/r$r.log"; fail=1
  fi
done
[ $fail = 0 ] && echo ok && head -c 600 "$dir/r0.log"
exit $fail
