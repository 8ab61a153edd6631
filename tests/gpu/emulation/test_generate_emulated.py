#!/usr/bin/env python3
"""examples/generate on the emulated CUDA device against the CPU: greedy ids for every model of
tests/fixtures/hf_models (GPT-2, Llama, Mistral, Qwen, Gemma; the KV cache on the device), and a
seeded sampling run on the first, equal. EMULATED_LIBS is put first on LD_LIBRARY_PATH, as train_gpt's test does.
Usage: test_generate_emulated.py GENERATE MODELS_DIR EMULATED_LIBS"""
import os
import sys

from emulated_runs import emulated_env, run_or_exit


def ids(generate, model, device, extra, env):
    run = run_or_exit([generate, "--model-dir", model, "--prompt-ids", "1,2,3",
                       "--max-new-tokens", "8", "--device", device] + extra, env, 120,
                      f"generate --device {device} {model}")
    return run.stdout.strip().splitlines()[-1]


def main():
    generate, models, emulated = sys.argv[1], sys.argv[2], sys.argv[3]
    env = emulated_env(emulated)
    failed = 0
    for name in sorted(os.listdir(models)):
        model = os.path.join(models, name)
        if not os.path.isfile(os.path.join(model, "config.json")):
            continue
        runs = [("greedy", [])]
        if name == sorted(os.listdir(models))[0]:
            runs.append(("sampled", ["--do-sample", "--seed", "3"]))
        for what, extra in runs:
            cpu, cuda = (ids(generate, model, d, extra, env) for d in ("cpu", "cuda:0"))
            ok = cpu == cuda
            failed += not ok
            print(f"{'ok ' if ok else 'BAD'} {name} {what}: cpu {cpu} cuda {cuda}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
