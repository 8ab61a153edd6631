#!/usr/bin/env bash
# The GPU machine's checks in one call (at most 8 minutes at 16 cores): preflight, unpack the
# carried Debian packages into a prefix, configure and build only what the checks need, then the
# gpu suite (op parity, allocator, runtime, the CUDA kernel table), compute-sanitizer memcheck and
# racecheck on a parity subset, the NCCL world-1 test, the kernel bench beside PyTorch in the same
# run, then the device layer end to end: the fsdp suites with FSDP_TEST_DEVICE=cuda (thread ranks
# on the one GPU), train_gpt --device cuda against --device cpu, train_gpt's tokens/s and MFU
# beside PyTorch eager's at GPT-2 124M (gpt_speed), and the stream sanitizer over an FSDP step.
#
#   tools/fetch_device_debs.sh                           # here, once: .debs/ (carry [".debs"])
#   OUT=$OUT bash tests/gpu/run_device_checks.sh         # there
#   OUT=/tmp/out bash tests/gpu/run_device_checks.sh --dry-run   # here: no GPU steps
#   OUT=/tmp/out WORK=/work/tmp/emu bash tests/gpu/run_device_checks.sh --emulated   # here
#
# Each step runs under its own `timeout`; a failed step does not stop the rest (only a failed
# preflight or build skips what depends on it). Logs go into $OUT/logs.tar.gz; $OUT/summary.txt
# holds the table printed last. --dry-run unpacks, relocates, configures and builds for real in a
# temporary prefix and runs the tests (which skip without a device); it skips nvidia-smi, the
# sanitizers and PyTorch. --emulated rehearses the GPU steps here: the same steps in the same
# order, the programs on the emulated device (tests/gpu/emulation: its libraries first on
# LD_LIBRARY_PATH), every limit times LIMIT_SCALE (default 4: a 2-core machine); what needs the
# real hardware or its tools is skipped with the reason in the summary.
set -uo pipefail
cd "$(dirname "$(readlink -f "$0")")/../.."
SRC=$PWD
: "${OUT:?set OUT to the folder that comes back}"
DRY=0 EMU=0
case "${1:-}" in
  --dry-run) DRY=1 ;;
  --emulated) EMU=1 ;;
  "") ;;
  *)
    echo "run_device_checks.sh: unknown argument '$1' (--dry-run or --emulated)" >&2
    exit 2
    ;;
esac
JOBS=${JOBS:-$(nproc)}
LIMIT_SCALE=${LIMIT_SCALE:-$([ $EMU = 1 ] && echo 4 || echo 1)}
# WORK=DIR keeps the prefix and build between runs (a second dry run rebuilds nothing).
KEEP_WORK=${WORK:+1}
WORK=${WORK:-$(mktemp -d /tmp/fsdp-gpu.XXXXXX)}
PREFIX=$WORK/prefix  # the unpacked .debs
SHIM=$WORK/shim      # unversioned links to the CUDA toolkit's and the wheels' libraries
BUILD=$WORK/build
LOGS=$WORK/logs
mkdir -p "$OUT" "$LOGS" "$PREFIX" "$SHIM/include" "$SHIM/lib"
rm -rf "${LOGS:?}"/*  # a kept WORK's earlier logs would reach this run's summary
EMU_LIBS=$BUILD/tests/gpu/emulation  # the emulated libcudart, libcublasLt, libfsdp_cuda_kernels
export SRC DRY EMU JOBS WORK PREFIX SHIM BUILD LOGS EMU_LIBS

NAMES=() STATUS=() SECS=()
# The whole call ends by TOTAL_LIMIT seconds (default 450, inside the 8 minutes): a step gets at
# most what is left less 20 s for the tarball and the summary, and none starts with under 10 s.
DEADLINE=$(($(date +%s) + ${TOTAL_LIMIT:-$((450 * LIMIT_SCALE))}))
# step NAME SECONDS FUNCTION: runs FUNCTION under timeout (SECONDS times LIMIT_SCALE), its output
# in $LOGS/NAME.log. Status: ok, FAIL (rc), TIMEOUT, SKIP (rc 77: no device), or SKIP (why)
# without running; a step may qualify its status by a line in $LOGS/NAME.note.
# SKIP_STEPS="memcheck racecheck ..." leaves those steps out (what depends on one is skipped too),
# e.g. to give gpt_speed the time of a whole call.
step() {
  local name=$1 limit=$2 fn=$3 start rc status left
  case " ${SKIP_STEPS:-} " in
    *" $name "*)
      skip "$name" "SKIP_STEPS"
      return 1
      ;;
  esac
  start=$(date +%s)
  limit=$((limit * LIMIT_SCALE))
  left=$((DEADLINE - start - 20))
  if [ $left -lt 10 ]; then
    skip "$name" "no time left"
    return 1
  fi
  [ $left -lt $limit ] && limit=$left
  echo "== $name (limit ${limit}s)"
  rm -f "$LOGS/$name.note"
  timeout --kill-after=10 "$limit" bash -c "$fn" >"$LOGS/$name.log" 2>&1
  rc=$?
  case $rc in
    0) status=ok ;;
    77) status="SKIP (no device)" ;;
    124 | 137) status="TIMEOUT after ${limit}s" ;;
    *) status="FAIL (rc $rc)" ;;
  esac
  [ -s "$LOGS/$name.note" ] && status="$status ($(head -n 1 "$LOGS/$name.note"))"
  tail -n 5 "$LOGS/$name.log" | sed 's/^/   /'
  NAMES+=("$name") STATUS+=("$status") SECS+=($(($(date +%s) - start)))
  [ $rc = 0 ] || [ $rc = 77 ]
}
skip() {
  NAMES+=("$1") STATUS+=("SKIP ($2)") SECS+=(0)
}

# --- preflight: the tools, and where the CUDA toolkit, cuBLAS and NCCL live. Writes
# $WORK/paths.env (CUDA_HOME, CUDA_DIRS, NCCL_DIR) for the steps after it.
preflight() {
  set -e
  missing=()
  if [ "$DRY" = 0 ] && [ "$EMU" = 0 ]; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm \
      --format=csv || missing+=(nvidia-smi)
  fi
  command -v dpkg >/dev/null || command -v ar >/dev/null || missing+=("dpkg or ar")
  for tool in g++ meson ninja python3 tar; do
    command -v $tool >/dev/null || missing+=($tool)
  done
  nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  [ -x "$nvcc" ] || missing+=(nvcc)
  cuda_home=$(dirname "$(dirname "$(readlink -f "$nvcc")")")
  echo "nvcc: $nvcc ($cuda_home)"; "$nvcc" --version | tail -2 || true
  g++ --version | head -1 || true
  echo "meson $(meson --version 2>/dev/null), ninja $(ninja --version 2>/dev/null)"
  site=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null || true)
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
    "available", torch.cuda.is_available())' || echo "torch: not importable (bench skips it)"
  # NCCL: the image's wheel first (nvidia/nccl), then the toolkit. Without it the build goes on
  # with -Dnccl=disabled and the NCCL step is skipped: the kernels do not need it.
  nccl=""
  for d in "$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null)" \
    "$site/nvidia/nccl" "$cuda_home"; do
    if [ -n "$d" ] && [ -f "$d/include/nccl.h" ] && ls "$d"/lib*/libnccl.so* >/dev/null 2>&1; then
      nccl=$d
      break
    fi
  done
  [ -n "$nccl" ] || echo "preflight: NCCL not found (nccl.h and libnccl.so*): its step is skipped"
  # cuBLASLt and the runtime: the toolkit first, then NVIDIA's cu13 wheels.
  dirs=("$cuda_home")
  for d in "$site/nvidia/cu13" "$site/nvidia/cublas" "$site/nvidia/cuda_runtime"; do
    [ -d "$d" ] && dirs+=("$d")
  done
  found_lt=0
  for d in "${dirs[@]}"; do
    if [ -f "$d/include/cublasLt.h" ] && ls "$d"/lib*/libcublasLt.so* >/dev/null 2>&1; then
      found_lt=1
    fi
  done
  [ $found_lt = 1 ] || missing+=("cuBLASLt (cublasLt.h and libcublasLt.so* in ${dirs[*]})")
  echo "NCCL: ${nccl:-none}"
  echo "CUDA/cuBLAS prefixes: ${dirs[*]}"
  for d in .debs; do
    ls $d/*.deb >/dev/null 2>&1 ||
      missing+=(".debs/*.deb (run tools/fetch_device_debs.sh, carry .debs)")
  done
  {
    echo "CUDA_HOME=$cuda_home"
    echo "NCCL_DIR=$nccl"
    echo "CUDA_DIRS=\"${dirs[*]}\""
  } >"$WORK/paths.env"
  if [ ${#missing[@]} -gt 0 ]; then
    printf 'preflight: MISSING %s\n' "${missing[@]}"
    exit 1
  fi
  echo "preflight: everything found"
}

# --- the .debs into $PREFIX (never /), their .pc files pointed there; the shim prefix with
# unversioned links (the wheels ship only libfoo.so.N).
unpack() {
  set -e
  . "$WORK/paths.env"
  for f in "$SRC"/.debs/*.deb; do
    if command -v dpkg >/dev/null; then
      dpkg -x "$f" "$PREFIX"
    else  # a .deb is an ar archive holding data.tar.*; tar detects the compression of a file
      data=$(ar t "$f" | grep '^data.tar')
      ar p "$f" "$data" >"$WORK/$data"
      tar -xf "$WORK/$data" -C "$PREFIX"
      rm "$WORK/$data"
    fi
  done
  find "$PREFIX" -name '*.pc' -print0 | xargs -0 sed -i \
    -e "s|=/usr|=$PREFIX/usr|g" -e "s|-I/usr|-I$PREFIX/usr|g" -e "s|-L/usr|-L$PREFIX/usr|g"
  # One include and one lib folder holding the toolkit's, cuBLAS's and NCCL's files: comm's
  # nccl_home wants nccl.h, libnccl and libcudart in one prefix, core/cuda's cublas_home
  # cublasLt.h and libcublasLt.
  for d in $CUDA_DIRS $NCCL_DIR; do
    for f in "$d"/include/*; do
      [ -e "$SHIM/include/$(basename "$f")" ] || ln -s "$f" "$SHIM/include/"
    done
    for f in "$d"/lib/*.so* "$d"/lib64/*.so*; do
      [ -e "$f" ] || continue
      b=$(basename "$f")
      [ -e "$SHIM/lib/$b" ] || ln -s "$(readlink -f "$f")" "$SHIM/lib/$b"
      u=${b%%.so*}.so  # libnccl.so.2 -> libnccl.so
      [ -e "$SHIM/lib/$u" ] || ln -s "$(readlink -f "$f")" "$SHIM/lib/$u"
    done
  done
  ls "$SHIM/lib" | grep -E '^lib(cudart|cublasLt|nccl)\.so$'
  echo "unpacked $(ls "$SRC"/.debs/*.deb | wc -l) packages into $PREFIX"
}

# The environment every later step needs: pkg-config only in the prefix, Boost there, and the
# libraries found at run time.
write_env() {
  local triplet=x86_64-linux-gnu lib=$PREFIX/usr/lib/x86_64-linux-gnu
  cat >"$WORK/build.env" <<EOF
export PKG_CONFIG_LIBDIR=$lib/pkgconfig:$lib/openblas-pthread/pkgconfig:$PREFIX/usr/share/pkgconfig\
:$PREFIX/usr/lib/pkgconfig
export BOOST_ROOT=$PREFIX/usr
export CMAKE_PREFIX_PATH=$PREFIX/usr
export LD_LIBRARY_PATH=$SHIM/lib:$lib:$lib/openblas-pthread:\${LD_LIBRARY_PATH:-}
export LIBRARY_PATH=$lib/openblas-pthread:\${LIBRARY_PATH:-}
export PATH=\$PATH:$PREFIX/usr/bin
EOF
  # pkg-config from the prefix when the image has none.
  command -v pkg-config >/dev/null ||
    echo "export PKG_CONFIG=$PREFIX/usr/bin/pkgconf" >>"$WORK/build.env"
  # What the steps that run programs source: --emulated puts the emulated device's libraries
  # first (before the shim's real ones; LD_LIBRARY_PATH also wins over the programs' RUNPATH to
  # the real libfsdp_cuda_kernels.so). The build never sees them.
  # Boost.Test's colours would put escape codes in the logs and the summary.
  printf '. %s\nexport BOOST_TEST_COLOR_OUTPUT=no\n' "$WORK/build.env" >"$WORK/run.env"
  [ "$EMU" = 0 ] || echo "export LD_LIBRARY_PATH=$EMU_LIBS:\$LD_LIBRARY_PATH" >>"$WORK/run.env"
}

# --emulated: PROGRAM's CUDA libraries must resolve to the emulated ones (a real libcudart here
# would find no device, and the step would skip instead of running). libcublasLt is opened by
# its soname at the first product (core/cuda/cublaslt_library.h): the same LD_LIBRARY_PATH
# finds the emulated one first.
emulated_libs() {
  [ "$EMU" = 1 ] || return 0
  local found bad
  found=$(ldd "$1" | grep -E 'lib(cudart|fsdp_cuda_kernels)\.so')
  echo "$found"
  bad=$(echo "$found" | grep -v "=> $EMU_LIBS/")
  if [ -n "$bad" ] || [ "$(echo "$found" | wc -l)" != 2 ] ||
    [ ! -e "$EMU_LIBS/libcublasLt.so.13" ]; then
    echo "emulated: $(basename "$1") does not load the emulated libraries of $EMU_LIBS"
    return 1
  fi
}

configure() {
  set -e
  . "$WORK/build.env"
  . "$WORK/paths.env"
  export PATH=$CUDA_HOME/bin:$PATH
  nccl=disabled
  [ -n "$NCCL_DIR" ] && nccl=enabled
  reconfigure=""
  [ -f "$BUILD/build.ninja" ] && reconfigure=--reconfigure  # WORK kept from an earlier run
  meson setup $reconfigure "$BUILD" "$SRC" -Dcuda=enabled -Dnccl=$nccl -Dmpi=disabled \
    -Dgloo=disabled -Dbench=true -Dexamples=true -Dcublas_home="$SHIM" -Dnccl_home="$SHIM"
}

build() {
  set -e
  . "$WORK/build.env"
  . "$WORK/paths.env"
  export PATH=$CUDA_HOME/bin:$PATH
  targets="tests/gpu/test_cuda_host tests/gpu/test_gpu_kernels tests/gpu/test_gpu_gemm
    tests/gpu/test_gpu_runtime tests/gpu/test_gpu_kernel_table tests/gpu/test_gpu_threads_collectives
    tests/gpu/test_gpu_stream_sanitizer bench/gpu/bench_gpu_kernels"
  [ -z "$NCCL_DIR" ] || targets="$targets tests/comm/test_comm_nccl"
  # --emulated: the emulated device's three libraries (tests/gpu/emulation; Boost.Context).
  if [ "$EMU" = 1 ]; then
    targets="$targets tests/gpu/emulation/libcudart.so.13 tests/gpu/emulation/libcublasLt.so.13
      tests/gpu/emulation/libfsdp_cuda_kernels.so"
  fi
  ninja -C "$BUILD" -j"$JOBS" $targets
}

# What the device-layer steps run, built apart so that a slow build of them never costs the
# kernel checks above.
FSDP_SUITES="fsdp_runtime fsdp_mixed_precision"
export FSDP_SUITES
build_fsdp() {
  set -e
  . "$WORK/build.env"
  . "$WORK/paths.env"
  export PATH=$CUDA_HOME/bin:$PATH
  targets="examples/train_gpt tests/fsdp/test_fsdp_fake_cuda_runtime"
  for t in $FSDP_SUITES; do targets="$targets tests/fsdp/test_$t"; done
  ninja -C "$BUILD" -j"$JOBS" $targets
}

# ptxas's registers, spills and shared memory per kernel, for sm_80 and sm_90; a file nvcc
# fails on fails the step (pipefail: the sed would hide it).
ptxas_report() {
  . "$WORK/paths.env"
  ls "$SRC"/core/cuda/*.cu | xargs -P "$JOBS" -I{} bash -c "set -o pipefail;
    '$CUDA_HOME/bin/nvcc' -std=c++20 -I'$SRC' -gencode=arch=compute_80,code=sm_80 \
     -gencode=arch=compute_90,code=sm_90 -Xptxas=-v -c {} -o /dev/null 2>&1 | sed 's|^|{}: |'"
}

# meson counts a skip (77) as a pass: the log's last lines (Ok/Skipped) say which it was.
# --emulated: meson puts the real kernels' folder first on a test's LD_LIBRARY_PATH (it prepends
# the folder of every shared library the program links), so each test runs through
# run_emulated.sh, which puts the emulated libraries back in front (meson then names its log
# testlog-run_emulated.sh.txt).
gpu_tests() {
  . "$WORK/run.env"
  emulated_libs "$BUILD/tests/gpu/test_gpu_kernels" || exit 1
  wrapper=()
  [ "$EMU" = 0 ] || wrapper=(--wrapper "$SRC/tests/gpu/emulation/run_emulated.sh $EMU_LIBS")
  meson test -C "$BUILD" --no-rebuild --print-errorlogs "${wrapper[@]}" \
    cuda_host gpu_runtime gpu_kernels gpu_gemm gpu_kernel_table gpu_threads_collectives \
    gpu_stream_sanitizer
  rc=$?
  log=testlog.txt
  [ "$EMU" = 0 ] || log=testlog-run_emulated.sh.txt
  cp "$BUILD/meson-logs/$log" "$LOGS/gpu_tests.testlog.txt" 2>/dev/null
  exit $rc
}

# A parity subset under compute-sanitizer: every kernel with shared memory or irregular
# indexing. memcheck: out-of-bounds and misaligned accesses; racecheck: shared-memory hazards.
SANITIZE_SUBSET='fill_writes_every_element*:broadcast_add_and_mul*:sum_over_rows*:sum_of_squares*'
SANITIZE_SUBSET+=':layer_norm*:causal_softmax*:embedding_gathers*:fused_cross_entropy*'
SANITIZE_SUBSET+=':online_softmax_attention*'  # the tiled kernels' shared memory, small shapes
export SANITIZE_SUBSET
sanitize() {
  . "$WORK/build.env"
  . "$WORK/paths.env"
  cs=$(command -v compute-sanitizer || echo "$CUDA_HOME/bin/compute-sanitizer")
  "$cs" --tool "$1" --error-exitcode 3 "$BUILD/tests/gpu/test_gpu_kernels" \
    --run_test="$SANITIZE_SUBSET"
}
memcheck() { sanitize memcheck; }
racecheck() { sanitize racecheck; }

nccl_world1() {
  . "$WORK/run.env"
  . "$WORK/paths.env"
  [ -n "$NCCL_DIR" ] || { echo "no NCCL found in preflight"; exit 77; }
  "$BUILD/tests/comm/test_comm_nccl"
}

bench() {
  . "$WORK/run.env"
  "$BUILD/bench/gpu/bench_gpu_kernels" --tokens 16384 --json "$LOGS/bench_ours.json"
  rc=$?
  [ $rc = 0 ] || exit $rc
  [ "$DRY" = 1 ] && exit 0
  python3 "$SRC/bench/gpu/torch_ops.py" --ours "$LOGS/bench_ours.json" --tokens 16384
}

# The fsdp suites that honour FSDP_TEST_DEVICE (tests/support/test_device.h) with every rank on
# cuda:0 (their 2- and 4-rank runs are thread ranks sharing the GPU); on the dry run, fake_cuda.
fsdp_cuda() {
  . "$WORK/run.env"
  device=cuda
  [ "$DRY" = 1 ] && device=fake_cuda
  rc=0
  emulated_libs "$BUILD/tests/fsdp/test_fsdp_runtime" || exit 1
  for t in $FSDP_SUITES; do
    echo "--- $t with FSDP_TEST_DEVICE=$device"
    FSDP_TEST_DEVICE=$device "$BUILD/tests/fsdp/test_$t" || rc=1
  done
  exit $rc
}

# train_gpt's tokens/s on the device against the CPU's, one rank, unsharded, the same data.
train_gpt_cuda() {
  . "$WORK/run.env"
  device=cuda
  [ "$DRY" = 1 ] && device=fake_cuda
  emulated_libs "$BUILD/examples/train_gpt" || exit 1
  data=$SRC/tests/fixtures/gpt/data.txt
  rc=0
  for d in cpu $device; do
    echo "--- train_gpt --device $d"
    "$BUILD/examples/train_gpt" --sharding none --ranks 1 --device $d --data "$data" \
      --steps 5 || rc=1
  done
  # CPU offload: 2 thread ranks sharing the one GPU (cuda:0; plain `cuda` gives rank r cuda:r),
  # shards and the optimizer in host memory. fake_cuda gives each rank its own device.
  shared=cuda:0
  [ "$DRY" = 1 ] && shared=fake_cuda
  echo "--- train_gpt --device $shared --cpu-offload (FULL_SHARD x2, bf16)"
  "$BUILD/examples/train_gpt" --sharding FULL_SHARD --ranks 2 --mixed-precision bf16 \
    --cpu-offload --device $shared --data "$data" --steps 5 || rc=1
  exit $rc
}

# Where a GPT-2 124M bf16 step's GPU time goes, kernel by kernel: Nsight Compute's duration of
# each kernel (products included; one at a time, so without overlap) over about one step's
# launches past the model's initialisation and first step (KERNEL_PROFILE_SKIP and
# KERNEL_PROFILE_COUNT: ~240 of ours and ~147 cuBLASLt products a step), summed per kernel by
# bench/gpu/kernel_profile.py.
kernel_profile() {
  . "$WORK/run.env"
  if ! command -v ncu >/dev/null; then
    echo "ncu not found" >"$LOGS/kernel_profile.note"
    exit 77
  fi
  ncu --clock-control none --metrics gpu__time_duration.sum --csv --page raw \
    --print-units base --launch-skip "${KERNEL_PROFILE_SKIP:-1000}" \
    --launch-count "${KERNEL_PROFILE_COUNT:-390}" --log-file "$WORK/kernel_profile.csv" \
    "$BUILD/examples/train_gpt" --device cuda --sharding none --ranks 1 --mixed-precision bf16 \
    --layers 12 --d-model 768 --heads 12 --seq 1024 --batch 8 --vocab 50304 --synthetic-tokens \
    --steps 4 || exit 1
  python3 "$SRC/bench/gpu/kernel_profile.py" "$WORK/kernel_profile.csv" \
    | tee "$OUT/kernel_profile.txt"
}

# The issue's FSDP targets on one GPU, same run: NO_SHARD at world size 1 against the unsharded
# model (float32 with TF32 products: bf16 mixed precision is FSDP's alone), target <= 1.05x its
# step time; FULL_SHARD on 2 thread ranks sharing the GPU (bf16), exposed communication <= 10%.
# GPT-2 124M's shape at batch 8; the dry run and the emulated device rehearse it at a tiny shape.
fsdp_overhead() {
  . "$WORK/run.env"
  device=cuda:0
  shape="--layers 12 --d-model 768 --heads 12 --seq 1024 --batch 8 --vocab 50304 --steps 8"
  if [ "$DRY" = 1 ] || [ "$EMU" = 1 ]; then
    shape="--layers 1 --d-model 64 --heads 1 --seq 64 --batch 2 --vocab 512 --steps 3"
  fi
  [ "$DRY" = 1 ] && device=fake_cuda  # a fake_cuda device per rank (it does not share one)
  job() {
    local out=$1
    shift
    echo "--- train_gpt $*"
    "$BUILD/examples/train_gpt" --device $device $shape --synthetic-tokens \
      --float32-matmul-precision high "$@" >"$WORK/$out.txt" 2>&1
    local rc=$?
    grep -E '^(tokens/s|model:|train_gpt: error)' "$WORK/$out.txt"
    return $rc
  }
  job none --sharding none --ranks 1 || exit 1
  job ws1 --sharding NO_SHARD --ranks 1 || exit 1
  job fs2 --sharding FULL_SHARD --ranks 2 --mixed-precision bf16 || exit 1
  ms() { sed -n 's/.*ms\/step \([0-9.]*\).*/\1/p' "$WORK/$1.txt" | tail -n 1; }
  awk -v a="$(ms none)" -v b="$(ms ws1)" 'BEGIN {
    printf "fsdp_overhead: NO_SHARD world 1 / unsharded step time %.3fx (target <= 1.05)\n", b / a }'
  sed -n 's/.*exposed communication \([0-9.]*%\).*/fsdp_overhead: FULL_SHARD x2 on one GPU, exposed communication \1 (target <= 10%)/p' \
    "$WORK/fs2.txt"
}

# train_gpt against the same GPT in PyTorch eager on the GPU, in this run (bench/gpu/bench_gpt.py):
# GPT-2 124M's shape, bf16 with fp32 master weights, the largest batch of 64..4 that fits on each
# side; tokens/s, MFU and ours / PyTorch's. GPT_SPEED_COMPILE=1 adds torch.compile (about a
# minute more). The dry run: the CPU at a tiny shape, with the torch python the bench smokes use.
# train_gpt runs through a wrapper with run.env's libraries; PyTorch keeps the image's.
gpt_speed() {
  printf '#!/bin/sh\n. "%s"\nexec "%s" "$@"\n' "$WORK/run.env" "$BUILD/examples/train_gpt" \
    >"$WORK/train_gpt.sh"
  chmod +x "$WORK/train_gpt.sh"
  python=python3
  args="--batch auto --iters 10 --warmup 3 --timeout 80"
  if [ "$DRY" = 1 ] || [ "$EMU" = 1 ]; then
    [ -x /opt/torch2/bin/python ] && python=/opt/torch2/bin/python
    args="--device cpu --tiny --batch 2 --iters 2 --warmup 1"
    # The emulated device has no speed and PyTorch here no CUDA: the wrapper, the bench's
    # command line and its report are what this rehearses.
    [ "$EMU" = 0 ] || echo "cpu at a tiny shape: no CUDA PyTorch here" >"$LOGS/gpt_speed.note"
  fi
  [ "${GPT_SPEED_COMPILE:-0}" = 1 ] && args="$args --compile"
  "$python" "$SRC/bench/gpu/bench_gpt.py" --train-gpt "$WORK/train_gpt.sh" $args \
    --json "$LOGS/gpt_speed.json"
  rc=$?
  cp "$LOGS/gpt_speed.json" "$OUT/gpt_speed.json" 2>/dev/null
  exit $rc
}

# The stream sanitizer over FSDP steps at 2 and 4 ranks (tests/fsdp/test_fake_cuda_runtime.cpp's
# cases): no unordered access, no free racing another stream's use, and the seeded missing wait
# found; on cuda:0, every rank on the GPU (the CUDA kernel table, copies and streams reporting);
# the dry run on fake_cuda, with the collectives queued as on CUDA.
stream_sanitizer() {
  . "$WORK/run.env"
  if [ "$DRY" = 1 ]; then
    "$BUILD/tests/fsdp/test_fsdp_fake_cuda_runtime" \
      --run_test=clean_under_the_stream_sanitizer:collectives_queued_as_on_cuda_equal_cpu_and_are_clean
  else
    emulated_libs "$BUILD/tests/fsdp/test_fsdp_fake_cuda_runtime" || exit 1
    FSDP_TEST_DEVICE=cuda "$BUILD/tests/fsdp/test_fsdp_fake_cuda_runtime" \
      --run_test=clean_under_the_stream_sanitizer:the_seeded_missing_wait_is_reported
  fi
}

export -f preflight unpack write_env emulated_libs configure build ptxas_report gpu_tests \
  sanitize memcheck racecheck nccl_world1 bench build_fsdp fsdp_cuda train_gpt_cuda gpt_speed \
  fsdp_overhead stream_sanitizer kernel_profile

t0=$(date +%s)
if step preflight 30 preflight; then
  step unpack 90 unpack && write_env
  built=0
  if step configure 90 configure; then
    step build "${BUILD_LIMIT:-240}" build && built=1
  else
    skip build "no configure"
  fi
  if [ $built = 1 ]; then
    # Parity first, then the bench (the issue's targets), then the sanitizers and NCCL.
    step gpu_tests 150 gpu_tests
    if [ "$EMU" = 1 ]; then  # GPT-2's shapes take minutes per op on the emulated device
      skip bench "emulated: speed needs the GPU"
    else
      step bench 150 bench
    fi
    if [ "$DRY" = 1 ]; then
      skip memcheck "dry run"
      skip racecheck "dry run"
    elif [ "$EMU" = 1 ]; then
      skip memcheck "emulated: compute-sanitizer needs the GPU"
      skip racecheck "emulated: compute-sanitizer needs the GPU"
    else
      step memcheck 90 memcheck
      step racecheck 90 racecheck
    fi
    if [ "$EMU" = 1 ]; then  # the real libnccl on the emulated runtime
      skip nccl_world1 "emulated: NCCL needs the GPU"
    else
      step nccl_world1 60 nccl_world1
    fi
    # The device layer end to end, last: it needs the kernel table's later families.
    if step build_fsdp "${BUILD_FSDP_LIMIT:-180}" build_fsdp; then
      step fsdp_cuda 90 fsdp_cuda
      step train_gpt_cuda 90 train_gpt_cuda  # 235 s of 4 x 60 on the emulated device
      step gpt_speed "${GPT_SPEED_LIMIT:-150}" gpt_speed
      sed -n '/^bench_gpt: GPT/,$p' "$LOGS/gpt_speed.log" >"$OUT/gpt_speed.txt" 2>/dev/null
      step fsdp_overhead "${FSDP_OVERHEAD_LIMIT:-90}" fsdp_overhead
      step stream_sanitizer 60 stream_sanitizer
      if [ "$DRY" = 1 ] || [ "$EMU" = 1 ]; then
        skip kernel_profile "ncu needs the GPU"
      else
        step kernel_profile "${KERNEL_PROFILE_LIMIT:-90}" kernel_profile
      fi
    else
      for s in fsdp_cuda train_gpt_cuda gpt_speed fsdp_overhead stream_sanitizer kernel_profile; do
        skip $s "no build"
      done
    fi
  else
    for s in gpu_tests bench memcheck racecheck nccl_world1 build_fsdp fsdp_cuda train_gpt_cuda \
      gpt_speed fsdp_overhead stream_sanitizer kernel_profile; do skip $s "no build"; done
  fi
  step ptxas_report 60 ptxas_report
else
  for s in unpack configure build gpu_tests bench memcheck racecheck nccl_world1 build_fsdp \
    fsdp_cuda train_gpt_cuda gpt_speed fsdp_overhead stream_sanitizer kernel_profile; do
    skip $s "preflight failed"
  done
fi

# Everything into one tarball (at most 8 files come back), the summary beside it.
cp "$BUILD/meson-logs/meson-log.txt" "$LOGS/meson-log.txt" 2>/dev/null
tar -czf "$OUT/logs.tar.gz" -C "$WORK" logs
{
  dry=""
  [ "$DRY" = 1 ] && dry="(dry run) "
  [ "$EMU" = 1 ] && dry="(emulated device, limits x$LIMIT_SCALE) "
  echo "run_device_checks ${dry}at $(date -u +%FT%TZ), $(($(date +%s) - t0)) s"
  grep -h -E 'preflight: MISSING|^NVIDIA|^[^,]+, [0-9.]+, [0-9]+ MiB' "$LOGS/preflight.log" \
    2>/dev/null
  if [ -f "$LOGS/bench.log" ]; then
    echo "--- bench (ours vs PyTorch eager, same run)"
    grep -E -A40 '^op ' "$LOGS/bench.log" || tail -n 30 "$LOGS/bench.log"
  fi
  if [ -f "$LOGS/train_gpt_cuda.log" ]; then
    echo "--- train_gpt (cpu, then the device)"
    grep -h -E '^(--- train_gpt|tokens/s|MFU|train_gpt: error)' "$LOGS/train_gpt_cuda.log"
  fi
  grep -h '^fsdp_overhead:' "$LOGS/fsdp_overhead.log" 2>/dev/null
  if [ -s "$OUT/gpt_speed.txt" ]; then
    echo "--- gpt_speed (train_gpt vs PyTorch, same run; targets: ratio >= 1.0, MFU >= 38%)"
    cat "$OUT/gpt_speed.txt"
  elif [ -f "$LOGS/gpt_speed.log" ]; then
    echo "--- gpt_speed (no table)"
    tail -n 8 "$LOGS/gpt_speed.log"
  fi
  if [ -s "$OUT/kernel_profile.txt" ]; then
    echo "--- kernel_profile (a GPT-2 124M bf16 step at batch 8, kernel by kernel)"
    head -n 25 "$OUT/kernel_profile.txt"
  fi
  counts=$(grep -h -E '^(Ok|Fail|Skipped|Timeout): ' "$LOGS/gpu_tests.log" 2>/dev/null)
  echo "--- gpu suite: $(echo "$counts" | tr -s ' ' | tr '\n' ' ')"
  echo "--- failures"
  grep -h -E 'error: in|relative error|FAILED|ERROR SUMMARY: [1-9]|Hazard|Invalid' \
    "$LOGS"/gpu_tests.log "$LOGS"/memcheck.log "$LOGS"/racecheck.log "$LOGS"/nccl_world1.log \
    "$LOGS"/fsdp_cuda.log "$LOGS"/stream_sanitizer.log 2>/dev/null | head -n 40
  echo "--- steps"
  printf '%-16s %-24s %6s\n' step status seconds
  for i in "${!NAMES[@]}"; do
    printf '%-16s %-24s %6s\n' "${NAMES[$i]}" "${STATUS[$i]}" "${SECS[$i]}"
  done
} >"$OUT/summary.txt"
cat "$OUT/summary.txt"
[ -n "$KEEP_WORK" ] || rm -rf "$WORK"
