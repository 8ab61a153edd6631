#!/usr/bin/env python3
"""PyTorch's side of bench/fsdp: the GPT of examples/gpt.h (train_gpt_ref.py's model, same data
order) trained with AdamW in one of three modes, timed per step; prints one JSON object.

    python torch_fsdp_gpt.py --mode unsharded --data FILE
    python torch_fsdp_gpt.py --mode fsdp1 --ranks 2 --data FILE     # FullyShardedDataParallel
    python torch_fsdp_gpt.py --mode fsdp2 --ranks 2 --data FILE     # fully_shard per block + root

Modes: `unsharded` is one process with --batch sequences. `fsdp1` wraps every
TransformerEncoderLayer (transformer_auto_wrap_policy) and the root, FULL_SHARD,
use_orig_params=False. `fsdp2` applies fully_shard to every block, then to the root. Both run
--ranks processes (torch.multiprocessing, no torchrun) over gloo on 127.0.0.1, --batch sequences
per rank; rank r takes sequences [r*batch, (r+1)*batch) of the global batch, as train_gpt does.
Every rank uses one thread (--threads). --load starts from a checkpoint (e.g. train_gpt's
`--steps 0 --save`), so that the losses can be compared with ours.

Output: {"mode", "torch_version", "world", "ms_per_step" and "tokens_per_s" (median of the steps
after --warmup; a step's time is its slowest rank's), "cpu_ms_per_step" (median of the per-step
CPU time summed over ranks), "step_ms", "step_cpu_ms", "losses" (global mean per step),
"peak_rss_mib" (per rank: the process's maximum resident set, which includes torch's
libraries)}. Needs torch >= 2.x for FSDP
on CPU; fsdp2 needs fully_shard (torch >= 2.4). Exit 3 when the mode is not available.
"""
import argparse
import json
import os
import resource
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_gpt_ref  # noqa: E402  (the model, its init, the data order, checkpoints)

UNAVAILABLE = 3


def fully_shard_fn():
    """FSDP2's fully_shard, wherever this torch keeps it (None when it has none)."""
    try:
        from torch.distributed.fsdp import fully_shard
        return fully_shard
    except ImportError:
        pass
    try:
        from torch.distributed._composable.fsdp import fully_shard
        return fully_shard
    except ImportError:
        return None


def unavailable(mode):
    """Why `mode` cannot run on this torch, or None. Importing FSDP can fail with other errors
    than ImportError (torch 1.13's fails on Python 3.11 with a dataclass ValueError)."""
    if mode == "unsharded":
        return None
    if not dist.is_available() or not dist.is_gloo_available():
        return "torch %s has no gloo process group" % torch.__version__
    try:
        if mode == "fsdp1":
            from torch.distributed.fsdp import FullyShardedDataParallel  # noqa: F401
        elif fully_shard_fn() is None:
            return "torch %s has no fully_shard (FSDP2)" % torch.__version__
    except Exception as e:  # noqa: BLE001
        return "torch %s cannot import FSDP: %s: %s" % (torch.__version__, type(e).__name__, e)
    return None


def fsdp1_wrap(model):
    import functools

    from torch.distributed.fsdp import FullyShardedDataParallel, ShardingStrategy
    from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy
    policy = functools.partial(transformer_auto_wrap_policy,
                               transformer_layer_cls={nn.TransformerEncoderLayer})
    return FullyShardedDataParallel(model, auto_wrap_policy=policy,
                                    sharding_strategy=ShardingStrategy.FULL_SHARD,
                                    use_orig_params=False,
                                    # torch >= 2.x refuses CPU unless asked for it by device_id
                                    device_id=torch.device("cpu"))


def fsdp2_wrap(model, world):
    from torch.distributed.device_mesh import init_device_mesh
    mesh = init_device_mesh("cpu", (world,))
    fully_shard = fully_shard_fn()
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def build_model(a):
    torch.manual_seed(a.seed)
    model = train_gpt_ref.GPT(a.layers, a.d_model, a.heads, a.seq)
    train_gpt_ref.gpt_init(model)
    if a.load:
        train_gpt_ref.load(a.load, model)
    return model


def train(a, rank, world):
    """Runs the job on this rank; returns its per-step wall and CPU times (ms, the CPU time of
    all of this process's threads) and the global mean losses."""
    torch.set_num_threads(a.threads)
    model = build_model(a)
    if a.mode == "fsdp1":
        model = fsdp1_wrap(model)
    elif a.mode == "fsdp2":
        model = fsdp2_wrap(model, world)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.01)
    with open(a.data, "rb") as f:
        data = f.read()
    step_ms, step_cpu_ms, losses = [], [], []
    for step in range(a.steps):
        inputs, targets = train_gpt_ref.gpt_batch(data, step, a.batch * world, a.seq)
        inputs = inputs[rank * a.batch:(rank + 1) * a.batch]
        targets = targets[rank * a.batch:(rank + 1) * a.batch]
        t0, c0 = time.perf_counter(), time.process_time()
        opt.zero_grad(set_to_none=True)
        logits = model(inputs)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
        loss.backward()
        opt.step()
        # The global mean, as train_gpt reports it (and pays for) every step.
        value = loss.detach().clone()
        if world > 1:
            dist.all_reduce(value)
            value /= world
        losses.append(value.item())
        step_ms.append(1000.0 * (time.perf_counter() - t0))
        step_cpu_ms.append(1000.0 * (time.process_time() - c0))
    return step_ms, step_cpu_ms, losses


def peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def rank_main(rank, a, world, port, queue):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        queue.put((rank,) + train(a, rank, world) + (peak_rss_mib(),))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_distributed(a):
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    mp.spawn(rank_main, args=(a, a.ranks, free_port(), queue), nprocs=a.ranks, join=True)
    per_rank = sorted(queue.get() for _ in range(a.ranks))
    # A step ends when the slowest rank ends it: the per-step maximum over ranks; its CPU time
    # is the sum over ranks.
    step_ms = [max(r[1][i] for r in per_rank) for i in range(a.steps)]
    step_cpu_ms = [sum(r[2][i] for r in per_rank) for i in range(a.steps)]
    return step_ms, step_cpu_ms, per_rank[0][3], [r[4] for r in per_rank]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mode", choices=["unsharded", "fsdp1", "fsdp2"], required=True)
    ap.add_argument("--ranks", type=int, default=2, help="processes (fsdp1, fsdp2)")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=8, help="sequences per rank per step")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=2, help="steps left out of the median")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    ap.add_argument("--data", required=True, help="training bytes")
    ap.add_argument("--load", help="initial weights (safetensors)")
    a = ap.parse_args(argv)
    if a.steps <= a.warmup:
        ap.error("--steps must exceed --warmup")

    reason = unavailable(a.mode)
    if reason:
        print("torch_fsdp_gpt: %s: %s" % (a.mode, reason), file=sys.stderr)
        return UNAVAILABLE

    if a.mode == "unsharded":
        a.ranks = 1
        step_ms, step_cpu_ms, losses = train(a, 0, 1)
        rss = [peak_rss_mib()]
    else:
        step_ms, step_cpu_ms, losses, rss = run_distributed(a)
    median = statistics.median(step_ms[a.warmup:])
    print(json.dumps({
        "mode": a.mode, "torch_version": torch.__version__, "world": a.ranks,
        "config": {"layers": a.layers, "d_model": a.d_model, "heads": a.heads, "seq": a.seq,
                   "batch_per_rank": a.batch, "steps": a.steps, "warmup": a.warmup,
                   "threads_per_rank": a.threads, "optimizer": "adamw", "lr": a.lr},
        "ms_per_step": median,
        "tokens_per_s": a.batch * a.ranks * a.seq / (median / 1000.0),
        "cpu_ms_per_step": statistics.median(step_cpu_ms[a.warmup:]),
        "step_ms": step_ms, "step_cpu_ms": step_cpu_ms, "losses": losses, "peak_rss_mib": rss}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
