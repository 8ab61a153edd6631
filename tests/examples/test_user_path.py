#!/usr/bin/env python3
"""The user's path of issue 26, end to end with the programs as a user runs them: `tokenize` a
text with a fixture tokenizer -> `finetune` a tiny GPT-2 (tied head) and Llama (GQA) whose
vocabularies are the tokenizers' (tests/fixtures/text_models/) on 2 thread ranks and, when
built, under `mpirun -np 2` (--max-shard-size small: a sharded directory) with --save ->
`generate` text from each saved directory.
Checked: the token file's summary line; the held-out loss falls; the MPI run prints the thread
run's losses (1e-4 relative); the saved directory carries the tokenizer and, under a small
--max-shard-size, an index and several files; generate's text is tokenize --decode of its ids,
which start with the prompt's ids as transformers' tokenizer gives them, are the same from both
saved directories, and differ from the untrained model's greedy continuation.
Usage: test_user_path.py TOKENIZE FINETUNE GENERATE FIXTURES_DIR [MPIRUN]
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

TOKENIZE, FINETUNE, GENERATE, FIXTURES = sys.argv[1:5]
MPIRUN = sys.argv[5] if len(sys.argv) > 5 else ""
MPI_ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
CORPUS = os.path.join(FIXTURES, "tokenizers", "corpus.txt")
STEPS = 6
failures = []


def run(args, launcher=(), env=None):
    p = subprocess.run(list(launcher) + args, capture_output=True, text=True, timeout=300,
                       env=env)
    return p.returncode, p.stdout, p.stderr.strip()


def fail(what):
    failures.append(what)


def losses_of(out):
    losses = [float(l.split()[3]) for l in out.splitlines() if l.startswith("step ")]
    held = [l.split() for l in out.splitlines() if l.startswith("held-out loss")]
    return losses, (float(held[0][3]), float(held[0][5])) if held else None


def close(a, b, rtol=1e-4):
    return abs(a - b) <= rtol * abs(b)


def write_token_file(path, ids, llama3):
    """An llm.c token file (hf-models.md): 256 int32 header, then uint16 or uint32 tokens."""
    header = [20240801 if llama3 else 20240520, 7 if llama3 else 1, len(ids)] + [0] * 253
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack(("<%dI" if llama3 else "<%dH") % len(ids), *ids))


def within_shard_size(path, limit):
    """A safetensors file's tensors take at most `limit` bytes, or it holds one tensor (a tensor
    above the limit gets a file of its own, as transformers does)."""
    with open(path, "rb") as f:
        header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
    sizes = [v["data_offsets"][1] - v["data_offsets"][0]
             for k, v in header.items() if k != "__metadata__"]
    return len(sizes) == 1 or sum(sizes) <= limit


def generate(model_dir, e):
    """generate's ids and text for the fixture's prompt, or None after recording a failure."""
    code, out, err = run([GENERATE, "--model-dir", model_dir, "--prompt", e["prompt"],
                          "--max-new-tokens", str(e["max_new_tokens"]), "--print-ids"])
    lines = out.split("\n", 1)
    if code != 0 or err or len(lines) != 2:
        fail(f"generate {model_dir}: exit {code}, stdout {out!r}, stderr {err!r}")
        return None
    return [int(x) for x in lines[0].split(",")], lines[1].rstrip("\n")


tmp = tempfile.mkdtemp()
try:
    for model, llama3 in (("gpt2", False), ("llama", True)):
        fixture = os.path.join(FIXTURES, "text_models", model)
        e = json.load(open(os.path.join(fixture, "expected.json"), encoding="utf-8"))
        tokenizer = os.path.join(fixture, "tokenizer.json")
        # 1. tokenize: two documents (the corpus twice); Llama's as llm.c's Llama 3 files.
        tokens = os.path.join(tmp, model + ".bin")
        extra = ["--format", "llama3", "--eot-delimiter"] if llama3 else []
        code, out, err = run([TOKENIZE, "--tokenizer", tokenizer, "--input", CORPUS, "--input",
                              CORPUS, "--output", tokens] + extra)
        fmt_name = "llama3" if llama3 else "gpt2"
        if code != 0 or not out.startswith("tokenize: 2 document(s), ") or \
                not out.rstrip().endswith(f"tokens, format {fmt_name} -> {tokens}"):
            fail(f"tokenize {model}: exit {code}, stdout {out!r}, stderr {err!r}")
            continue
        # 2. finetune on 2 thread ranks, and one process per rank under mpirun.
        common = [FINETUNE, "--model-dir", fixture, "--data", tokens, "--eval-data", tokens,
                  "--eval-batches", "2", "--seq", "16", "--batch", "2", "--steps", str(STEPS),
                  "--optimizer", "adamw", "--lr", "0.01"]
        saved = {"threads": os.path.join(tmp, model + "-threads")}
        code, out, err = run(common + ["--ranks", "2", "--save", saved["threads"]])
        losses, held = losses_of(out)
        if code != 0 or len(losses) != STEPS or held is None or not held[1] < held[0]:
            fail(f"finetune {model} on threads: exit {code}, losses {losses}, held-out {held}, "
                 f"stderr {err[-300:]!r}")
            continue
        if MPIRUN:
            saved["mpi"] = os.path.join(tmp, model + "-mpi")
            launcher = [MPIRUN, "-np", "2", "--oversubscribe", "--bind-to", "none"]
            code, out, err = run(common + ["--backend", "mpi", "--save", saved["mpi"],
                                           "--max-shard-size", "40KB"], launcher, MPI_ENV)
            mpi_losses, mpi_held = losses_of(out)
            if code != 0 or len(mpi_losses) != STEPS or mpi_held is None or \
                    not all(close(a, b) for a, b in zip(mpi_losses + list(mpi_held),
                                                        losses + list(held))):
                fail(f"finetune {model} under mpirun: exit {code}, losses {mpi_losses} "
                     f"{mpi_held}, threads' {losses} {held}, stderr {err[-300:]!r}")
                del saved["mpi"]
            else:
                files = sorted(os.listdir(saved["mpi"]))
                shards = [f for f in files if f.startswith("model-0")]
                if "model.safetensors.index.json" not in files or len(shards) < 2 or \
                        not all(within_shard_size(os.path.join(saved["mpi"], f), 40000)
                                for f in shards):
                    fail(f"finetune {model} --max-shard-size 40KB wrote {files}")
        # 3. generate text from each saved directory (its tokenizer.json copied by --save).
        results = {}
        for how, d in saved.items():
            if not os.path.isfile(os.path.join(d, "tokenizer.json")):
                fail(f"{model} {how}: the saved directory has no tokenizer.json: "
                     f"{sorted(os.listdir(d))}")
            got = generate(d, e)
            if got is None:
                continue
            ids, text = got
            results[how] = got
            if ids[:len(e["prompt_ids"])] != e["prompt_ids"] or \
                    len(ids) > len(e["prompt_ids"]) + e["max_new_tokens"]:
                fail(f"{model} {how}: ids {ids} do not continue the prompt {e['prompt_ids']}")
            if ids == e["greedy_ids"]:
                fail(f"{model} {how}: the trained model continues as the untrained one: {ids}")
            # The text is the decode of the ids (tokenize --decode, as tokenizer.decode).
            ids_file, text_file = os.path.join(tmp, "ids.bin"), os.path.join(tmp, "ids.txt")
            write_token_file(ids_file, ids, llama3)
            code, out, err = run([TOKENIZE, "--tokenizer", tokenizer, "--decode", "--input",
                                  ids_file, "--output", text_file])
            decoded = open(text_file, encoding="utf-8").read() if code == 0 else err
            if decoded != text:
                fail(f"{model} {how}: generate printed {text!r}, the ids decode to {decoded!r}")
        if len(results) == 2 and results["threads"] != results["mpi"]:
            fail(f"{model}: threads' saved model generates {results['threads']}, MPI's "
                 f"{results['mpi']}")
        print(f"{model}: held-out loss {held[0]:.4f} -> {held[1]:.4f}; generated from "
              f"{', '.join(results)}: {next(iter(results.values()))[1]!r}" if results else model)
finally:
    shutil.rmtree(tmp, ignore_errors=True)

for f in failures:
    print("FAIL:", f)
sys.exit(1 if failures else 0)
