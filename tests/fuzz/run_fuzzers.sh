#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (build-fuzz/, ASan+UBSan) and runs each for SECONDS
# (default 60) from its seed corpus; stops at the first crash and prints the reproducer's path.
#   tests/fuzz/run_fuzzers.sh [SECONDS] [TARGET...]
# FSDP_FUZZ_DIR overrides the build directory. Corpora grow in build-fuzz/corpus/<target>/.
set -euo pipefail
cd "$(dirname "$(readlink -f "$0")")/../.."
seconds=${1:-60}
[ $# -gt 0 ] && shift
dir=${FSDP_FUZZ_DIR:-build-fuzz}
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(fuzz_tcp_store_request fuzz_tcp_store_reply)
if [ ! -f "$dir/build.ninja" ]; then
  CXX=clang++ meson setup "$dir" -Dfuzzers=true -Db_sanitize=address,undefined -Db_lundef=false \
    -Dbench=false -Dexamples=false -Dnative_arch=false >/dev/null
fi
ninja -C "$dir" $(printf 'tests/fuzz/%s ' "${targets[@]}")
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
for t in "${targets[@]}"; do
  corpus="$dir/corpus/$t"
  mkdir -p "$corpus"
  cp -n tests/fuzz/corpus/"${t#fuzz_}"/* "$corpus"/ 2>/dev/null || true
  echo "== $t: $seconds s"
  "$dir/tests/fuzz/$t" -max_total_time="$seconds" -artifact_prefix="$dir/crash-$t-" \
    -print_final_stats=1 "$corpus" 2>&1 |
    grep -E "^(#[0-9]+ *DONE|stat::number_of_executed_units|==.*ERROR|SUMMARY|artifact)" || true
  if ls "$dir"/crash-"$t"-* >/dev/null 2>&1; then
    echo "$t: CRASH, reproduce with: $dir/tests/fuzz/$t $(ls "$dir"/crash-"$t"-* | head -n 1)"
    exit 1
  fi
done
echo "no crash"
