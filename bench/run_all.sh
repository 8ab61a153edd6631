#!/usr/bin/env bash
# Runs every benchmark built in build/ and leaves JSON results in build/bench-results/ (each
# program's --json FILE: bench/common/report.h's layout). Arguments go to bench_training_step
# (e.g. --iters 30 --threads 1). COMM_MAX_SIZE (default 64M) bounds the
# collective sweeps; MPI and Gloo run 2 ranks under mpirun when it is installed. The FSDP training
# benchmark (bench/fsdp) uses PyTorch from /opt/torch2 when it is there. The checkpoint benchmark
# writes about 1 GB per save to CHECKPOINT_DIR (default build/bench-results/checkpoint-scratch).
set -euo pipefail
cd "$(dirname "$(readlink -f "$0")")/.."
out=build/bench-results
mkdir -p "$out"
max=${COMM_MAX_SIZE:-64M}
echo "== training step vs PyTorch =="
build/bench/core/bench_training_step --json "$out/training_step.json" "$@"
echo "== a GPT step's matrix products alone: the tokens/s ceiling on this BLAS =="
build/bench/core/bench_gemm_bound --json "$out/gemm_bound.json"
echo "== attention: materialised vs blocked =="
build/bench/core/bench_attention --json "$out/attention.json"
echo "== auto-wrap vs PyTorch =="
build/bench/policies/bench_autowrap --json "$out/autowrap.json"
echo "== fsdp-plan end to end vs PyTorch's _recursive_wrap =="
build/bench/policies/bench_plan --plan build/tools/fsdp-plan --json "$out/plan.json"
echo "== caching vs plain allocator: page faults and step time =="
build/bench/memory/bench_memory --json "$out/memory.json"
echo "== activation checkpointing: none vs full vs selective =="
build/bench/ops/bench_activation_checkpoint --json "$out/activation_checkpoint.json"
echo "== threads collectives vs memcpy =="
build/bench/comm/bench_comm_threads --ranks 2 --max-size "$max" --json "$out/comm_threads.json"
if command -v mpirun >/dev/null; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  export OMPI_MCA_rmaps_base_oversubscribe=1
  if [ -x build/bench/comm/bench_comm_mpi ]; then
    echo "== mpi collectives vs raw MPI =="
    mpirun -np 2 build/bench/comm/bench_comm_mpi --max-size "$max" --json "$out/comm_mpi.json"
  fi
  if [ -x build/bench/comm/bench_comm_gloo ]; then
    echo "== gloo collectives vs raw gloo =="
    tests/comm/run_ranks.sh mpirun 2 file build/bench/comm/bench_comm_gloo --max-size "$max" \
      --json "$(pwd)/$out/comm_gloo.json"
  fi
fi
echo "== FSDP training: unsharded, FSDP on threads/mpi/gloo, PyTorch FSDP1/FSDP2 =="
bench/fsdp/bench_fsdp_train.py --build build --json "$out/fsdp_train.json"
echo "== checkpoints: full and sharded save/load vs the disk =="
scratch=${CHECKPOINT_DIR:-$out/checkpoint-scratch}
mkdir -p "$scratch"
build/bench/checkpoint/bench_checkpoint_io --dir "$scratch" --json "$out/checkpoint_io.json"
rm -rf "$scratch"
echo "== fine-tuning GPT-2 and Llama: examples/finetune vs transformers on the same threads =="
bench/models/bench_finetune.py --build build --json "$out/finetune.json"
echo "== from_pretrained of a 1 GB directory from a cold page cache vs the disk =="
mkdir -p "$scratch"
build/bench/models/bench_load_pretrained --dir "$scratch" --json "$out/load_pretrained.json"
rm -rf "$scratch"
