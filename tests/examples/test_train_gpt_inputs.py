#!/usr/bin/env python3
"""train_gpt's bad inputs as a table (issue 12, defect 6 and item 4), by category: option, policy,
file, environment and launcher. Each bad input ends the program with its exit status (2 for the
command line and the launch environment, 1 for a file or a failure while running) and one line on
stderr 'train_gpt: error: ...' that says what was wrong, before any training; a launch that
disagrees across ranks ends every rank within the timeout with a message.
Usage: test_train_gpt_inputs.py TRAIN_GPT DATA_FILE MPIEXEC|'' HAVE_GLOO(0|1)
One file over 600 lines: one table of cases with its runner.
"""
import json
import os
import re
import resource
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time

EXE, DATA, MPIEXEC, HAVE_GLOO = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1"
HAVE_CUDA = len(sys.argv) > 5 and sys.argv[5] == "1"  # the build has the CUDA device
tmp = tempfile.mkdtemp()
short = os.path.join(tmp, "short.txt")
with open(short, "w") as f:
    f.write("abc")
missing = os.path.join(tmp, "missing.txt")
empty_dir = os.path.join(tmp, "no-checkpoints")
os.mkdir(empty_dir)
# Files that are not regular or cannot be held: a FIFO with no writer (its open would wait
# forever), a symlink to itself, a sparse 1 TiB file (each row runs with 64 GiB of address space).
fifo = os.path.join(tmp, "fifo")
os.mkfifo(fifo)
loop = os.path.join(tmp, "loop")
os.symlink(loop, loop)
huge = os.path.join(tmp, "huge.txt")
with open(huge, "wb") as f:
    f.truncate(1 << 40)
no_dir_svg = os.path.join(tmp, "no-such-dir", "timeline.svg")
# A tiny model; the threads backend's default of 2 ranks.
TINY = ["--layers", "1", "--d-model", "8", "--heads", "2", "--seq", "8", "--batch", "2",
        "--steps", "1"]
RANGE = "expected an integer from"
# Variables of the launch that the test's own environment must not leak into a row.
LAUNCH_VARS = ["RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "FSDP_STORE_PATH",
               "FSDP_TIMEOUT_MS", "FSDP_BACKEND", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
               "FSDP_CPU_ALLOCATOR", "FSDP_BLAS_AUTOSELECT", "FSDP_USE_FULL_PREC_IN_EVAL"]


class Exact(str):
    """A row's whole line after 'train_gpt: error: ' (other rows give a part of the line)."""


HELP = " (see train_gpt --help)"


def command(flags):
    """train_gpt with the tiny model's flags and --data, each overridden where `flags` gives it."""
    given = set(f for f in flags if f.startswith("--"))
    base = [*TINY, "--data", DATA]
    kept = [x for i in range(0, len(base), 2) if base[i] not in given for x in base[i:i + 2]]
    return [EXE, *kept, *flags]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def address_space(gib):
    """A preexec_fn limiting the child's address space to `gib` GiB."""
    def apply():
        resource.setrlimit(resource.RLIMIT_AS, (gib << 30, gib << 30))
    return apply


def stderr_within(p, seconds):
    """The stderr of process `p` once it ended; one still running after `seconds` is killed and
    its stderr starts with "(still running after N s)"."""
    try:
        return p.communicate(timeout=seconds)[1]
    except subprocess.TimeoutExpired:
        p.kill()
        return f"(still running after {seconds} s) " + p.communicate()[1]


def environment(extra):
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS}
    env.update(extra)
    return env


# (category, flags after the tiny model's and --data, environment, exit status, message part)
TABLE = [
    ("option", ["--layers", "0"], {}, 2, "--layers: " + RANGE + " 1 to 1024, got '0'"),
    ("option", ["--layers", "-1"], {}, 2, "--layers: " + RANGE + " 1 to 1024, got '-1'"),
    ("option", ["--d-model", "0"], {}, 2, "--d-model: " + RANGE + " 1 to 65536, got '0'"),
    ("option", ["--heads", "-2"], {}, 2, "--heads: " + RANGE + " 1 to 65536, got '-2'"),
    ("option", ["--seq", "0"], {}, 2, "--seq: " + RANGE + " 1 to 65536, got '0'"),
    ("option", ["--batch", "0"], {}, 2, "--batch: " + RANGE + " 1 to 65536, got '0'"),
    ("option", ["--vocab", "0"], {}, 2, "--vocab: " + RANGE + " 1 to 1073741824, got '0'"),
    ("option", ["--synthetic-tokens"], {}, 2,
     Exact("--data and --synthetic-tokens both give the training tokens: give one" + HELP)),
    ("option", ["--peak-tflops", "0"], {}, 2,
     "--peak-tflops: expected a finite number above 0, got '0'"),
    ("option", ["--batch", "9223372036854775808"], {}, 2, "--batch: " + RANGE),
    ("option", ["--steps", "-1"], {}, 2, "--steps: " + RANGE + " 0 to 100000000, got '-1'"),
    ("option", ["--steps", "0"], {}, 2, "--steps 0 trains nothing"),
    ("option", ["--steps", "ten"], {}, 2, "--steps: " + RANGE + " 0 to 100000000, got 'ten'"),
    ("option", ["--seed", "-1"], {}, 2,
     Exact("--seed: expected an integer from 0 to 18446744073709551615, got '-1'" + HELP)),
    ("option", ["--seed", "18446744073709551616"], {}, 2,
     Exact("--seed: expected an integer from 0 to 18446744073709551615, got "
           "'18446744073709551616'" + HELP)),
    ("option", ["--d-model", "10", "--heads", "3"], {}, 2,
     "--d-model 10 is not a multiple of --heads 3"),
    ("option", ["--lr", "inf"], {}, 2, "--lr: expected a finite number above 0, got 'inf'"),
    ("option", ["--lr", "nan"], {}, 2, "--lr: expected a finite number above 0, got 'nan'"),
    ("option", ["--lr", "0"], {}, 2, "--lr: expected a finite number above 0, got '0'"),
    ("option", ["--lr", "-1e-3"], {}, 2, "--lr: expected a finite number above 0"),
    ("option", ["--clip-grad-norm", "nan"], {}, 2,
     "--clip-grad-norm: expected a finite number of 0 or more, got 'nan'"),
    ("option", ["--log-every", "0"], {}, 2, "--log-every: " + RANGE + " 1 to 100000000"),
    ("option", ["--ranks", "0"], {}, 2, "--ranks: " + RANGE + " 1 to 1024, got '0'"),
    ("option", ["--ranks", "-3"], {}, 2, "--ranks: " + RANGE + " 1 to 1024, got '-3'"),
    ("option", ["--ranks", "two"], {}, 2, "--ranks: " + RANGE + " 1 to 1024, got 'two'"),
    ("option", ["--ranks", "4294967298"], {}, 2, "--ranks: " + RANGE + " 1 to 1024"),
    ("option", ["--threads-per-rank", "0"], {}, 2, "--threads-per-rank: " + RANGE),
    ("option", ["--eval-batches", "-1"], {}, 2, "--eval-batches: " + RANGE),
    ("option", ["--max-shard-size", "0"], {}, 2,
     Exact("--max-shard-size: expected a size of at least 1 byte, got '0'" + HELP)),
    ("option", ["--max-shard-size", "5XB"], {}, 2,
     Exact("--max-shard-size: invalid size '5XB': expected a number and a unit among B, KB, MB, "
           "GB, TB (powers of 1000) and KiB, MiB, GiB, TiB (powers of 1024), e.g. 5GB" + HELP)),
    ("option", ["--max-shard-size", "-1GB"], {}, 2, "--max-shard-size: invalid size '-1GB'"),
    ("option", ["--max-shard-size", "99999999999TB"], {}, 2,
     "--max-shard-size: invalid size '99999999999TB'"),
    ("option", ["--optimizer", "adam"], {}, 2, "--optimizer: adam not in {sgd,adamw}"),
    ("option", ["--float32-matmul-precision", "fast"], {}, 2,
     "--float32-matmul-precision: fast not in {highest,high,medium}"),
    ("option", ["--sharding", "FULL"], {}, 2,
     "--sharding: unknown strategy 'FULL'; choose FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, "
     "HYBRID_SHARD, _HYBRID_SHARD_ZERO2 or none (the unsharded model, one rank)"),
    ("option", ["--mixed-precision", "fp8"], {}, 2,
     "--mixed-precision: 'fp8' is not bf16, fp16 or none"),
    ("option", ["--device", "gpu"], {}, 2,
     "--device gpu: unknown device (expected cpu, fake_cuda, fake_cuda:N, cuda or cuda:N)"),
    ("option", ["--device", "meta"], {}, 2,
     "--device meta: meta tensors have shapes and no values, so nothing can train on them"),
    # With CUDA built, a device this machine lacks (cuda:9, or any without a GPU) is named;
    # without, CUDA is refused (core/cuda/devices.h).
    ("option", ["--device", "cuda:9"], {}, 2, "--device cuda:9: cuda:9: no ")
    if HAVE_CUDA else
    ("option", ["--device", "cuda:0"], {}, 2,
     "--device cuda:0: training on CUDA is not available yet"),
    ("option", ["--device", "fake_cuda", "--backend", "gloo"], {}, 2,
     "--device fake_cuda needs --backend threads (the gloo backend moves host memory only)"),
    ("option", ["--device", "fake_cuda:0", "--ranks", "2"], {}, 2,
     "--device fake_cuda:0 puts every thread rank on one fake_cuda device, which it cannot "
     "share; use --device fake_cuda (rank r on fake_cuda:r)"),
    ("option", ["--device", "cpu", "--backend", "nccl"], {}, 2,
     "--backend nccl needs --device cuda or cuda:N (NCCL moves CUDA memory only), got "
     "--device cpu"),
    ("option", ["--device", "fake_cuda", "--backend", "nccl"], {}, 2,
     "--backend nccl needs --device cuda or cuda:N (NCCL moves CUDA memory only), got "
     "--device fake_cuda"),
    ("option", ["--backward-prefetch", "later"], {}, 2,
     "--backward-prefetch: 'later' is not pre, post or none"),
    ("option", ["--backend", "carrier-pigeon"], {}, 2, "--backend: carrier-pigeon not in"),
    ("option", ["--checkpoint-activations", "some"], {}, 2,
     "--checkpoint-activations: some not in"),
    ("option", ["--ranks", "2", "--sharding", "none"], {}, 2,
     "--sharding none runs the unsharded model on one rank, got --ranks 2"),
    ("option", ["--ranks", "1", "--sharding", "none", "--mixed-precision", "bf16"], {}, 2,
     "--mixed-precision is FSDP's"),
    ("option", ["--ranks", "1", "--sharding", "none", "--use-orig-params"], {}, 2,
     Exact("--use-orig-params is FSDP's: it needs --sharding other than none" + HELP)),
    ("option", ["--ranks", "1", "--sharding", "none", "--forward-prefetch"], {}, 2,
     Exact("--forward-prefetch is FSDP's: it needs --sharding other than none" + HELP)),
    ("option", ["--ranks", "1", "--sharding", "none", "--cpu-offload"], {}, 2,
     Exact("--cpu-offload is FSDP's: it needs --sharding other than none" + HELP)),
    ("option", ["--ranks", "1", "--sharding", "none", "--backward-prefetch", "post"], {}, 2,
     Exact("--backward-prefetch is FSDP's: it needs --sharding other than none" + HELP)),
    ("option", ["--ranks", "1", "--sharding", "none", "--checkpoint-dir", tmp], {}, 2,
     "--checkpoint-dir and --resume need FSDP"),
    ("option", ["--ranks", "2", "--sharding", "HYBRID_SHARD", "--node-size", "3"], {}, 2,
     "--node-size 3 does not divide --ranks 2"),
    ("option", ["--node-size", "1"], {}, 2, "--node-size is for HYBRID_SHARD"),
    ("option", ["--node-size", "0", "--sharding", "HYBRID_SHARD"], {}, 2, "--node-size: " + RANGE),
    ("option", ["--backend", "gloo", "--ranks", "2"], {}, 2,
     "--ranks is for the threads backend; with --backend gloo"),
    ("option", ["--save-every", "5"], {}, 2, "--save-every and --keep are for --checkpoint-dir"),
    ("option", ["--eval-batches", "2"], {}, 2, "--eval-batches needs --eval-data"),
    ("option", ["--bogus"], {}, 2, "--bogus"),
    ("policy", ["--policy", "transformer("], {}, 2,
     "--policy 'transformer(': column 13: expected a list of class names"),
    ("policy", ["--policy", "no_such_policy()"], {}, 2,
     "--policy 'no_such_policy()': column 1: unknown policy 'no_such_policy'"),
    # The GPT's head.weight is tok_emb.weight: a policy that wraps them apart is refused when
    # the model is wrapped (issue 22).
    ("policy", ["--policy", "always"], {}, 1,
     "parameter 'head.weight' is shared with 'tok_emb.weight', which the FSDP unit wrapping "
     "'tok_emb' already flattened; the unit wrapping 'head' cannot flatten it again: wrap the "
     "modules that share a parameter in one unit (their common parent)"),
    ("policy", ["--policy", "size(min_num_params=1)", "--use-orig-params"], {}, 1,
     "parameter 'head.weight' is shared with 'tok_emb.weight'"),
    ("file", ["--data", missing], {}, 1,
     "--data: cannot open '" + missing + "': No such file or directory"),
    ("file", ["--data", tmp], {}, 1, "--data: '" + tmp + "' is a directory"),
    ("file", ["--data", short], {}, 1, "--data: '" + short + "' has 3 bytes; --seq 8 needs more"),
    # --vocab other than 256 reads llm.c token files (tests/examples/test_train_gpt_tokens.py).
    ("file", ["--vocab", "300"], {}, 1,
     "--data: " + DATA + ": magic number 538976266 is not an llm.c token file's"),
    ("file", ["--eval-data", missing, "--eval-batches", "1"], {}, 1,
     "--eval-data: cannot open '" + missing + "'"),
    ("file", ["--data", "/dev/zero"], {}, 1,
     Exact("--data: '/dev/zero' is a character device, not a regular file")),
    ("file", ["--data", fifo], {}, 1,
     Exact("--data: '" + fifo + "' is a FIFO, not a regular file")),
    ("file", ["--eval-data", fifo, "--eval-batches", "1"], {}, 1,
     Exact("--eval-data: '" + fifo + "' is a FIFO, not a regular file")),
    ("file", ["--data", loop], {}, 1,
     Exact("--data: cannot open '" + loop + "': Too many levels of symbolic links")),
    ("file", ["--data", huge], {}, 1,
     Exact("--data: '" + huge + "' has 1099511627776 bytes, more than this process can hold in "
           "memory")),
    ("file", ["--memory-timeline", no_dir_svg], {}, 1,
     Exact("--memory-timeline: cannot write '" + no_dir_svg + "': No such file or directory")),
    ("file", ["--memory-timeline", tmp], {}, 1,
     Exact("--memory-timeline: cannot write '" + tmp + "': Is a directory")),
    ("file", ["--load", missing], {}, 1, missing),
    ("file", ["--load", loop, "--ranks", "1", "--sharding", "NO_SHARD"], {}, 1,
     Exact("rank 0 of 1 failed: '" + loop + "': Too many levels of symbolic links")),
    ("file", ["--resume", empty_dir], {}, 1, "--resume: no checkpoint in '" + empty_dir + "'"),
    ("environment", [], {"FSDP_TIMEOUT_MS": "0"}, 2,
     "environment variable FSDP_TIMEOUT_MS='0' is out of range: expected 1 to 86400000"),
    ("environment", [], {"FSDP_TIMEOUT_MS": "ten"}, 2,
     "environment variable FSDP_TIMEOUT_MS='ten' is not an integer"),
    ("environment", [], {"FSDP_CPU_ALLOCATOR": "jemalloc"}, 2,
     "environment variable FSDP_CPU_ALLOCATOR='jemalloc' is not caching or malloc"),
    ("environment", [], {"FSDP_BLAS_AUTOSELECT": "maybe"}, 2,
     "environment variable FSDP_BLAS_AUTOSELECT='maybe' is neither 0 nor 1"),
    ("environment", [], {"FSDP_USE_FULL_PREC_IN_EVAL": "true"}, 2,
     "environment variable FSDP_USE_FULL_PREC_IN_EVAL='true' is neither 0 nor 1"),
    ("environment", ["--backend", "gloo"], {"RANK": "0", "WORLD_SIZE": "4294967298"}, 2,
     "environment variable WORLD_SIZE='4294967298' is out of range: expected 1 to 2147483647"),
    ("environment", [], {"WORLD_SIZE": "4294967298"}, 2,
     "environment variable WORLD_SIZE='4294967298' is out of range"),
    ("environment", ["--backend", "gloo"], {"RANK": "0", "WORLD_SIZE": "1", "MASTER_PORT": "http"},
     2, "environment variable MASTER_PORT='http' is not an integer"),
    ("environment", ["--backend", "gloo"], {"RANK": "0", "WORLD_SIZE": "1", "MASTER_PORT": "70000"},
     2, "environment variable MASTER_PORT='70000' is out of range: expected 1 to 65535"),
    ("environment", ["--backend", "gloo"],
     {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "10.0.0.1:29500"}, 2,
     "environment variable MASTER_ADDR='10.0.0.1:29500' is not a host name"),
    ("launcher", ["--backend", "gloo"], {"RANK": "1"}, 2,
     "RANK is set but WORLD_SIZE is not: a launcher sets both (or neither)"),
    ("launcher", ["--backend", "gloo"], {"WORLD_SIZE": "2"}, 2,
     "WORLD_SIZE is set but RANK is not"),
    ("launcher", ["--backend", "gloo"], {"RANK": "2", "WORLD_SIZE": "2"}, 2,
     "RANK=2 is not below WORLD_SIZE=2: ranks are 0 to 1"),
    ("launcher", [], {"RANK": "0", "WORLD_SIZE": "2"}, 2,
     "WORLD_SIZE=2 says a launcher started 2 processes, but --backend threads runs every rank"),
]


def check(name, r, code, needle, trains=False):
    """One error line with `needle` (not a library's raw "filesystem error" text), status `code`;
    no step printed unless the row `trains`."""
    lines = r.stderr.splitlines()
    stepped = any(l.startswith("step ") for l in r.stdout.splitlines())
    ok = (r.returncode == code and len(lines) == 1 and lines[0].startswith("train_gpt: error: ")
          and (lines[0] == "train_gpt: error: " + needle if isinstance(needle, Exact)
               else needle in lines[0])
          and "filesystem error" not in lines[0] and stepped == trains)
    if not ok:
        print("FAIL:", name, "rc", r.returncode, "stderr", r.stderr[-400:], "want", code, needle)
    return ok


failures = []
counts = {}
for category, flags, env, code, needle in TABLE:
    try:
        r = subprocess.run(command(flags), capture_output=True, text=True, timeout=120,
                           env=environment(env),
                           # a file larger than 64 GiB cannot be allocated, whatever the overcommit
                           preexec_fn=address_space(64))
    except subprocess.TimeoutExpired:  # a hang (a FIFO's open waiting for a writer)
        r = subprocess.CompletedProcess(flags, None, "", "(still running after 120 s)")
    counts[category] = counts.get(category, 0) + 1
    if not check(f"{category} {env} {flags}", r, code, needle):
        failures.append(flags)

# --steps 0 where it means something: only the model file (./run demo), exit 0.
model_file = os.path.join(tmp, "gpt.json")
r = subprocess.run(command(["--steps", "0", "--ranks", "1", "--sharding", "none", "--export-model",
                           model_file]), capture_output=True, text=True, timeout=120,
                   env=environment({}))
if r.returncode != 0 or not os.path.exists(model_file):
    failures.append("--steps 0 --export-model")
    print("FAIL: --steps 0 --export-model", r.returncode, r.stderr[-400:])

# A NaN loss (--lr 1e300 makes step 1's) stops the job at that step, before --save writes;
# --allow-nonfinite trains on to the end and saves.
saved = os.path.join(tmp, "nonfinite.safetensors")
r = subprocess.run(command(["--steps", "3", "--ranks", "1", "--sharding", "NO_SHARD", "--lr",
                            "1e300", "--save", saved]),
                   capture_output=True, text=True, timeout=120, env=environment({}))
if not check("--lr 1e300", r, 1,
             Exact("rank 0 of 1 failed: step 1: the loss is NaN (first non-finite gradient: the "
                   "root unit); stopped before the optimizer step and before saving anything "
                   "(--allow-nonfinite trains on)"),
             trains=True) or os.path.exists(saved):
    failures.append("--lr 1e300")
r = subprocess.run(command(["--steps", "3", "--lr", "1e300", "--save", saved,
                            "--allow-nonfinite"]), capture_output=True, text=True, timeout=120,
                   env=environment({}))
if (r.returncode != 0 or not re.search(r"^step 1 loss -?nan ", r.stdout, re.M)
        or not os.path.exists(saved)):
    failures.append("--lr 1e300 --allow-nonfinite")
    print("FAIL: --lr 1e300 --allow-nonfinite", r.returncode, r.stdout[-400:], r.stderr[-400:])

# A checkpoint whose data position was edited to one past INT_MAX (it used to wrap to a negative
# step): its index no longer verifies, so it is named as ignored and nothing resumes from it.
ckpt = os.path.join(tmp, "ckpt-position")
r = subprocess.run(command(["--checkpoint-dir", ckpt]), capture_output=True, text=True,
                   timeout=120, env=environment({}))
index = os.path.join(ckpt, "step-00000001", "index.json")
with open(index) as f:
    meta = json.load(f)
meta["progress"]["data_position"] = 3567587328
with open(index, "w") as f:
    json.dump(meta, f)
r = subprocess.run(command(["--resume", ckpt, "--steps", "2"]), capture_output=True, text=True,
                   timeout=120, env=environment({}))
want = [f"train_gpt: warning: --resume: ignoring {ckpt}/step-00000001: index.json is damaged: "
        "its checksum does not match its contents",
        f"--resume: no checkpoint in '{ckpt}'"]
lines = r.stderr.splitlines()
if (r.returncode != 1 or "step " in r.stdout or len(lines) != 2 or lines[0] != want[0]
        or not lines[1].endswith(want[1])):
    failures.append("--resume at data position 3567587328")
    print("FAIL: --resume at data position 3567587328", r.returncode, r.stderr[-400:])

# Activation checkpointing with use_orig_params under FULL_SHARD (issue 22: the recomputation
# once saw the parameters' empty shards): the same per-step losses as without --use-orig-params,
# digit for digit.
def losses(flags):
    r = subprocess.run(command(["--ranks", "2", "--steps", "3", *flags]), capture_output=True,
                       text=True, timeout=120, env=environment({}))
    return r.returncode, [l.split()[3] for l in r.stdout.splitlines() if l.startswith("step ")]


checkpointed = 0
for mode in ["full", "selective"]:
    want = losses(["--checkpoint-activations", mode])
    got = losses(["--checkpoint-activations", mode, "--use-orig-params"])
    if want[0] != 0 or got != want or len(want[1]) != 3:
        failures.append(f"--checkpoint-activations {mode} --use-orig-params")
        print(f"FAIL: --checkpoint-activations {mode}: with --use-orig-params", got,
              "without", want)
    checkpointed += 1

# Launchers whose ranks disagree. Every rank ends non-zero (not killed by the time limit) and
# says why.
launches = 0
if MPIEXEC:
    mpi_env = environment({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                           "OMPI_MCA_rmaps_base_oversubscribe": "1"})
    # mpirun started 2 processes of a program told to run its ranks as threads.
    r = subprocess.run([MPIEXEC, "-np", "2", *command([])], capture_output=True, text=True,
                       timeout=120, env=mpi_env)
    said = [l for l in r.stderr.splitlines() if l.startswith("train_gpt: error: ")]
    if r.returncode == 0 or len(said) != 2 or not all(
            "OMPI_COMM_WORLD_SIZE=2 says a launcher started 2 processes" in l for l in said):
        failures.append("mpirun -np 2 with --backend threads")
        print("FAIL: mpirun -np 2, threads backend:", r.returncode, r.stderr[-600:])
    launches += 1
    # Rank 1 given another value than rank 0 (mpirun's "A : B" form): both ranks stop before
    # training, each with the same line naming the argument and both values, status 2.
    for flag, value, message in [
            ("--lr", "0.5", "ranks disagree on --lr: rank 0 has 0.001, rank 1 has 0.5"),
            ("--seed", "7", "ranks disagree on --seed: rank 0 has 0, rank 1 has 7"),
            ("--batch", "3", "ranks disagree on --batch: rank 0 has 2, rank 1 has 3"),
            ("--optimizer", "sgd",
             "ranks disagree on --optimizer: rank 0 has adamw, rank 1 has sgd"),
            ("--heads", "4", "ranks disagree on --heads: rank 0 has 2, rank 1 has 4; ranks "
             "disagree on the model: rank 0 has GPT L1 D8 H2 T8 V256, ")]:
        r = subprocess.run([MPIEXEC, "-np", "1", *command(["--backend", "mpi"]), ":", "-np", "1",
                            *command(["--backend", "mpi", flag, value])],
                           capture_output=True, text=True, timeout=120, env=mpi_env)
        said = [l for l in r.stderr.splitlines() if l.startswith("train_gpt: error: ")]
        stepped = any(l.startswith("step ") for l in r.stdout.splitlines())
        if r.returncode != 2 or stepped or len(said) != 2 or not all(
                l.startswith("train_gpt: error: " + message) for l in said):
            failures.append(f"mpirun, rank 1 with {flag} {value}")
            print(f"FAIL: mpirun, rank 1 with {flag} {value}:", r.returncode, r.stderr[-600:])
        launches += 1
if HAVE_GLOO:
    # Rank 0 told WORLD_SIZE=2, ranks 1 and 2 told 3, rendezvous through one TCP store.
    port = free_port()
    procs = []
    for rank, world in [(0, 2), (1, 3), (2, 3)]:
        env = environment({"RANK": str(rank), "WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1",
                           "MASTER_PORT": port, "FSDP_TIMEOUT_MS": "5000"})
        procs.append(subprocess.Popen(command(["--backend", "gloo"]),
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                      text=True, env=env))
    # A rank may instead find rank 0 (and its store) gone once rank 0 has ended: then it says so.
    disagree = 0
    for rank, p in enumerate(procs):
        err = stderr_within(p, 60)
        said = [l for l in err.splitlines() if l.startswith("train_gpt: error: ")]
        if p.returncode in (0, None, -9) or len(said) != 1:
            failures.append(f"gloo world size mismatch, rank {rank}")
            print(f"FAIL: gloo world size mismatch, rank {rank}:", p.returncode, err[-600:])
        elif "the ranks disagree on the group" in said[0]:
            disagree += 1
    if disagree == 0:
        failures.append("gloo world size mismatch: no rank says the ranks disagree")
        print("FAIL: gloo world size mismatch: no rank says the ranks disagree")
    launches += 1

# Resources the system refuses: thread ranks or intra-op threads that cannot start end with one
# line naming what could not start (not SIGABRT). The address-space limit refuses thread stacks
# (a per-user process limit does not bind root, who runs CI).


resource_rows = [
    (["--ranks", "1024"], "cannot start rank "),
    (["--ranks", "1", "--sharding", "none", "--threads-per-rank", "1024"],
     "cannot start intra-op thread "),
]
for flags, needle in resource_rows:
    r = subprocess.run(command(flags), capture_output=True, text=True, timeout=120,
                       env=environment({}), preexec_fn=address_space(2))
    if not check(f"address space 2 GiB {flags}", r, 1, needle):
        failures.append(flags)
    elif "Resource temporarily unavailable (the per-user process limit?)" not in r.stderr:
        failures.append(flags)
        print("FAIL:", flags, "no reason in", r.stderr)

# Stores obey FSDP_TIMEOUT_MS: MASTER_PORT held by a program that accepts and never answers.
# Rank 0 cannot start the store (the port is in use); rank 1 connects to the other program and
# fails within the timeout naming the address, instead of waiting forever.
if HAVE_GLOO:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(8)
        port = str(holder.getsockname()[1])
        base = {"WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port,
                "FSDP_TIMEOUT_MS": "2000"}
        for rank, needle in [(0, f"port {port} on 127.0.0.1 is already in use"),
                             (1, f"connected to 127.0.0.1:{port}, but no store answered within "
                                 "2000 ms")]:
            r = subprocess.run(command(["--backend", "gloo"]), capture_output=True, text=True,
                               timeout=60, env=environment({**base, "RANK": str(rank)}))
            if not check(f"gloo rank {rank}, MASTER_PORT held by a silent program", r, 1, needle):
                failures.append(f"held MASTER_PORT, rank {rank}")


# --- Checkpoints that verify (issue 22): each case's exit status and its exact stderr lines. ---
# Under the threads backend the first failing rank's error reads "rank R of W failed: ...": which
# rank is first varies, so that part is left out of the comparison.
RANK_FAILED = re.compile(r"^train_gpt: error: rank \d+ of \d+ failed: ")
HEX16 = "[0-9a-f]{16}"


def train(flags, timeout=120):
    return subprocess.run(command(flags), capture_output=True, text=True, timeout=timeout,
                          env=environment({}))


def stderr_lines(r):
    return [RANK_FAILED.sub("train_gpt: error: ", l) for l in r.stderr.splitlines()]


def safetensors_header(path):
    """The header of a safetensors file and the name of the tensor whose bytes end it."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    last = max((k for k in header if k != "__metadata__"),
               key=lambda k: header[k]["data_offsets"][1])
    return header, last


def flip_last_bit(path):
    with open(path, "r+b") as f:
        f.seek(-1, os.SEEK_END)
        b = f.read(1)[0]
        f.seek(-1, os.SEEK_END)
        f.write(bytes([b ^ 1]))


def damaged_line(path):
    """The error for a flipped bit in the last tensor of `path` (its recorded checksum exact)."""
    header, last = safetensors_header(path)
    recorded = header.get("__metadata__", {}).get("xxh3:" + last)
    if recorded is None:
        return f"({path} records no checksum of '{last}')"
    return re.compile(re.escape(f"train_gpt: error: load_safetensors: {path}: tensor '{last}' is "
                                "damaged: its bytes hash to ") + HEX16 +
                      re.escape(f", the header records {recorded} (xxh3)"))


def copy_of(src, name):
    dst = os.path.join(tmp, name)
    shutil.copytree(src, dst)
    return dst


def checkpoint_cases():
    """Runs the checkpoint cases; returns (number of cases, failures)."""
    ck = os.path.join(tmp, "ckpt")
    first = train(["--checkpoint-dir", ck])  # 1 step: 2 ranks x batch 2, adamw, lr 0.001
    if first.returncode != 0 or first.stderr:
        return 1, [f"the first checkpoint: rc {first.returncode} {first.stderr[-400:]}"]
    step1 = os.path.join(ck, "step-00000001")
    resume = ["--resume", ck, "--steps", "2"]
    mismatch = f"train_gpt: error: --resume: {step1} does not match this job: "
    with open(DATA, "rb") as f:
        data = f.read()
    half = os.path.join(tmp, "half.txt")
    with open(half, "wb") as f:
        f.write(data[:len(data) // 2])
    flipped = copy_of(ck, "ckpt-flipped")
    flipped_piece = os.path.join(flipped, "step-00000001", "model-rank-00000.safetensors")
    flip_last_bit(flipped_piece)
    full = os.path.join(tmp, "full.safetensors")
    saved_full = train(["--save", full])
    flip_last_bit(full)
    full_dir = os.path.join(tmp, "full-dir")  # Hugging Face's layout
    saved_full_dir = train(["--save", full_dir])
    strays = copy_of(ck, "ckpt-strays")
    shutil.copytree(os.path.join(strays, "step-00000001"), os.path.join(strays, "step-backup"))
    os.mkdir(os.path.join(strays, "step-00000005"))
    cut = copy_of(ck, "ckpt-cut-index")
    cut_step = os.path.join(cut, "step-00000001")
    with open(os.path.join(cut_step, "index.json"), "r+") as f:
        f.truncate(100)
    in_the_way = os.path.join(tmp, "ckpt-in-the-way")
    os.makedirs(os.path.join(in_the_way, "step-00000002"))
    elsewhere = os.path.join(tmp, "ckpt-elsewhere")
    os.mkdir(elsewhere)
    with open(os.path.join(elsewhere, ".lock"), "w") as f:
        f.write("otherhost 12345\n")
    stale = os.path.join(tmp, "ckpt-stale")
    os.mkdir(stale)
    ended = subprocess.Popen(["true"])
    ended.wait()
    with open(os.path.join(stale, ".lock"), "w") as f:
        f.write(f"{socket.gethostname()} {ended.pid}\n")
    usage = " (see train_gpt --help)"
    # (name, flags, exit status, stderr lines: strings exact, patterns matched whole)
    cases = [
        ("other --heads, same shapes", [*resume, "--heads", "4"], 1,
         [mismatch + "heads saved 2, now 4 (a checkpoint of another model)"]),
        ("other --batch", [*resume, "--batch", "4"], 1,
         [mismatch + "global_batch saved 4, now 8 (--batch x world size; the data order depends "
          "on it: keep it at 4)"]),
        ("other world size, same per-rank batch", [*resume, "--ranks", "1"], 1,
         [mismatch + "global_batch saved 4, now 2 (--batch x world size; the data order depends "
          "on it: keep it at 4)"]),
        ("other world size, same global batch", [*resume, "--ranks", "1", "--batch", "4"], 1,
         [mismatch + "world_size saved 2, now 1 (pass --allow-change world-size to resume at "
          "another world size with the same global batch)"]),
        ("other world size, allowed", [*resume, "--ranks", "4", "--batch", "1", "--allow-change",
                                       "world-size"], 0, []),
        ("--lr with --resume", [*resume, "--lr", "0.5"], 1,
         [mismatch + "lr saved 0.001, now 0.5 (pass --allow-change lr to go on with --lr 0.5, or "
          "give --lr 0.001 to keep the saved one)"]),
        ("--lr with --resume, allowed", [*resume, "--lr", "0.5", "--allow-change", "lr"], 0, []),
        ("other optimizer", [*resume, "--optimizer", "sgd"], 1,
         [mismatch + "optimizer saved adamw, now sgd (its state is adamw's: give --optimizer "
          "adamw)"]),
        ("other data", [*resume, "--data", half], 1,
         [mismatch + f"data_bytes saved {len(data)}, now {len(data) // 2} (the checkpoint was "
          "trained on other --data)"]),
        ("a bit flipped in a piece", ["--resume", flipped, "--steps", "2"], 1,
         [damaged_line(flipped_piece)]),
        ("a bit flipped in a full checkpoint", ["--load", full], 1,
         [damaged_line(full)] if saved_full.returncode == 0 else ["(--save failed)"]),
        ("--load of the same model's full checkpoint", ["--load", full_dir], 0,
         [] if saved_full_dir.returncode == 0 else ["(--save failed)"]),
        ("--load of another model's full checkpoint", ["--load", full_dir, "--heads", "4"], 1,
         [f"train_gpt: error: --load: {full_dir} does not match this job: heads saved 2, now 4 (a "
          "checkpoint of another model)"]),
        ("step-backup and an incomplete step: ignored, said, kept",
         ["--resume", strays, "--steps", "2", "--checkpoint-dir", strays, "--keep", "1"], 0,
         [f"train_gpt: warning: --resume: ignoring {strays}/step-00000005: no index.json (an "
          "incomplete save?)",
          f"train_gpt: warning: --resume: ignoring {strays}/step-backup: not a checkpoint's name "
          "(step-NNNNNNNN, a directory)"]),
        ("the only checkpoint's index cut short", ["--resume", cut, "--steps", "2"], 1,
         [f"train_gpt: warning: --resume: ignoring {cut_step}: index.json is damaged: not valid "
          "JSON", f"train_gpt: error: --resume: no checkpoint in '{cut}'"]),
        ("a step directory a save would replace", ["--checkpoint-dir", in_the_way, "--steps",
                                                   "2"], 1,
         [f"train_gpt: warning: --checkpoint-dir: ignoring {in_the_way}/step-00000002: no "
          "index.json (an incomplete save?)",
          f"train_gpt: error: --checkpoint-dir: {in_the_way}/step-00000002 is in the way of this "
          "job's checkpoint of step 2 (no index.json (an incomplete save?)); move it away"]),
        ("a lock of another host", ["--checkpoint-dir", elsewhere], 1,
         [f"train_gpt: error: checkpoint directory '{elsewhere}' is in use by another job (host "
          f"otherhost, pid 12345; lock file {elsewhere}/.lock): if that job has ended, remove the "
          "lock file"]),
        ("a stale lock of this host", ["--checkpoint-dir", stale], 0,
         [f"train_gpt: warning: --checkpoint-dir: took over the lock {stale}/.lock of pid "
          f"{ended.pid} on this host, which is no longer running"]),
        ("--resume ''", ["--resume", ""], 2,
         ["train_gpt: error: --resume: expected a path, got ''" + usage]),
        ("--checkpoint-dir ''", ["--checkpoint-dir", ""], 2,
         ["train_gpt: error: --checkpoint-dir: expected a path, got ''" + usage]),
        ("--load and --resume", ["--load", full, "--resume", ck], 2,
         ["train_gpt: error: --load and --resume both give the starting weights: --resume "
          "continues a run (model, optimizer, progress), --load starts one from full weights; "
          "give one" + usage]),
        ("--allow-change without --resume", ["--allow-change", "lr"], 2,
         ["train_gpt: error: --allow-change is for --resume" + usage]),
        ("--allow-change of a field that may not change", ["--resume", ck, "--allow-change",
                                                           "lr,epochs"], 2,
         ["train_gpt: error: --allow-change: epochs not in {lr,world-size}" + usage]),
        ("an unwritable --save", ["--save", short + "/model.safetensors"], 1,
         [f"train_gpt: error: --save '{short}/model.safetensors': cannot write there: Not a "
          "directory"]),
        ("a file as --checkpoint-dir", ["--checkpoint-dir", short], 1,
         [f"train_gpt: error: checkpoint directory '{short}' exists and is not a directory"]),
        ("a file as --resume", ["--resume", short], 1,
         [f"train_gpt: error: --resume: checkpoint: '{short}' is not a directory"]),
    ]
    if os.geteuid() != 0:  # root writes in a read-only directory
        read_only = os.path.join(tmp, "ckpt-read-only")
        os.mkdir(read_only, 0o555)
        cases.append(("a read-only --checkpoint-dir", ["--checkpoint-dir", read_only], 1,
                      [f"train_gpt: error: checkpoint directory '{read_only}': cannot create the "
                       f"lock file {read_only}/.lock: Permission denied"]))
    bad = []
    for name, flags, code, want in cases:
        r = train(flags)
        got = stderr_lines(r)
        same = len(got) == len(want) and all(
            w.fullmatch(g) if isinstance(w, re.Pattern) else g == w for g, w in zip(got, want))
        # A refusal comes before the first step.
        early = code == 0 or "step " not in r.stdout
        if r.returncode != code or not same or not early:
            bad.append(name)
            print(f"FAIL: checkpoint case '{name}': rc {r.returncode} (want {code})\n got  {got}"
                  f"\n want {want}\n stdout {r.stdout[-300:]}")
    # --keep removed the older of the job's own checkpoints, nothing else; the lock went with it.
    left = sorted(os.listdir(strays))
    if left != ["step-00000002", "step-00000005", "step-backup"]:
        bad.append("--keep deleted what it did not write")
        print("FAIL: --keep with strays left", left)
    # Two jobs on one directory: the second fails at its start, naming the first's host and pid.
    together = os.path.join(tmp, "ckpt-together")
    job = subprocess.Popen(command(["--checkpoint-dir", together, "--steps", "100000000"]),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           env=environment({}))
    try:
        lock = os.path.join(together, ".lock")
        for _ in range(600):
            if os.path.exists(lock) or job.poll() is not None:
                break
            time.sleep(0.1)
        r = train(["--checkpoint-dir", together])
        want = (f"train_gpt: error: checkpoint directory '{together}' is in use by another job "
                f"(host {socket.gethostname()}, pid {job.pid}; lock file {lock})")
        if r.returncode != 1 or stderr_lines(r) != [want]:
            bad.append("two jobs on one --checkpoint-dir")
            print("FAIL: two jobs on one --checkpoint-dir:", r.returncode, stderr_lines(r), want)
    finally:
        job.kill()
        job.wait()
    extra = 2
    if HAVE_GLOO:
        # Rank 0's refusal reaches every process: each ends at once with rank 0's message.
        port = free_port()
        procs = [subprocess.Popen(command(["--backend", "gloo", "--checkpoint-dir", elsewhere]),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                  env=environment({"RANK": str(rank), "WORLD_SIZE": "2",
                                                   "MASTER_ADDR": "127.0.0.1",
                                                   "MASTER_PORT": port}))
                 for rank in range(2)]
        want = [f"train_gpt: error: checkpoint directory '{elsewhere}' is in use by another job "
                f"(host otherhost, pid 12345; lock file {elsewhere}/.lock): if that job has ended, "
                "remove the lock file"]
        for rank, p in enumerate(procs):
            err = stderr_within(p, 60)
            if p.returncode != 1 or err.splitlines() != want:
                bad.append(f"gloo rank {rank} with a locked --checkpoint-dir")
                print(f"FAIL: gloo rank {rank}, locked --checkpoint-dir:", p.returncode, err[-400:])
        extra += 1
    return len(cases) + extra, bad


checkpoint_count, checkpoint_failures = checkpoint_cases()
failures += checkpoint_failures


def shard_layout(flags):
    """The files and index that --save DIR writes with `flags` (the initial model: --steps 0)."""
    out = os.path.join(tmp, "layout-" + "-".join(flags).replace(".", "_"))
    r = train(["--steps", "0", "--save", out, *flags])
    if r.returncode != 0:
        return f"rc {r.returncode}: {r.stderr[-300:]}"
    index = os.path.join(out, "model.safetensors.index.json")
    return sorted(os.listdir(out)), json.load(open(index))["weight_map"] if os.path.exists(
        index) else None


# --max-shard-size in transformers' units: "2.15KB" is 2150 bytes, "2.15KiB" 2201. The tiny
# model's files: the embedding (8 KiB) alone, then the attention (1408 bytes), then linear1
# (1152) joined by linear2.weight (1024) only under a limit of 2176 or more.
layouts = {size: shard_layout(["--max-shard-size", size])
           for size in ("2KB", "2000", "2.15KB", "2150", "2.15KiB", "2201")}
default_layout = shard_layout([])
for a, b in (("2KB", "2000"), ("2.15KB", "2150"), ("2.15KiB", "2201")):
    if layouts[a] != layouts[b] or not isinstance(layouts[a], tuple) or len(layouts[a][0]) < 4:
        failures.append(f"--max-shard-size {a}: {layouts[a]}, {b}: {layouts[b]}")
if layouts["2.15KB"] == layouts["2.15KiB"]:
    failures.append(f"--max-shard-size 2.15KB and 2.15KiB: the same layout {layouts['2.15KB']}")
if default_layout != (["model.safetensors"], None):
    failures.append(f"--save without --max-shard-size: {default_layout}")

if failures:
    print(f"{len(failures)} failure(s): {failures}")
    sys.exit(1)
print(f"ok: {len(TABLE)} bad inputs ({', '.join(f'{k} {v}' for k, v in counts.items())}), "
      f"--steps 0 --export-model, {checkpointed} checkpointing mode(s) with --use-orig-params, "
      f"{launches} launch(es) whose ranks disagree, {len(resource_rows)} refused thread starts, "
      f"{checkpoint_count} checkpoint cases, {len(layouts) + 1} --max-shard-size layouts")
