#!/usr/bin/env python3
"""train_gpt on the emulated CUDA device against the same job on the CPU: the per-step losses of an
unsharded float32 run, FULL_SHARD on 2 thread ranks sharing cuda:0 (the threads backend's CUDA
path, FSDP's streams), the same with bf16 and with fp16 mixed precision, and bf16 and fp16 at head
dim 64 over two query tiles (the flash attention kernels), bf16 at head dim 128 (the wide tiles),
CPU offload (FULL_SHARD float32, NO_SHARD bf16); with MPIRUN given, instead, FULL_SHARD over NCCL
on 2 processes each on its own emulated GPU (float32, bf16, fp16, and bf16 with CPU offload)
against the CPU's 2 thread ranks (a test of its own, which runs alone: mpirun's ranks on 2 cores;
the rest runs beside others). Float32 losses agree within 1e-5 relative (the device sums in other
orders), bf16 and fp16 ones within 1e-3 (the emulated device is deterministic; a GPU's sums may
differ more). Run with the emulated libraries first on LD_LIBRARY_PATH: EMULATED_LIBS is put first
for the runs (meson may prepend the real kernels' folder for a built program given as an argument).
Usage: test_train_gpt_emulated.py TRAIN_GPT DATA EMULATED_LIBS [MPIRUN]"""
import re
import sys

from emulated_runs import agree, emulated_env, mpi_launch, run_or_exit, with_values

SMALL = ["--steps", "3", "--layers", "2", "--d-model", "64", "--heads", "2", "--seq", "32",
         "--batch", "2"]
HEAD_DIM_64 = {"--d-model": "128", "--seq": "80"}  # 2 heads of 64, 2 query tiles
HEAD_DIM_128 = {"--d-model": "256", "--seq": "80"}  # 2 heads of 128, 2 query tiles
JOBS = [
    ("float32 unsharded", ["--sharding", "none", "--ranks", "1"], 1e-5),
    ("float32 FULL_SHARD x2", ["--sharding", "FULL_SHARD", "--ranks", "2"], 1e-5),
    ("bf16 FULL_SHARD x2", ["--sharding", "FULL_SHARD", "--ranks", "2",
                            "--mixed-precision", "bf16"], 1e-3),
    ("bf16 head dim 64 FULL_SHARD x2", ["--sharding", "FULL_SHARD", "--ranks", "2",
                                        "--mixed-precision", "bf16"], 1e-3, HEAD_DIM_64),
    ("bf16 head dim 128 FULL_SHARD x2", ["--sharding", "FULL_SHARD", "--ranks", "2",
                                         "--mixed-precision", "bf16"], 1e-3, HEAD_DIM_128),
    ("float32 FULL_SHARD x2, CPU offload", ["--sharding", "FULL_SHARD", "--ranks", "2",
                                           "--cpu-offload"], 1e-5),
    ("bf16 NO_SHARD x2, CPU offload", ["--sharding", "NO_SHARD", "--ranks", "2",
                                       "--mixed-precision", "bf16", "--cpu-offload"], 1e-3),
    ("fp16 FULL_SHARD x2", ["--sharding", "FULL_SHARD", "--ranks", "2",
                            "--mixed-precision", "fp16"], 1e-3),
    ("fp16 head dim 64 FULL_SHARD x2", ["--sharding", "FULL_SHARD", "--ranks", "2",
                                        "--mixed-precision", "fp16"], 1e-3, HEAD_DIM_64),
]


NCCL_JOBS = [
    ("float32 FULL_SHARD nccl, 2 GPUs", ["--sharding", "FULL_SHARD"], 1e-5),
    ("bf16 FULL_SHARD nccl, 2 GPUs", ["--sharding", "FULL_SHARD", "--mixed-precision", "bf16"],
     1e-3),
    ("fp16 FULL_SHARD nccl, 2 GPUs", ["--sharding", "FULL_SHARD", "--mixed-precision", "fp16"],
     1e-3),
    ("bf16 FULL_SHARD nccl, 2 GPUs, CPU offload",
     ["--sharding", "FULL_SHARD", "--mixed-precision", "bf16", "--cpu-offload"], 1e-3),
]


def losses(train_gpt, data, device, args, overrides, env, launcher=()):
    run = run_or_exit(list(launcher) + [train_gpt, "--data", data, "--device", device] +
                      with_values(SMALL, overrides) + args, env, 240,
                      f"train_gpt --device {device} {' '.join(args)}")
    found = [float(m) for m in re.findall(r"^step \d+ loss (\S+)", run.stdout, re.M)]
    if len(found) != 3:
        sys.exit(f"train_gpt --device {device}: expected 3 step lines, got:\n{run.stdout}")
    return found


def main():
    train_gpt, data, emulated = sys.argv[1], sys.argv[2], sys.argv[3]
    env = emulated_env(emulated)
    failed = 0
    if len(sys.argv) <= 4:
        for name, args, tol, *overrides in JOBS:
            overrides = overrides[0] if overrides else {}
            cpu = losses(train_gpt, data, "cpu", args, overrides, env)
            cuda = losses(train_gpt, data, "cuda:0", args, overrides, env)
            failed += not agree(name, cpu, cuda, tol)
    else:  # processes under mpirun, each on its own emulated GPU
        mpi_env, mpirun = mpi_launch(env, sys.argv[4])
        for name, args, tol in NCCL_JOBS:
            cpu = losses(train_gpt, data, "cpu", args + ["--ranks", "2"], {}, env)
            cuda = losses(train_gpt, data, "cuda", args + ["--backend", "nccl"], {}, mpi_env,
                          mpirun)
            failed += not agree(name, cpu, cuda, tol)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
