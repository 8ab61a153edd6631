#!/usr/bin/env python3
"""examples/finetune against transformers (tests/fixtures/finetune/, made by
tools/torch_reference/make_finetune_fixtures.py): per-step losses and the held-out loss before
and after equal transformers' training of the same model on the same data order (within 1e-4
relative), for GPT-2 (tied head), Llama (GQA), Qwen2 (q/k/v biases, tied head), Qwen3
(q_norm, k_norm), Gemma 3 (sliding and full layers, four norms a layer) and Gemma 2 (softcaps),
AdamW, SGD with weight decay and gradient
clipping, unsharded, on 2 thread ranks (every sharding strategy on one run), and, when built,
on MPI and Gloo (mpirun -np 2); --checkpoint-dir then --resume equals the uninterrupted run;
--save writes a save_pretrained directory that finetune loads
again to the same held-out loss, with the source's generation_config.json; a head the config ties
but the weights hold apart is untied (transformers' tie_weights); bad inputs are one line.
Usage: test_finetune.py FINETUNE FIXTURES_DIR [MPIRUN]
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

EXE, FIXTURES = sys.argv[1], os.path.join(sys.argv[2], "finetune")
MPIRUN = sys.argv[3] if len(sys.argv) > 3 else ""
EXPECTED = json.load(open(os.path.join(FIXTURES, "expected.json")))
MPI_ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
failures = []


def run(args, launcher=(), env=None):
    p = subprocess.run(list(launcher) + [EXE] + args, capture_output=True, text=True,
                       timeout=120, env=env)
    return p.returncode, p.stdout, p.stderr.strip()


def parse(out):
    losses = [float(l.split()[3]) for l in out.splitlines() if l.startswith("step ")]
    held = [l.split() for l in out.splitlines() if l.startswith("held-out loss")]
    return losses, (float(held[0][3]), float(held[0][5])) if held else None


def close(a, b, rtol=1e-4):
    return abs(a - b) <= rtol * abs(b)


def job(spec, ranks, batch, extra=(), launcher=(), env=None, save=None, steps=None):
    args = ["--model-dir", os.path.join(FIXTURES, spec["model"]),
            "--data", os.path.join(FIXTURES, "train.bin"),
            "--eval-data", os.path.join(FIXTURES, "val.bin"),
            "--eval-batches", str(EXPECTED["eval_batches"]), "--seq", str(EXPECTED["seq"]),
            "--batch", str(batch), "--steps", str(steps or EXPECTED["steps"]),
            "--optimizer", spec["optimizer"], "--lr", str(spec["lr"])]
    if "weight_decay" in spec:
        args += ["--weight-decay", str(spec["weight_decay"])]
    if "clip_grad_norm" in spec:
        args += ["--clip-grad-norm", str(spec["clip_grad_norm"])]
    if not launcher:
        args += ["--ranks", str(ranks)]
    if save:
        args += ["--save", save]
    return run(args + list(extra), launcher, env)


compared = []


def compare(what, spec, code, out, err):
    compared.append(what)
    if code != 0:
        failures.append(f"{what}: exit {code}: {err}")
        return
    losses, held = parse(out)
    want = spec["losses"]
    if len(losses) != len(want) or not all(close(a, b) for a, b in zip(losses, want)):
        failures.append(f"{what}: losses {losses}, transformers' {want}")
    if held is None or not (close(held[0], spec["eval_before"]) and
                            close(held[1], spec["eval_after"])):
        failures.append(f"{what}: held-out {held}, transformers' "
                        f"{(spec['eval_before'], spec['eval_after'])}")


G = EXPECTED["global_batch"]
tmp = tempfile.mkdtemp()
try:
    for i, spec in enumerate(EXPECTED["runs"]):
        name = f"{spec['model']} {spec['optimizer']} run {i}"
        compare(f"{name}, unsharded", spec,
                *job(spec, 1, G, ["--sharding", "none"]))
        compare(f"{name}, 2 thread ranks FULL_SHARD", spec, *job(spec, 2, G // 2))
    # Every strategy and the wrapping options on one run of GPT-2, Llama and each Gemma (their
    # embedding's class, sliding layers and per-type rotary buffers through FSDP's meta build).
    gemmas = [next(s for s in EXPECTED["runs"] if s["model"] == m) for m in ("gemma3", "gemma2")]
    for spec in (EXPECTED["runs"][0], EXPECTED["runs"][3], *gemmas):
        for extra in (["--sharding", "SHARD_GRAD_OP"], ["--sharding", "NO_SHARD"],
                      ["--sharding", "HYBRID_SHARD", "--node-size", "1"],
                      ["--use-orig-params"], ["--checkpoint-activations", "full"],
                      ["--device", "fake_cuda"]):  # the meta build materialised on a device
            compare(f"{spec['model']} {' '.join(extra)}", spec, *job(spec, 2, G // 2, extra))
    # Other backends, one process per rank.
    if MPIRUN:
        launcher = [MPIRUN, "-np", "2", "--oversubscribe", "--bind-to", "none"]
        for backend in ("mpi", "gloo"):
            for spec in (EXPECTED["runs"][0], EXPECTED["runs"][3]):
                code, out, err = job(spec, 2, G // 2, ["--backend", backend], launcher, MPI_ENV)
                if code != 0 and backend == "gloo" and "gloo" in err and "not" in err:
                    continue  # a build without gloo
                compare(f"{spec['model']} on {backend}", spec, code, out, err)
    # --save: a save_pretrained directory, loaded again to the trained model's held-out loss.
    for spec in (EXPECTED["runs"][0], EXPECTED["runs"][3]):
        saved = os.path.join(tmp, spec["model"])
        code, out, err = job(spec, 2, G // 2, save=saved)
        if code != 0:
            failures.append(f"--save {spec['model']}: exit {code}: {err}")
            continue
        files = sorted(os.listdir(saved))
        if files != ["config.json", "generation_config.json", "model.safetensors"]:
            failures.append(f"--save {spec['model']}: wrote {files}")
        code, out, err = run(["--model-dir", saved, "--data", os.path.join(FIXTURES, "train.bin"),
                              "--eval-data", os.path.join(FIXTURES, "val.bin"),
                              "--eval-batches", str(EXPECTED["eval_batches"]),
                              "--seq", str(EXPECTED["seq"]), "--batch", str(G // 2),
                              "--steps", "0"])
        held = parse(out)[1] if code == 0 else None
        if held is None or not close(held[0], spec["eval_after"]):
            failures.append(f"--save {spec['model']}: reloaded held-out {held} ({err}), "
                            f"trained {spec['eval_after']}")
    # --save keeps the source's generation_config.json (its EOS ids and sampling defaults, as
    # transformers' save_pretrained does), not one derived from config.json.
    spec = EXPECTED["runs"][0]
    source = os.path.join(tmp, "with_generation_config")
    shutil.copytree(os.path.join(FIXTURES, spec["model"]), source)
    generation = {"bos_token_id": 0, "eos_token_id": [0, 5], "pad_token_id": 3, "do_sample": True,
                  "temperature": 0.7, "top_p": 0.9, "transformers_version": "5.24.0"}
    with open(os.path.join(source, "generation_config.json"), "w") as f:
        json.dump(generation, f)
    saved = os.path.join(tmp, "saved_generation_config")
    code, out, err = run(["--model-dir", source, "--data", os.path.join(FIXTURES, "train.bin"),
                          "--seq", str(EXPECTED["seq"]), "--batch", "2", "--steps", "1",
                          "--save", saved])
    kept = json.load(open(os.path.join(saved, "generation_config.json"))) if code == 0 else None
    if kept != generation:
        failures.append(f"--save: generation_config.json {kept} ({err}), the source's {generation}")
    # --save copies the tokenizer's files the source has (fast and slow ones, the chat template),
    # byte for byte, and nothing else of the source's.
    tokenizer_files = {"tokenizer.json": "{}", "tokenizer_config.json": '{"legacy": false}',
                       "special_tokens_map.json": "{}", "added_tokens.json": "{}",
                       "chat_template.jinja": "{{ messages }}", "tokenizer.model": "\x00spm",
                       "vocab.json": "{}", "merges.txt": "#version: 0.2\n"}
    for name, text in tokenizer_files.items():
        with open(os.path.join(source, name), "w") as f:
            f.write(text)
    with open(os.path.join(source, "README.md"), "w") as f:
        f.write("a model card")
    saved = os.path.join(tmp, "saved_tokenizer_files")
    code, out, err = run(["--model-dir", source, "--data", os.path.join(FIXTURES, "train.bin"),
                          "--seq", str(EXPECTED["seq"]), "--batch", "2", "--steps", "1",
                          "--save", saved])
    copied = {n: open(os.path.join(saved, n)).read() for n in tokenizer_files
              if os.path.exists(os.path.join(saved, n))} if code == 0 else err
    if copied != tokenizer_files or os.path.exists(os.path.join(saved, "README.md")):
        failures.append(f"--save: tokenizer files {copied}, the source's {tokenizer_files}")
    # A head the config ties but the weights hold apart is untied, as transformers' tie_weights
    # does (not silently the embedding's): a zero head gives every token the same logit, so the
    # held-out loss is ln(vocab), unsharded and sharded.
    import math
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    "tools", "torch_reference"))
    import safetensors_io
    apart = os.path.join(tmp, "tied_apart")
    shutil.copytree(os.path.join(FIXTURES, "gpt2"), apart)
    weights = os.path.join(apart, "model.safetensors")
    entries, metadata = safetensors_io.read(weights)
    _, dtype, shape, data = next(e for e in entries if e[0] == "transformer.wte.weight")
    assert not any(e[0] == "lm_head.weight" for e in entries)  # save_pretrained omits a tied head
    entries.append(("lm_head.weight", dtype, shape, bytes(len(data))))
    safetensors_io.write(weights, entries, metadata)
    vocab = json.load(open(os.path.join(apart, "config.json")))["vocab_size"]
    for ranks in (1, 2):
        code, out, err = run(["--model-dir", apart, "--data", os.path.join(FIXTURES, "train.bin"),
                              "--eval-data", os.path.join(FIXTURES, "val.bin"),
                              "--eval-batches", "2", "--seq", str(EXPECTED["seq"]),
                              "--batch", "2", "--steps", "0", "--ranks", str(ranks)])
        held = parse(out)[1] if code == 0 else None
        if held is None or abs(held[0] - math.log(vocab)) > 1e-5:
            failures.append(f"tied head held apart, {ranks} rank(s): held-out {held} ({err}), "
                            f"ln(vocab) {math.log(vocab)}")
    # --checkpoint-dir and --resume: 3 steps, then on to 6 from the checkpoint, equal to 6 at once.
    spec = EXPECTED["runs"][3]
    ckpt = os.path.join(tmp, "ckpt")
    whole = parse(job(spec, 2, G // 2)[1])[0]
    code, out, err = job(spec, 2, G // 2, ["--checkpoint-dir", ckpt], steps=3)
    code2, out2, err2 = job(spec, 2, G // 2, ["--resume", ckpt])
    resumed = parse(out2)[0]
    if code or code2 or resumed != whole[3:]:
        failures.append(f"--resume: steps 3-5 {resumed} ({err or err2}), uninterrupted {whole[3:]}")
    # Bad inputs: one line, naming what and where.
    bad_tokens = os.path.join(tmp, "bad.bin")
    with open(bad_tokens, "wb") as f:
        f.write(b"\0" * 100)
    for args, status, want in (
            (["--data", os.path.join(FIXTURES, "train.bin")], 2,
             "finetune: error: --model-dir is required (see finetune --help)"),
            (["--model-dir", tmp, "--data", os.path.join(FIXTURES, "train.bin")], 1,
             f"finetune: error: {tmp}/config.json: cannot open the model config"),
            (["--model-dir", os.path.join(FIXTURES, "gpt2"), "--data", bad_tokens, "--seq", "16"], 1,
             f"finetune: error: --data: {bad_tokens}:"),
            (["--model-dir", os.path.join(FIXTURES, "gpt2"), "--data",
              os.path.join(FIXTURES, "train.bin"), "--seq", "64"], 1,
             "finetune: error: --seq 64: GPT2LMHeadModel has 32 positions"),
            (["--model-dir", os.path.join(FIXTURES, "gpt2"), "--data",
              os.path.join(FIXTURES, "train.bin"), "--weight-decay", "x"], 2,
             "finetune: error: --weight-decay"),
            (["--model-dir", os.path.join(FIXTURES, "gpt2"), "--data",
              os.path.join(FIXTURES, "train.bin"), "--max-shard-size", "0"], 2,
             "finetune: error: --max-shard-size: expected a size of at least 1 byte, got '0' "
             "(see finetune --help)"),
            (["--model-dir", os.path.join(FIXTURES, "gpt2"), "--data",
              os.path.join(FIXTURES, "train.bin"), "--max-shard-size", "5 GiBs"], 2,
             "finetune: error: --max-shard-size: invalid size '5 GiBs': expected a number and a "
             "unit among B, KB, MB, GB, TB (powers of 1000) and KiB, MiB, GiB, TiB (powers of "
             "1024), e.g. 5GB (see finetune --help)"),
    ):
        code, out, err = run(args)
        if code != status or not err.startswith(want) or "\n" in err:
            failures.append(f"{args}: exit {code}, stderr {err!r}; want {status}, {want!r}...")
    # --max-shard-size's default is save_pretrained's (50GB), not train_gpt's.
    code, out, err = run(["--help"])
    if code != 0 or "--max-shard-size TEXT:SIZE=50GB" not in out:
        failures.append(f"--help: exit {code}, no '--max-shard-size TEXT:SIZE=50GB' in {out!r}")
finally:
    shutil.rmtree(tmp, ignore_errors=True)

print(f"{len(compared)} runs compared with transformers' losses")
for f in failures:
    print("FAIL:", f)
sys.exit(1 if failures else 0)
