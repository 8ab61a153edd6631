#!/usr/bin/env python3
"""train_gpt's bad inputs as a table (issue 12, defect 6 and item 4), by category: option, policy,
file, environment and launcher. Each bad input ends the program with its exit status (2 for the
command line and the launch environment, 1 for a file or a failure while running) and one line on
stderr 'train_gpt: error: ...' that says what was wrong, before any training; a launch that
disagrees across ranks ends every rank within the timeout with a message.
Usage: test_train_gpt_inputs.py TRAIN_GPT DATA_FILE MPIEXEC|'' HAVE_GLOO(0|1)"""
import os
import socket
import subprocess
import sys
import tempfile

EXE, DATA, MPIEXEC, HAVE_GLOO = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1"
tmp = tempfile.mkdtemp()
short = os.path.join(tmp, "short.txt")
with open(short, "w") as f:
    f.write("abc")
missing = os.path.join(tmp, "missing.txt")
empty_dir = os.path.join(tmp, "no-checkpoints")
os.mkdir(empty_dir)
# A tiny model; the threads backend's default of 2 ranks.
TINY = ["--layers", "1", "--d-model", "8", "--heads", "2", "--seq", "8", "--batch", "2",
        "--steps", "1"]
RANGE = "expected an integer from"
# Variables of the launch that the test's own environment must not leak into a row.
LAUNCH_VARS = ["RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "FSDP_STORE_PATH",
               "FSDP_TIMEOUT_MS", "FSDP_BACKEND", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
               "FSDP_CPU_ALLOCATOR", "FSDP_BLAS_AUTOSELECT", "FSDP_USE_FULL_PREC_IN_EVAL"]


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
    ("option", ["--batch", "9223372036854775808"], {}, 2, "--batch: " + RANGE),
    ("option", ["--steps", "-1"], {}, 2, "--steps: " + RANGE + " 0 to 100000000, got '-1'"),
    ("option", ["--steps", "0"], {}, 2, "--steps 0 trains nothing"),
    ("option", ["--steps", "ten"], {}, 2, "--steps: " + RANGE + " 0 to 100000000, got 'ten'"),
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
    ("option", ["--max-shard-size", "0"], {}, 2, "--max-shard-size: " + RANGE),
    ("option", ["--optimizer", "adam"], {}, 2, "--optimizer: adam not in {sgd,adamw}"),
    ("option", ["--sharding", "FULL"], {}, 2, "--sharding: unknown strategy 'FULL'"),
    ("option", ["--mixed-precision", "fp8"], {}, 2,
     "--mixed-precision: 'fp8' is not bf16, fp16 or none"),
    ("option", ["--backward-prefetch", "later"], {}, 2,
     "--backward-prefetch: 'later' is not pre, post or none"),
    ("option", ["--backend", "carrier-pigeon"], {}, 2, "--backend: carrier-pigeon not in"),
    ("option", ["--checkpoint-activations", "some"], {}, 2,
     "--checkpoint-activations: some not in"),
    ("option", ["--ranks", "2", "--sharding", "none"], {}, 2,
     "--sharding none runs the unsharded model on one rank, got --ranks 2"),
    ("option", ["--ranks", "1", "--sharding", "none", "--mixed-precision", "bf16"], {}, 2,
     "--mixed-precision is FSDP's"),
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
    ("file", ["--eval-data", missing, "--eval-batches", "1"], {}, 1,
     "--eval-data: cannot open '" + missing + "'"),
    ("file", ["--load", missing], {}, 1, missing),
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


def check(name, r, code, needle):
    lines = r.stderr.splitlines()
    ok = (r.returncode == code and len(lines) == 1 and lines[0].startswith("train_gpt: error: ")
          and needle in lines[0])
    if not ok:
        print("FAIL:", name, "rc", r.returncode, "stderr", r.stderr[-400:], "want", code, needle)
    return ok


failures = []
counts = {}
for category, flags, env, code, needle in TABLE:
    r = subprocess.run(command(flags), capture_output=True, text=True, timeout=120,
                       env=environment(env))
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
        try:
            _, err = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            _, err = p.communicate()
            err = "(still running after 60 s) " + err
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

if failures:
    print(f"{len(failures)} failure(s)")
    sys.exit(1)
print(f"ok: {len(TABLE)} bad inputs ({', '.join(f'{k} {v}' for k, v in counts.items())}), "
      f"--steps 0 --export-model, {checkpointed} checkpointing mode(s) with --use-orig-params, "
      f"{launches} launch(es) whose ranks disagree")
