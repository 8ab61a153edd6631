#!/usr/bin/env python3
"""Checkpoints between fsdp-cpp and PyTorch, on train_gpt's GPT (tests/fixtures/gpt: L2 D32 H4 T16).

    test_torch_interop.py TRAIN_GPT INTEROP_GPT_LOGITS FIXTURE_DIR

1. Here -> PyTorch: train_gpt (FSDP, 2 thread ranks, 3 AdamW steps) saves a full checkpoint as
   one .safetensors file and in Hugging Face's sharded layout. Each is read with a few lines of
   plain Python (the json header + torch.frombuffer) and, when importable, with the
   `safetensors` package; loaded into the equivalent torch.nn GPT (train_gpt_ref.py, strict), it
   gives the logits that interop_gpt_logits computes here from the same file, within 1e-5. The
   sharded checkpoint directory of the same run, assembled in PyTorch from index.json, equals it.
2. PyTorch -> here: PyTorch trains 3 steps and saves its state dict as safetensors (the tied
   head.weight once; safetensors.torch.save_file where it works, else the plain writer); train_gpt --load continues from it (2 ranks, FULL_SHARD)
   with the losses of PyTorch's continuation from the same file (a fresh optimizer on both sides:
   a state dict holds weights only), within 1e-5 relative; SGD and AdamW.

Exits 77 (skipped) when torch is absent; without the `safetensors` package the plain reader alone
runs (and says so).
"""
import json
import math
import os
import re
import struct
import subprocess
import sys
import tempfile

try:
    import torch
except ImportError:
    print("skip: no torch for", sys.executable)
    sys.exit(77)
try:
    import safetensors.torch as st_torch
except ImportError:
    st_torch = None

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "torch_reference"))
import train_gpt_ref  # noqa: E402

MODEL = dict(layers=2, d_model=32, heads=4, seq=16)
BATCH = 4  # global batch
TOL = 1e-5
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def run(cmd):
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        sys.exit("FAIL: %s exited %d\n%s%s" % (cmd, done.returncode, done.stdout, done.stderr))
    return done.stdout


def losses(text):
    return [float(x) for x in re.findall(r"^step \d+ loss (\S+)", text, re.M)]


# The whole reader a PyTorch user needs: 8-byte length, JSON header, raw little-endian bytes.
DTYPES = {"F32": torch.float32, "F64": torch.float64, "F16": torch.float16,
          "BF16": torch.bfloat16, "I64": torch.int64, "I32": torch.int32, "U8": torch.uint8,
          "BOOL": torch.bool}


def read_plain(path):
    with open(path, "rb") as f:
        blob = f.read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    header.pop("__metadata__", None)
    out = {}
    for name, e in header.items():
        begin, end = (8 + n + o for o in e["data_offsets"])
        t = torch.frombuffer(bytearray(blob[begin:end]), dtype=DTYPES[e["dtype"]])
        out[name] = t.reshape(e["shape"])
    return out


def read_dir(path, reader):
    """Hugging Face's layout: model.safetensors, or the index's weight_map over its files."""
    index = os.path.join(path, "model.safetensors.index.json")
    if not os.path.exists(index):
        return reader(os.path.join(path, "model.safetensors"))
    with open(index) as f:
        weight_map = json.load(f)["weight_map"]
    out = {}
    for file in sorted(set(weight_map.values())):
        out.update(reader(os.path.join(path, file)))
    check(sorted(out) == sorted(weight_map), "%s: the files hold the index's tensors" % path)
    return out


def read_sharded(path):
    """A sharded checkpoint (fsdp/checkpoint.h) as full tensors: index.json lists each tensor's
    pieces (file, offset and numel in the flattened tensor)."""
    with open(os.path.join(path, "index.json")) as f:
        index = json.load(f)
    files = {}
    out = {}
    for key, t in index["model"].items():
        flat = torch.empty(math.prod(t["shape"]), dtype=DTYPES[t["dtype"]])
        for p in t["pieces"]:
            if p["file"] not in files:
                files[p["file"]] = read_plain(os.path.join(path, p["file"]))
            flat[p["offset"]:p["offset"] + p["numel"]] = files[p["file"]][key].reshape(-1)
        out[key] = flat.reshape(t["shape"])
    return out


def torch_logits(state, inputs):
    model = train_gpt_ref.GPT(**MODEL)
    state = dict(state)
    state.setdefault("head.weight", state["tok_emb.weight"])
    model.load_state_dict(state, strict=True)
    with torch.no_grad():
        return model(inputs)


def here_to_torch(train_gpt, logits_exe, fixtures, tmp):
    common = ["--layers", "2", "--d-model", "32", "--heads", "4", "--seq", "16",
              "--data", os.path.join(fixtures, "data.txt"),
              "--load", os.path.join(fixtures, "init.safetensors"), "--backend", "threads",
              "--ranks", "2", "--batch", str(BATCH // 2), "--steps", "3", "--optimizer", "adamw",
              "--lr", "0.003"]
    single = os.path.join(tmp, "model.safetensors")
    hf = os.path.join(tmp, "hf")
    run([train_gpt] + common + ["--save", single])
    run([train_gpt] + common + ["--save", hf, "--max-shard-size", "40000"])
    ckpt = os.path.join(tmp, "ckpt")
    run([train_gpt] + common + ["--checkpoint-dir", ckpt])
    full = read_plain(single)
    sharded = read_sharded(os.path.join(ckpt, "step-00000003"))
    same = sorted(sharded) == sorted(full) and all(torch.equal(sharded[k], full[k]) for k in full)
    check(same, "the sharded checkpoint (2 ranks) assembled in PyTorch equals the full one")
    n_files = len([f for f in os.listdir(hf) if f.endswith(".safetensors")])
    check(n_files > 1, "the Hugging Face layout has %d files (sharded)" % n_files)

    out = os.path.join(tmp, "logits.safetensors")
    run([logits_exe, single, os.path.join(fixtures, "data.txt"), out, "2", "32", "4", "16",
         str(BATCH)])
    ours = read_plain(out)
    readers = [("plain reader", read_plain)]
    if st_torch is not None:
        readers.append(("safetensors.torch.load_file", st_torch.load_file))
    else:
        print("note: the safetensors package is absent for %s: plain reader only" % sys.executable)
    for label, reader in readers:
        for path, state in [(single, reader(single)), (hf, read_dir(hf, reader))]:
            logits = torch_logits(state, ours["inputs"])
            err = (logits - ours["logits"]).abs().max().item()
            check(logits.shape == ours["logits"].shape and err <= TOL,
                  "%s, %s: torch logits %s = ours within %.1e (max |diff| %.2e)"
                  % (label, os.path.basename(path), list(logits.shape), TOL, err))


def torch_train(model, data, steps, optimizer, lr):
    if optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=lr)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.999), eps=1e-8,
                                weight_decay=0.01)
    out = []
    for step in range(steps):
        inputs, targets = train_gpt_ref.gpt_batch(data, step, BATCH, MODEL["seq"])
        logits = model(inputs)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)),
                                                 targets.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        out.append(loss.item())
    return out


def torch_to_here(train_gpt, fixtures, tmp, optimizer, lr):
    with open(os.path.join(fixtures, "data.txt"), "rb") as f:
        data = f.read()
    model = train_gpt_ref.GPT(**MODEL)
    train_gpt_ref.load(os.path.join(fixtures, "init.safetensors"), model)
    torch_train(model, data, 3, optimizer, lr)
    path = os.path.join(tmp, "torch_%s.safetensors" % optimizer)
    writer = "the plain writer"
    state = {k: v for k, v in model.state_dict().items() if k != "head.weight"}  # tied: once
    try:
        if st_torch is not None:
            st_torch.save_file(state, path, metadata={"format": "pt"})
            writer = "safetensors.torch.save_file"
    except ImportError as e:  # safetensors' writer needs numpy
        print("note: safetensors.torch.save_file unusable here (%s): plain writer" % e)
    if writer == "the plain writer":
        train_gpt_ref.save(path, model, {"format": "pt"})
    cont = train_gpt_ref.GPT(**MODEL)
    train_gpt_ref.load(path, cont)
    want = torch_train(cont, data, 4, optimizer, lr)
    got = losses(run([train_gpt, "--layers", "2", "--d-model", "32", "--heads", "4", "--seq", "16",
                      "--data", os.path.join(fixtures, "data.txt"), "--load", path,
                      "--backend", "threads", "--ranks", "2", "--batch", str(BATCH // 2),
                      "--steps", "4", "--optimizer", optimizer, "--lr", str(lr)]))
    worst = max((abs(g - w) / abs(w) for g, w in zip(got, want)), default=float("inf"))
    check(len(got) == len(want) and worst <= TOL,
          "%s (%s): train_gpt continues with PyTorch's losses within %.0e (worst %.2e)"
          % (optimizer, writer, TOL, worst))
    if worst > TOL:
        print("  torch:", want, "\n  ours: ", got)


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: %s TRAIN_GPT INTEROP_GPT_LOGITS FIXTURE_DIR" % sys.argv[0])
    train_gpt, logits_exe, fixtures = sys.argv[1:]
    torch.set_num_threads(1)
    print("torch %s (%s)" % (torch.__version__, sys.executable))
    with tempfile.TemporaryDirectory(prefix="fsdp-interop-") as tmp:
        here_to_torch(train_gpt, logits_exe, fixtures, tmp)
        torch_to_here(train_gpt, fixtures, tmp, "sgd", 0.1)
        torch_to_here(train_gpt, fixtures, tmp, "adamw", 0.003)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
