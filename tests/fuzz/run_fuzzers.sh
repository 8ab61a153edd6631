#!/usr/bin/env bash
# Builds the libFuzzer targets and runs each for SECONDS (default 60) from its seed corpus; stops
# at the first crash, hang (10 s on one input) or allocation above 2 GiB and prints the
# reproducer's path.
#   tests/fuzz/run_fuzzers.sh [SECONDS] [TARGET...]       (no TARGET: every target)
#   tests/fuzz/run_fuzzers.sh --list                      (the targets' names)
# SECONDS 0 only builds.
# Each target's own file and the parser it tests are compiled by clang with libFuzzer's coverage
# and ASan+UBSan; the rest of the project (the module tree behind a model file, the policies)
# is linked from the GCC build (FSDP_BUILD_DIR, default build/; its libraries are built first),
# uninstrumented: 8 targets build in a minute where a whole clang ASan tree takes many (that
# tree: meson setup -Dfuzzers=true with CXX=clang++, then FSDP_FUZZ_TREE=DIR uses its targets).
# Binaries, grown corpora (DIR/corpus/<target>/) and crash files go to FSDP_FUZZ_DIR
# (default build-fuzz/); the seeds are tests/fuzz/corpus/<target without fuzz_>/, a dictionary
# tests/fuzz/<same>.dict.
set -euo pipefail
cd "$(dirname "$(readlink -f "$0")")/../.."
all=(fuzz_model_file fuzz_policy_expr fuzz_safetensors fuzz_fsdp_plan_args fuzz_train_lm_args
     fuzz_train_gpt_args fuzz_tcp_store_request fuzz_tcp_store_reply)
if [ "${1:-}" = --list ]; then
  printf '%s\n' "${all[@]}"
  exit 0
fi
seconds=${1:-60}
[ $# -gt 0 ] && shift
dir=${FSDP_FUZZ_DIR:-build-fuzz}
build=${FSDP_BUILD_DIR:-build}
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")
mkdir -p "$dir"

# The instrumented sources of each target, besides tests/fuzz/<target>.cpp.
declare -A parser_sources=(
  [fuzz_model_file]="tools/plan/model_file.cpp tools/plan/known_classes.cpp"
  [fuzz_policy_expr]="policies/policy_expr.cpp core/suggest.cpp"
  [fuzz_safetensors]="core/io/safetensors.cpp"
  [fuzz_fsdp_plan_args]="tools/plan/command_line.cpp policies/policy_expr.cpp
                         core/suggest.cpp"
  [fuzz_train_lm_args]="examples/train_lm_options.cpp"
  [fuzz_train_gpt_args]="examples/train_gpt_options.cpp"
  [fuzz_tcp_store_request]="comm/store/tcp_store_protocol.cpp"
  [fuzz_tcp_store_reply]="comm/store/tcp_store_protocol.cpp"
)
gcc_libs=(tools/libfsdp_plan_cli.a examples/libfsdp_examples_cli.a tools/libfsdp_plan.a
          models/libfsdp_models.a fsdp/libfsdp_layout.a policies/libfsdp_policies.a core/io/libfsdp_core_io.a
          core/libfsdp_core.a core/libfsdp_memory.a core/libfsdp_memory_stats.a
          core/libfsdp_env.a)

if [ -n "${FSDP_FUZZ_TREE:-}" ]; then
  ninja -C "$FSDP_FUZZ_TREE" $(printf 'tests/fuzz/%s ' "${targets[@]}") >/dev/null
  bin_dir=$FSDP_FUZZ_TREE/tests/fuzz
else
  [ -f "$build/build.ninja" ] || meson setup "$build" >/dev/null
  ninja -C "$build" "${gcc_libs[@]}" >/dev/null
  cxx=(clang++)
  command -v ccache >/dev/null && cxx=(ccache clang++)
  libs=("${gcc_libs[@]/#/$build/}")
  # core registers the CUDA device when the build has it (core/builtin_devices.cpp): its
  # libraries and the CUDA runtime join the link then.
  cuda_link=()
  if [ -f "$build/core/cuda/libfsdp_cuda.a" ]; then
    ninja -C "$build" core/cuda/libfsdp_cuda.a core/cuda/libfsdp_cuda_host.a \
      core/cuda/libfsdp_cuda_kernels.so >/dev/null
    libs+=("$build/core/cuda/libfsdp_cuda.a" "$build/core/cuda/libfsdp_cuda_host.a")
    cuda_lib=${CUDA_HOME:-/usr/local/cuda}/lib64
    cuda_link=(-L"$build/core/cuda" -Wl,-rpath,"$build/core/cuda" -lfsdp_cuda_kernels
               -L"$cuda_lib" -Wl,-rpath,"$cuda_lib" -lcudart)
  fi
  cxxflags=(-std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -I.
            $(pkg-config --cflags openblas simdjson))
  running=()
  spawn() {  # spawn COMMAND...: at most one per core at once; a failure stops the script
    if [ ${#running[@]} -ge "$(nproc)" ]; then
      wait "${running[0]}"
      running=("${running[@]:1}")
    fi
    "$@" &
    running+=($!)
  }
  drain() {
    for p in "${running[@]}"; do wait "$p"; done
    running=()
  }
  stale=0  # a binary missing, or older than a source, a header or a GCC library
  for t in "${targets[@]}"; do
    [ -n "${parser_sources[$t]:-}" ] || { echo "unknown target $t (--list)"; exit 2; }
    if [ ! -f "$dir/$t" ] || [ -n "$(find core comm policies fsdp tools examples tests/fuzz \
        "${libs[@]}" -newer "$dir/$t" \( -name '*.cpp' -o -name '*.h' -o -name '*.a' \) |
        head -n 1)" ]; then
      stale=1
    fi
  done
  if ((stale)); then
    # Objects apart from the link, so that ccache can keep them.
    mkdir -p "$dir/obj"
    sources=$(for t in "${targets[@]}"; do echo "tests/fuzz/$t.cpp" ${parser_sources[$t]}; done |
      tr ' ' '\n' | sort -u)
    for src in $sources; do
      spawn "${cxx[@]}" "${cxxflags[@]}" -c "$src" -o "$dir/obj/${src//\//_}.o"
    done
    drain
    for t in "${targets[@]}"; do
      objs=()
      for src in "tests/fuzz/$t.cpp" ${parser_sources[$t]}; do
        objs+=("$dir/obj/${src//\//_}.o")
      done
      # The build's libraries are unity builds (meson.build): the archive member that holds an
      # instrumented parser's uninstrumented twin also holds other files' code the target
      # needs, so both definitions reach the link; the first, the instrumented object's, wins.
      spawn clang++ -fsanitize=fuzzer,address,undefined "${objs[@]}" \
        -Wl,--allow-multiple-definition -Wl,--start-group \
        "${libs[@]}" -Wl,--end-group $(pkg-config --libs openblas simdjson fmt) "${cuda_link[@]}" \
        -pthread \
        -o "$dir/$t"
    done
    drain
  fi
  bin_dir=$dir
fi
[ "$seconds" != 0 ] || exit 0

export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# The GCC-built libraries are not instrumented: their containers carry no annotations.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_container_overflow=0}
for t in "${targets[@]}"; do
  name=${t#fuzz_}
  corpus="$dir/corpus/$t"
  mkdir -p "$corpus"
  cp -n tests/fuzz/corpus/"$name"/* "$corpus"/ 2>/dev/null || true
  dict=()
  [ -f "tests/fuzz/$name.dict" ] && dict=(-dict="tests/fuzz/$name.dict")
  echo "== $t: $seconds s"
  "$bin_dir/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$dir/crash-$t-" -print_final_stats=1 "${dict[@]}" "$corpus" 2>&1 |
    grep -E "^(#[0-9]+ *DONE|stat::number_of_executed_units|==.*ERROR|SUMMARY|artifact)" || true
  if ls "$dir"/crash-"$t"-* >/dev/null 2>&1; then
    echo "$t: CRASH, reproduce with: $bin_dir/$t $(ls "$dir"/crash-"$t"-* | head -n 1)"
    exit 1
  fi
done
echo "no crash"
