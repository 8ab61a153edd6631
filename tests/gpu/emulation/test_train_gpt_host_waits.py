#!/usr/bin/env python3
"""No host synchronisation inside a training step (issue 25): train_gpt on the emulated CUDA
device with FSDP_EMU_PROFILE=1 (the emulated cudart counts the host's waits per call at exit),
for 2 and then 4 steps; the difference over 2 steps and the ranks is the waits of one rank-step,
which must not exceed what train_gpt makes by design:
- loss.item() at the end of each step (examples/gpt_train.cpp): one device->host read, which is
  2 waits here (the stream's event synchronize and the copy to pageable host memory), and at most
  one copy to pageable host memory;
- with FULL_SHARD on more than one rank, FSDP's rate limiter (limit_all_gathers, on by default
  as upstream's: fsdp/runtime.cpp UnitRuntime::unshard waits for the oldest freed unit's event
  before a third unshard; with 2 blocks, once a step, in the backward).
- with CPU offload, one wait at the end of backward for the gradients' copies into pinned host
  memory (fsdp/runtime.cpp RootState::final_callback), and no copy from pageable memory staged
  with a wait (the shards are pinned; the emulated cudart waits for the stream before staging a
  pageable copy above 64 KiB, the worst case CUDA allows).
train_gpt's timing event (CudaInterval) is read once per run, not per step: the difference
cancels it. Indices, class targets and loss gradients are never read on the host: a read in
embedding, cross_entropy or a loss's backward is 2 more waits per read (8 reads per rank-step
before they moved onto the device). Prints the measured numbers.
Usage: test_train_gpt_host_waits.py TRAIN_GPT DATA EMULATED_LIBS"""
import re
import sys

from emulated_runs import emulated_env, run_or_exit, with_values

SHAPE = ["--layers", "2", "--d-model", "64", "--heads", "2", "--seq", "32", "--batch", "2"]
LOSS_READ = 2  # loss.item(): an event synchronize and a copy to pageable host memory
RATE_LIMITER = 1  # FULL_SHARD on 2 ranks, 2 blocks: one wait a step (see above)
# The rate limiter waits only when the oldest freed unit's event is not complete yet, so a run
# may skip one of its waits; the difference of two runs then moves by 1 / (2 steps x 2 ranks) =
# 0.25 a rank-step per skipped wait. Slack for that, with more than one rank (1.0: every one of
# the 2-step run's 4 skipped): far below the 16 waits a rank-step of the host reads this test
# exists to catch.
TIMING_SLACK = 1.0
# name, train_gpt's flags, ranks, waits allowed per rank-step
# CPU offload at a width whose shards (about 400 KB a block per rank) exceed the driver's inline
# copy size, so that a pageable shard would be staged with a wait (the emulated cudart waits then):
# the shards are pinned, the gradients come back into pinned memory without waiting, and the
# final callback waits once for all of them before the optimizer steps on the host.
OFFLOAD_SHAPE = {"--d-model": "128"}
OFFLOAD_END_OF_BACKWARD = 1
JOBS = [
    ("float32 unsharded, 1 rank", ["--sharding", "none", "--ranks", "1"], 1, LOSS_READ),
    ("bf16 FULL_SHARD, 1 rank", ["--sharding", "FULL_SHARD", "--ranks", "1",
                                 "--mixed-precision", "bf16"], 1, LOSS_READ),
    ("bf16 FULL_SHARD x2", ["--sharding", "FULL_SHARD", "--ranks", "2",
                            "--mixed-precision", "bf16"], 2, LOSS_READ + RATE_LIMITER),
    ("float32 FULL_SHARD x2, CPU offload, d-model 128",
     ["--sharding", "FULL_SHARD", "--ranks", "2", "--cpu-offload"], 2,
     LOSS_READ + RATE_LIMITER + OFFLOAD_END_OF_BACKWARD, OFFLOAD_SHAPE),
]


def profile(train_gpt, data, args, steps, env, overrides):
    """The emulated cudart's counts at exit: (total waits, {call: waits})."""
    run = run_or_exit([train_gpt, "--data", data, "--device", "cuda:0", "--steps", str(steps)] +
                      with_values(SHAPE, overrides) + args, env, 240,
                      f"train_gpt {' '.join(args)} --steps {steps}")
    out = run.stdout + run.stderr
    total = re.search(r"^emulated CUDA profile: (\d+) host waits$", out, re.M)
    if total is None:
        sys.exit(f"train_gpt {' '.join(args)}: no host-wait profile in its output:\n{out}")
    calls = {}
    for line in out[total.end():].splitlines()[1:]:
        m = re.match(r"^\s+(\d+)\s+(\S.*)$", line)
        if m is None:
            break
        calls[m.group(2)] = int(m.group(1))
    return int(total.group(1)), calls


def main():
    train_gpt, data, emulated = sys.argv[1], sys.argv[2], sys.argv[3]
    env = emulated_env(emulated, FSDP_EMU_PROFILE="1")
    failed = 0
    for name, args, ranks, allowed, *overrides in JOBS:
        overrides = overrides[0] if overrides else {}
        total2, calls2 = profile(train_gpt, data, args, 2, env, overrides)
        total4, calls4 = profile(train_gpt, data, args, 4, env, overrides)
        per = (total4 - total2) / 2 / ranks
        per_call = {c: (calls4.get(c, 0) - calls2.get(c, 0)) / 2 / ranks
                    for c in sorted(set(calls2) | set(calls4))}
        per_call = {c: n for c, n in per_call.items() if n}
        reads = per_call.get("cudaMemcpyAsync to pageable host memory", 0)
        staged = per_call.get("cudaMemcpyAsync from pageable host memory (staged)", 0)
        ok = per <= allowed + (TIMING_SLACK if ranks > 1 else 0) and reads <= 1 and staged == 0
        print(f"{'ok ' if ok else 'BAD'} {name}: {total2} waits in 2 steps, {total4} in 4: "
              f"{per:g} a rank-step (allowed {allowed}), of which {per_call}")
        failed += not ok
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
