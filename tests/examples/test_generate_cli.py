#!/usr/bin/env python3
"""examples/generate on the transformers fixtures (tests/fixtures/hf_models/): greedy ids equal
transformers' generate; a seed repeats a sampled continuation; each bad input is one line
'generate: error: ...' on stderr with exit status 2 (command line) or 1 (files, values).
--prompt TEXT on tests/fixtures/text_models/ (vocabularies of the fixture tokenizers): the prompt
encoded as transformers' tokenizer(TEXT), the greedy text equal to transformers' generate +
tokenizer.decode, with DIR/tokenizer.json or --tokenizer; a --tokenizer directory whose
tokenizer_config.json names LlamaTokenizer encodes as transformers 5's AutoTokenizer does
(tokenizers/llama2_style/expected_pretrained.json). generation_config.json's
max_new_tokens where --max-new-tokens is not given.
Usage: test_generate_cli.py GENERATE FIXTURES_DIR
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

EXE, FIXTURES = sys.argv[1], sys.argv[2]
failures = []


def int64_tensor(path, name):
    """An int64 tensor of a safetensors file, flattened (json + struct only)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        begin, end = header[name]["data_offsets"]
        f.seek(8 + n + begin)
        data = f.read(end - begin)
    assert header[name]["dtype"] == "I64"
    return list(struct.unpack("<%dq" % (len(data) // 8), data))


def run(*args):
    p = subprocess.run([EXE] + list(args), capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout.strip(), p.stderr.strip()


def check(what, got, want):
    if got != want:
        failures.append(f"{what}: got {got!r}, want {want!r}")


for model in ("gpt2_tied", "llama_gqa"):
    d = os.path.join(FIXTURES, "hf_models", model)
    expected = os.path.join(d, "expected.safetensors")
    prompt, greedy = int64_tensor(expected, "prompt_ids"), int64_tensor(expected, "greedy_ids")
    rc, out, err = run("--model-dir", d, "--prompt-ids", ",".join(map(str, prompt)),
                       "--max-new-tokens", str(len(greedy) - len(prompt)))
    check(f"{model} greedy", (rc, out, err), (0, ",".join(map(str, greedy)), ""))

# Text in, text out: transformers' generate + tokenizer.decode (make_text_model_fixtures.py).
for model in ("gpt2", "llama"):
    d = os.path.join(FIXTURES, "text_models", model)
    e = json.load(open(os.path.join(d, "expected.json"), encoding="utf-8"))
    base = ["--model-dir", d, "--prompt", e["prompt"], "--max-new-tokens", str(e["max_new_tokens"])]
    check(f"{model} greedy text", run(*base), (0, e["greedy_text"], ""))
    check(f"{model} greedy ids and text", run(*base, "--print-ids"),
          (0, ",".join(map(str, e["greedy_ids"])) + "\n" + e["greedy_text"], ""))
    check(f"{model} --skip-special-tokens", run(*base, "--skip-special-tokens"),
          (0, e["greedy_text_skip_special"], ""))
    # The prompt's ids as transformers' tokenizer gives them: the same continuation by ids.
    check(f"{model} --prompt-ids of the encoded prompt",
          run("--model-dir", d, "--prompt-ids", ",".join(map(str, e["prompt_ids"])),
              "--max-new-tokens", str(e["max_new_tokens"])),
          (0, ",".join(map(str, e["greedy_ids"])), ""))
    # --tokenizer: a directory without tokenizer.json (the hf_models fixture has none).
    check(f"{model} --tokenizer", run(*base, "--tokenizer", os.path.join(d, "tokenizer.json")),
          (0, e["greedy_text"], ""))

# A model vocabulary larger than the tokenizer's: the ids of no token left out of the text.
d = os.path.join(FIXTURES, "text_models", "gpt2")
e = json.load(open(os.path.join(d, "expected.json"), encoding="utf-8"))["smaller_tokenizer"]
check("gpt2 with a smaller tokenizer: the fixture has ids past it",
      max(e["greedy_ids"]) >= e["vocab_size"], True)
check("gpt2 with a smaller tokenizer",
      run("--model-dir", d, "--prompt", "The quick brown fox", "--max-new-tokens", "12",
          "--tokenizer", os.path.join(FIXTURES, "tokenizers", e["tokenizer"], "tokenizer.json"),
          "--print-ids"),
      (0, ",".join(map(str, e["greedy_ids"])) + "\n" + e["greedy_text"], ""))

# --tokenizer DIR (llama2_style: its tokenizer_config.json names LlamaTokenizer) and its bare
# tokenizer.json: the prompt's ids as AutoTokenizer's tokenizer(TEXT) and as the file's.
d = os.path.join(FIXTURES, "text_models", "llama")  # 966 ids: the 961 of llama2_style fit
tok_dir = os.path.join(FIXTURES, "tokenizers", "llama2_style")
pretrained = json.load(open(os.path.join(tok_dir, "expected_pretrained.json"), encoding="utf-8"))
as_file = json.load(open(os.path.join(tok_dir, "expected.json"), encoding="utf-8"))
for text in (" <s> a </s> ", "<custom> and x<custom>y and <custom>", "▁leading meta space"):
    for what, path, cases in [("directory", tok_dir, pretrained["configs"][0]["cases"]),
                              ("file", os.path.join(tok_dir, "tokenizer.json"), as_file["cases"])]:
        want = next(c["ids"] for c in cases if c["text"] == text)
        rc, out, err = run("--model-dir", d, "--prompt", text, "--max-new-tokens", "1",
                           "--tokenizer", path, "--print-ids")
        got = list(map(int, out.splitlines()[0].split(",")))[:-1] if rc == 0 else (rc, err)
        check(f"--tokenizer {what}: the ids of {text!r}", got, want)
    check(f"the directory and the file differ on {text!r}",
          next(c["ids"] for c in pretrained["configs"][0]["cases"] if c["text"] == text) !=
          next(c["ids"] for c in as_file["cases"] if c["text"] == text), True)

d = os.path.join(FIXTURES, "hf_models", "llama_gqa")
gpt2_text = os.path.join(FIXTURES, "text_models", "gpt2")
sample = ["--model-dir", d, "--prompt-ids", "5,6,7", "--do-sample", "--temperature", "0.9",
          "--top-k", "30", "--top-p", "0.95", "--max-new-tokens", "12"]
first = run(*sample, "--seed", "4")
check("seeded sampling repeats", run(*sample, "--seed", "4"), first)
check("sampled length", len(first[1].split(",")), 15)

# generation_config.json's max_new_tokens (and sampling defaults) where the flags are not given.
with tempfile.TemporaryDirectory() as with_config:
    for name in ("config.json", "model.safetensors"):
        shutil.copy(os.path.join(d, name), with_config)
    with open(os.path.join(with_config, "generation_config.json"), "w") as f:
        json.dump({"max_new_tokens": 3, "temperature": 0.5}, f)
    check("generation_config.json's max_new_tokens",
          len(run("--model-dir", with_config, "--prompt-ids", "5,6,7")[1].split(",")), 6)
    # max_length (the whole sequence) and repetition_penalty: transformers' generate on the same
    # file (tests/fixtures/generation_config_cases.json, the llama_gqa cases).
    cases = [c for c in json.load(open(os.path.join(FIXTURES, "generation_config_cases.json")))
             if c["model"] == "llama_gqa" and not c["generation_config"].get("do_sample")]
    for c in cases:
        with open(os.path.join(with_config, "generation_config.json"), "w") as f:
            json.dump(dict(c["generation_config"], pad_token_id=c["pad_token_id"]), f)
        row = c["prompt"][0]
        args = ["--model-dir", with_config, "--prompt-ids", ",".join(map(str, row))]
        if "max_new_tokens" in c["generate"]:
            args += ["--max-new-tokens", str(c["generate"]["max_new_tokens"])]
        check(f"generation_config.json {c['generation_config']} {c['generate']}", run(*args),
              (0, ",".join(map(str, c["output"][0])), ""))
    with open(os.path.join(with_config, "generation_config.json"), "w") as f:
        json.dump({"max_new_tokens": 3, "temperature": 0.5}, f)
    check("--max-new-tokens over generation_config.json's",
          len(run("--model-dir", with_config, "--prompt-ids", "5,6,7", "--max-new-tokens",
                  "5")[1].split(",")), 8)

# --dtype: the model cast after loading (auto, the default, is the checkpoint's: float32 here).
rc, out, err = run("--model-dir", d, "--prompt-ids", "5,6,7", "--max-new-tokens", "4", "--dtype",
                   "bfloat16")
check("--dtype bfloat16", (rc, len(out.split(",")), err), (0, 7, ""))
check("--dtype float32 as auto",
      run("--model-dir", d, "--prompt-ids", "5,6,7", "--max-new-tokens", "4", "--dtype",
          "float32"),
      run("--model-dir", d, "--prompt-ids", "5,6,7", "--max-new-tokens", "4"))

cases = [
    (["--model-dir", d, "--prompt", "hello"], 1,
     f"generate: error: --prompt: {d} has no tokenizer.json; pass the tokenizer with "
     "--tokenizer PATH, or token ids with --prompt-ids"),
    (["--model-dir", d], 2,
     "generate: error: give the prompt: --prompt TEXT or --prompt-ids (see generate --help)"),
    (["--model-dir", d, "--prompt-ids", "1", "--device", "gpu"], 1,
     "generate: error: --device gpu: unknown device (expected cpu, cuda, cuda:N, fake_cuda or "
     "fake_cuda:N)"),
    (["--model-dir", d, "--prompt-ids", "1", "--repetition-penalty", "0"], 2,
     "generate: error: --repetition-penalty: expected a finite number above 0, got '0' (see "
     "generate --help)"),
    (["--model-dir", d, "--prompt-ids", "1", "--dtype", "int8"], 2,
     "generate: error: --dtype: int8 not in {auto,float32,bfloat16,float16} (see generate "
     "--help)"),
    (["--model-dir", d, "--prompt-ids", "1", "--print-ids"], 2,
     "generate: error: --print-ids requires --prompt (see generate --help)"),
    (["--model-dir", d, "--prompt-ids", "1", "--tokenizer", "t.json"], 2,
     "generate: error: --tokenizer requires --prompt (see generate --help)"),
    (["--model-dir", d, "--prompt-ids", "1", "--prompt", "hi"], 2,
     "generate: error: --prompt-ids excludes --prompt (see generate --help)"),
    # A tokenizer whose ids the model does not have (GPT-2-style ids on a 113-token model).
    (["--model-dir", d, "--prompt", "The fox", "--tokenizer",
      os.path.join(gpt2_text, "tokenizer.json")], 1,
     "generate: error: --prompt: token 1105 is outside the vocabulary [0, 113)"),
    (["--model-dir", gpt2_text, "--prompt", "\udcff"], 1,
     "generate: error: --prompt: the text is not valid UTF-8: byte 0xFF at offset 0"),
    (["--model-dir", gpt2_text, "--prompt", ""], 1,
     "generate: error: --prompt: the text '' encodes to no tokens "
     f"({os.path.join(gpt2_text, 'tokenizer.json')} adds none of its own); give some text"),
    (["--model-dir", gpt2_text, "--prompt", "x", "--tokenizer",
      os.path.join(FIXTURES, "no-such-tokenizer.json")], 1,
     "generate: error: " + os.path.join(FIXTURES, "no-such-tokenizer.json") +
     ": cannot open: No such file or directory"),
    (["--model-dir", d, "--prompt-ids", "1,,2"], 2,
     "generate: error: --prompt-ids: expected non-negative integers separated by commas, got '' "
     "in '1,,2' (see generate --help)"),
    (["--model-dir", d, "--prompt-ids", "1", "--top-k", "5"], 2,
     "generate: error: --top-k requires --do-sample (see generate --help)"),
    (["--model-dir", d, "--prompt-ids", "1", "--do-sample", "--temperature", "0"], 2,
     "generate: error: --temperature: expected a finite number above 0, got '0' (see generate "
     "--help)"),
    (["--model-dir", d, "--prompt-ids", "1,113"], 1,
     "generate: error: --prompt-ids: token 113 is outside the vocabulary [0, 113)"),
    (["--model-dir", os.path.join(FIXTURES, "no-such-model"), "--prompt-ids", "1"], 1,
     "generate: error: " + os.path.join(FIXTURES, "no-such-model") +
     ": cannot open the model config"),
]
for args, status, message in cases:
    rc, out, err = run(*args)
    check(" ".join(args[2:]), (rc, out, err), (status, "", message))

for f in failures:
    print(f)
print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
