#!/usr/bin/env python3
"""finetune's --save directories in transformers (issue 26, "Done when"): a GPT-2 (tied head) and
a Llama (GQA) of tests/fixtures/text_models/ (and, weights and logits only, a Qwen2, a Qwen3, a
Gemma 3 and a Gemma 2 of tests/fixtures/finetune/), fine-tuned on 2 thread ranks and saved in one
file and sharded (--max-shard-size 20KB), load with AutoModelForCausalLM.from_pretrained (no
missing or unexpected weights, the head tied where the config ties it), whose logits equal ours
on the same directory (interop_hf_logits, models/from_pretrained) within 1e-4 x max |logit|,
and whose greedy generate + tokenizer.decode (AutoTokenizer from the saved directory) is our
generate's text.
Usage: test_hf_interop.py TOKENIZE FINETUNE GENERATE HF_LOGITS FIXTURES_DIR
Exits 77 (skipped) without torch and transformers (run by /opt/torch2/bin/python).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

try:
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer
except ImportError as e:
    print("skip: no torch, safetensors or transformers for", sys.executable, f"({e})")
    sys.exit(77)

TOKENIZE, FINETUNE, GENERATE, HF_LOGITS, FIXTURES = sys.argv[1:6]
NEW_TOKENS = 10
failures = []


def run(args):
    p = subprocess.run(args, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: exit {p.returncode}: {p.stderr.strip()[-400:]}")
    return p.stdout


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def compare_weights_and_logits(name, saved, ids, tmp):
    """transformers on `saved` against ours: weights loaded, tied head, logits. The model."""
    hf, info = AutoModelForCausalLM.from_pretrained(saved, output_loading_info=True)
    hf.eval()
    check(not any(info.get(k) for k in ("missing_keys", "unexpected_keys", "mismatched_keys")),
          f"{name}: transformers loads every weight ({ {k: v for k, v in info.items() if v} })")
    tied = hf.config.tie_word_embeddings
    same = hf.get_output_embeddings().weight.data_ptr() == \
        hf.get_input_embeddings().weight.data_ptr()
    check(same == tied, f"{name}: head tied {same}, config says {tied}")
    out = os.path.join(tmp, "logits.safetensors")
    run([HF_LOGITS, saved, ",".join(map(str, ids)), out])
    ours = load_file(out)["logits"]
    with torch.no_grad():
        theirs = hf(torch.tensor([ids])).logits
    diff = (ours - theirs).abs().max().item()
    bound = 1e-4 * theirs.abs().max().item()
    check(ours.shape == theirs.shape and diff <= bound,
          f"{name}: logits {tuple(ours.shape)}, max |ours - transformers'| {diff:.3g} "
          f"<= {bound:.3g}")
    return hf


def compare(model, saved, ids, prompt, tmp):
    """transformers on `saved` against ours: weights loaded, logits, greedy text."""
    name = f"{model} {os.path.basename(saved)}"
    hf = compare_weights_and_logits(name, saved, ids, tmp)
    tokenizer = AutoTokenizer.from_pretrained(saved)
    encoded = tokenizer(prompt, return_tensors="pt")
    with torch.no_grad():
        greedy = hf.generate(**encoded, do_sample=False, max_new_tokens=NEW_TOKENS,
                             pad_token_id=hf.config.eos_token_id)
    want = ",".join(map(str, greedy[0].tolist())) + "\n" + tokenizer.decode(greedy[0]) + "\n"
    got = run([GENERATE, "--model-dir", saved, "--prompt", prompt, "--max-new-tokens",
               str(NEW_TOKENS), "--print-ids"])
    check(got == want, f"{name}: our generate {got!r}, transformers' {want!r}")


def main():
    tmp = tempfile.mkdtemp()
    try:
        corpus = os.path.join(FIXTURES, "tokenizers", "corpus.txt")
        for model in ("gpt2", "llama"):
            fixture = os.path.join(FIXTURES, "text_models", model)
            expected = json.load(open(os.path.join(fixture, "expected.json"), encoding="utf-8"))
            tokens = os.path.join(tmp, model + ".bin")
            run([TOKENIZE, "--tokenizer", os.path.join(fixture, "tokenizer.json"), "--input",
                 corpus, "--output", tokens])
            common = [FINETUNE, "--model-dir", fixture, "--data", tokens, "--seq", "16",
                      "--batch", "2", "--steps", "3", "--lr", "0.01", "--ranks", "2"]
            for layout, extra in (("one-file", []), ("sharded", ["--max-shard-size", "20KB"])):
                saved = os.path.join(tmp, model, layout)
                run(common + ["--save", saved] + extra)
                sharded = os.path.exists(os.path.join(saved, "model.safetensors.index.json"))
                check(sharded == (layout == "sharded"),
                      f"{model} {layout}: {sorted(os.listdir(saved))}")
                ids = expected["greedy_ids"]  # some tokens: the prompt and a continuation
                compare(model, saved, ids, expected["prompt"], tmp)
        # Qwen2 (q/k/v biases, tied head), Qwen3 (q_norm, k_norm), Gemma 3 (sliding and full
        # layers, four norms a layer) and Gemma 2 (softcaps, untied head) of
        # tests/fixtures/finetune, fine-tuned on 2 ranks and saved sharded: transformers loads
        # them to our logits.
        for model in ("qwen2", "qwen3", "gemma3", "gemma2"):
            fixture = os.path.join(FIXTURES, "finetune", model)
            saved = os.path.join(tmp, model, "sharded")
            run([FINETUNE, "--model-dir", fixture, "--data",
                 os.path.join(FIXTURES, "finetune", "train.bin"), "--seq", "16", "--batch", "2",
                 "--steps", "3", "--lr", "0.01", "--ranks", "2", "--save", saved,
                 "--max-shard-size", "20KB"])
            compare_weights_and_logits(f"{model} sharded", saved, list(range(3, 40, 3)), tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{len(failures)} failure(s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
