#!/bin/sh
# A bad command line or a comm error ends a collective benchmark with one line on stderr,
# "<program>: error: <message>", and exit code 2 (command line) or 1 (comm), never SIGABRT.
#   bench_errors.sh BENCH_THREADS [BENCH_GLOO]
set -u
threads=$1 gloo=${2:-}
dir=$(mktemp -d "${TMPDIR:-/tmp}/fsdp-bench-errors.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
failures=0

# expect WANT_RC WANT_STDERR_LINE CMD...: runs CMD with a 60 s bound.
expect() {
  want_rc=$1 want=$2
  shift 2
  timeout 60 "$@" >"$dir/out" 2>"$dir/err"
  rc=$?
  if [ "$rc" != "$want_rc" ] || ! grep -qxF -- "$want" "$dir/err"; then
    echo "FAIL: $*: exit $rc (want $want_rc), stderr:" >&2
    cat "$dir/err" >&2
    echo "  wanted the line: $want" >&2
    failures=$((failures + 1))
  fi
}

expect 2 "bench_comm_threads: error: --ranks '0' is not an integer from 1 to 1024" \
  "$threads" --ranks 0
expect 2 "bench_comm_threads: error: --ranks 'two' is not an integer from 1 to 1024" \
  "$threads" --ranks two
expect 2 "bench_comm_threads: error: --max-size '-5M' is out of range: 1 to 1024G" \
  "$threads" --max-size -5M
expect 2 "bench_comm_threads: error: --min-size '12Q' is not a size (use a byte count or 64K, \
16M, 1G)" "$threads" --min-size 12Q
expect 2 "bench_comm_threads: error: --min-size (4096 bytes) is above --max-size (1024 bytes)" \
  "$threads" --min-size 4K --max-size 1K
# The command line is bench/common's (CLI11): its messages, the same in every bench program.
expect 2 "bench_comm_threads: error: The following argument was not expected: --bogus" \
  "$threads" --bogus
expect 2 "bench_comm_threads: error: --json: 1 required FILE missing" "$threads" --json
expect 2 "bench_comm_threads: error: --iters: '0' is not an integer >= 1" "$threads" --iters 0
expect 1 "bench_comm_threads: error: cannot write $dir/no/such/dir/x.json" \
  "$threads" --min-size 1K --max-size 1K --json "$dir/no/such/dir/x.json"

if [ -n "$gloo" ]; then
  # Rank 0 of 2 alone: the rendezvous times out; the message names the backend and the timeout.
  mkdir "$dir/store"
  RANK=0 WORLD_SIZE=2 FSDP_STORE_PATH="$dir/store" FSDP_TIMEOUT_MS=1000 \
    timeout 60 "$gloo" --max-size 1K >"$dir/out" 2>"$dir/err"
  rc=$?
  if [ "$rc" != 1 ] || ! grep -q "^bench_comm_gloo: error: gloo rank 0/2.*timed out after 1000 ms" \
    "$dir/err"; then
    echo "FAIL: bench_comm_gloo with a missing peer: exit $rc (want 1), stderr:" >&2
    cat "$dir/err" >&2
    failures=$((failures + 1))
  fi
  expect 2 "bench_comm_gloo: error: environment variable FSDP_TIMEOUT_MS='soon' is not an \
integer" env RANK=0 WORLD_SIZE=1 FSDP_TIMEOUT_MS=soon "$gloo"
fi
[ "$failures" = 0 ] && echo "all bench error cases passed"
[ "$failures" = 0 ]
