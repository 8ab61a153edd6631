#!/usr/bin/env python3
"""fsdp-plan on a Hugging Face config.json (or its directory): the model built on meta through
models/ is planned exactly as transformers' model of the same config, exported to fsdp-model/1
(tests/fixtures/models/hf/, from tests/tools/gen_hf_plan_fixtures.py): the same table, JSON and
warnings (and Graphviz graph) for every policy, world size and option below; the default policy;
the config errors.
Usage: test_plan_config.py FSDP_PLAN SOURCE_ROOT"""
import json
import os
import subprocess
import sys
import tempfile

PLAN, ROOT = sys.argv[1], sys.argv[2]
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
failures = []


def run(*args):
    return subprocess.run([PLAN, *args], capture_output=True, text=True)


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


# name: (config directory under tests/fixtures, decoder block class, a size threshold that
# splits the model).
MODELS = {
    "finetune_gpt2": ("finetune/gpt2", "GPT2Block", 2000),
    "finetune_llama": ("finetune/llama", "LlamaDecoderLayer", 2000),
    "finetune_gemma3": ("finetune/gemma3", "Gemma3DecoderLayer", 2000),
    "finetune_gemma2": ("finetune/gemma2", "Gemma2DecoderLayer", 2000),
    "gpt2": ("hf_configs/gpt2", "GPT2Block", 5_000_000),
    "llama3_70b": ("hf_configs/llama3_70b", "LlamaDecoderLayer", 1_000_000_000),
    "gemma3_1b": ("hf_configs/gemma3_1b", "Gemma3DecoderLayer", 50_000_000),
    "llama_tied_bias": ("hf_configs/llama_tied_bias", "LlamaDecoderLayer", 2000),
    "mistral_tiny": ("hf_configs/mistral_tiny", "MistralDecoderLayer", 2000),
    "gpt2_untied": ("hf_configs/gpt2_untied", "GPT2Block", 2000),
}


def policies(block, threshold):
    return [f"transformer([{block}])", "none", "always", f"size(min_num_params={threshold})",
            f"individually([Embedding, {block}])", f"modules([{block}, Embedding])",
            f"or(transformer([{block}]), size({threshold}))"]


# Options besides the policy; each list is run for every policy.
OPTIONS = [["--world-size", "1"], ["--world-size", "8"],
           ["--world-size", "16", "--sharding", "HYBRID_SHARD", "--node-size", "4"],
           ["--world-size", "4", "--sharding", "SHARD_GRAD_OP", "--mixed-precision",
            "--use-orig-params", "--batch", "2", "--seq", "16"],
           ["--world-size", "2", "--ignore", "lm_head"]]


def same_plan(config, exported, args, what, formats=("table", "json")):
    for fmt in formats:
        a = run(config, *args, "--format", fmt)
        b = run(exported, *args, "--format", fmt)
        check(a.returncode == 0, f"{what} {fmt}: rc {a.returncode} {a.stderr!r}")
        check((a.returncode, a.stdout, a.stderr) == (b.returncode, b.stdout, b.stderr),
              f"{what} {fmt}: config and exported plans differ")


cases = 0
for name, (config_dir, block, threshold) in MODELS.items():
    directory = os.path.join(FIXTURES, config_dir)
    config = os.path.join(directory, "config.json")
    exported = os.path.join(FIXTURES, "models", "hf", name + ".json")
    for policy in policies(block, threshold):
        for opts in OPTIONS:
            same_plan(config, exported, ["--policy", policy, *opts], f"{name} {policy} {opts}")
            cases += 1
        same_plan(config, exported, ["--policy", policy], f"{name} {policy}", formats=("dot",))
    # The directory is its config.json; without --policy, one unit per decoder block.
    for inp in (config, directory):
        a = run(inp, "--world-size", "8", "--format", "json")
        b = run(exported, "--world-size", "8", "--format", "json", "--policy",
                f"transformer([{block}])")
        check(a.returncode == 0 and a.stdout == b.stdout,
              f"{name} {inp}: default policy is transformer([{block}]) {a.stderr!r}")
    # A model file keeps its default: no policy, only the root unit.
    units = json.loads(run(exported, "--format", "json").stdout)["units"]
    check([u["fqn"] for u in units] == [""], f"{name}: a model file's default is no policy")
print(f"{cases} policy/option cases, each as table and JSON (and each policy as dot)")

# The plans are the models' (not two equal empty answers).
j = json.loads(run(os.path.join(FIXTURES, "finetune", "llama"), "--format", "json").stdout)
check(j["config"]["policy"] == "transformer([LlamaDecoderLayer])", "llama default policy")
check([u["fqn"] for u in j["units"]] == ["model.layers.0", "model.layers.1", ""], "llama units")
check(j["units"][2]["params"] == ["model.embed_tokens.weight", "model.norm.weight",
                                  "lm_head.weight"], "llama root params (untied head)")
check(j["units"][0]["params"][:3] == ["model.layers.0.self_attn.q_proj.weight",
                                      "model.layers.0.self_attn.k_proj.weight",
                                      "model.layers.0.self_attn.v_proj.weight"], "llama block")
check(j["model"]["numel"] == 24736, f"llama numel {j['model']['numel']}")
j = json.loads(run(os.path.join(FIXTURES, "finetune", "gpt2"), "--format", "json").stdout)
check(j["units"][2]["params"] == ["transformer.wte.weight", "transformer.wpe.weight",
                                  "transformer.ln_f.weight", "transformer.ln_f.bias"],
      "gpt2 root: the tied head once")
j = json.loads(run(os.path.join(FIXTURES, "hf_configs", "llama3_70b", "config.json"),
                   "--world-size", "64", "--format", "json").stdout)
check(j["model"]["numel"] == 70_553_706_496 and len(j["units"]) == 81,
      f"llama3 70b: {j['model']['numel']} parameters, {len(j['units'])} units")
check(j["units"][0]["numel"] == 855_654_400, f"70b block numel {j['units'][0]['numel']}")

# --help says what the default policy of a config is.
r = run("--help")
check(r.returncode == 0 and "config.json" in r.stdout and
      "transformer([<decoder block class>])" in r.stdout, "--help names the config default")

# Errors: one line on stderr, nothing on stdout, exit 1; a config's is the models layer's line.
tmp = tempfile.mkdtemp()


def write_config(sub, fields):
    d = os.path.join(tmp, sub)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        f.write(fields if isinstance(fields, str) else json.dumps(fields))
    return d


def expect_error(path, needle):
    r = run(path)
    what = f"{path}: rc={r.returncode} stdout={r.stdout[:80]!r} stderr={r.stderr!r}"
    check(r.returncode == 1 and r.stdout == "" and len(r.stderr.splitlines()) == 1 and
          r.stderr.startswith("fsdp-plan: error: ") and needle in r.stderr, what)


with open(os.path.join(FIXTURES, "finetune", "llama", "config.json")) as f:
    llama = json.load(f)
d = write_config("bert", {"model_type": "bert", "hidden_size": 8})
expect_error(d, f"{d}/config.json: model_type \"bert\" is not supported (supported: gpt2, "
                "llama, mistral, qwen2, qwen3, gemma3_text, gemma2)")
d = write_config("yarn", {**llama, "rope_parameters": {"rope_type": "yarn", "factor": 4.0}})
expect_error(os.path.join(d, "config.json"),
             "config.json: rope_parameters.rope_type \"yarn\" is not supported")
d = write_config("act", {**llama, "hidden_act": "swiglu"})
expect_error(d, "hidden_act \"swiglu\" is not supported")
# Sizes each valid whose product passes 2^63 elements: refused, not wrapped (it was 0 here).
d = write_config("huge", {**llama, "vocab_size": 2 ** 62, "hidden_size": 8,
                          "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 4})
expect_error(d, f"{d}/config.json: building the model: Storage size calculation overflowed with "
                "sizes=[4611686018427387904, 8]")
d = write_config("bad", "{\"model_type\": ")
expect_error(d, f"{d}/config.json: not valid JSON")
empty = os.path.join(tmp, "empty")
os.makedirs(empty)
expect_error(empty, f"{empty}: a directory without config.json")
expect_error(os.path.join(tmp, "absent", "config.json"), "cannot open the model config")
# A config under another name is read as a model file, whose error says how to read it.
renamed = os.path.join(tmp, "llama_config.json")
with open(renamed, "w") as f:
    json.dump(llama, f)
expect_error(renamed, f"{renamed}: missing \"format\" (expected \"fsdp-model/1\"); this looks "
                      "like a Hugging Face config: fsdp-plan reads one named config.json or "
                      "through its directory")
# A model file keeps its own contract.
expect_error(os.path.join(tmp, "absent.json"), "cannot open the model file")

if failures:
    print(f"{len(failures)} failure(s)")
    sys.exit(1)
print("ok")
