#!/usr/bin/env python3
"""examples/finetune on the emulated CUDA device against the same job on the CPU, for GPT-2, Llama,
Qwen3, Gemma 3 and Gemma 2 (tests/fixtures/finetune, the models test_finetune.py trains against
transformers): the per-step losses and the held-out loss before and after of an unsharded float32
run, FULL_SHARD on 2 thread ranks sharing cuda:0 (the meta build materialised on the device), the
same with bf16 and with fp16 mixed precision; given MPIRUN, instead, bf16 FULL_SHARD over NCCL with
2 processes each on its own emulated GPU (a test of its own, which runs alone: mpirun's ranks on 2
cores). Float32 agrees within 1e-5 relative (the device sums in other orders), bf16 and fp16 within
1e-3. EMULATED_LIBS is put first on the runs' LD_LIBRARY_PATH (meson may prepend the real kernels'
folder for a built program given as an argument).
Usage: test_finetune_emulated.py FINETUNE FIXTURES_DIR EMULATED_LIBS [MPIRUN]"""
import os
import re
import sys

from emulated_runs import agree, emulated_env, mpi_launch, run_or_exit

STEPS = 3
JOBS = [
    ("float32 unsharded", ["--sharding", "none", "--ranks", "1"], 1e-5),
    ("float32 FULL_SHARD x2", ["--sharding", "FULL_SHARD", "--ranks", "2"], 1e-5),
    ("bf16 FULL_SHARD x2", ["--sharding", "FULL_SHARD", "--ranks", "2",
                            "--mixed-precision", "bf16"], 1e-3),
    ("fp16 FULL_SHARD x2", ["--sharding", "FULL_SHARD", "--ranks", "2",
                            "--mixed-precision", "fp16"], 1e-3),
]
NCCL_JOB = ("bf16 FULL_SHARD nccl, 2 GPUs", ["--sharding", "FULL_SHARD",
                                             "--mixed-precision", "bf16"], 1e-3)


def losses(finetune, fixtures, model, device, args, env, launcher=()):
    cmd = list(launcher) + [
        finetune, "--model-dir", os.path.join(fixtures, model),
        "--data", os.path.join(fixtures, "train.bin"),
        "--eval-data", os.path.join(fixtures, "val.bin"), "--eval-batches", "1",
        "--seq", "16", "--batch", "2", "--steps", str(STEPS), "--device", device] + args
    run = run_or_exit(cmd, env, 240, f"finetune {model} --device {device} {' '.join(args)}")
    found = [float(m) for m in re.findall(r"^step \d+ loss (\S+)", run.stdout, re.M)]
    held = re.findall(r"^held-out loss before (\S+) after (\S+)", run.stdout, re.M)
    if len(found) != STEPS or len(held) != 1:
        sys.exit(f"finetune {model} --device {device}: expected {STEPS} step lines and a "
                 f"held-out line, got:\n{run.stdout}")
    return found + [float(x) for x in held[0]]


def main():
    finetune, fixtures = sys.argv[1], os.path.join(sys.argv[2], "finetune")
    env = emulated_env(sys.argv[3])
    failed = 0
    # Qwen3: q_norm and k_norm over each head; Gemma 3: its float32 norms, scaled embedding and
    # sliding layers; Gemma 2: the softcaps (tanh) of the attention scores and the logits.
    for model in ["gpt2", "llama", "qwen3", "gemma3", "gemma2"]:
        if len(sys.argv) <= 4:
            for name, args, tol in JOBS:
                cpu = losses(finetune, fixtures, model, "cpu", args, env)
                cuda = losses(finetune, fixtures, model, "cuda:0", args, env)
                failed += not agree(f"{model} {name}", cpu, cuda, tol)
        else:  # processes under mpirun, each on its own emulated GPU
            mpi_env, mpirun = mpi_launch(env, sys.argv[4])
            name, args, tol = NCCL_JOB
            cpu = losses(finetune, fixtures, model, "cpu", args + ["--ranks", "2"], env)
            cuda = losses(finetune, fixtures, model, "cuda", args + ["--backend", "nccl"],
                          mpi_env, mpirun)
            failed += not agree(f"{model} {name}", cpu, cuda, tol)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
