"""Writes the fixtures of tests/core/io with Python's own writers (an optional tool: torch,
safetensors and transformers, e.g. /opt/torch2/bin/python); test_safetensors.cpp and
test_safetensors_dir.cpp read them and check that our writers give the same bytes.

- python_written.safetensors: safetensors.torch.save_file of every dtype with known values, an
  empty and a 0-d tensor, metadata {"format": "pt"} (one entry: the writer orders several by
  hash, so only one gives reproducible bytes).
- fixtures/hf_sharded/: transformers' save_pretrained of a tiny random LlamaForCausalLM with
  max_shard_size="2KB" (the embedding and head, 2048 bytes, each get a file of their own):
  model-0000k-of-0000n.safetensors and model.safetensors.index.json
  (config.json and generation_config.json removed: only the weights are this fixture's), plus
  state_dict_order.txt, the state dict's order that save_pretrained split in.

    /opt/torch2/bin/python tests/core/io/gen_safetensors_fixture.py            # regenerate
    python3 tests/core/io/gen_safetensors_fixture.py --check F  # verify a file written by C++
"""
import os
import shutil
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "tools", "torch_reference"))
import safetensors_io  # noqa: E402

METADATA = {"format": "pt"}
SHARDED_MAX_SHARD_SIZE = "2KB"


def bf16(x):  # the upper half of a float32 (the values below are exact in bfloat16)
    return struct.pack("<f", x)[2:]


# (name, code, shape, values, raw bytes). The values are mirrored in test_safetensors.cpp.
def cases():
    out = []

    def add(name, code, shape, values, raw):
        out.append((name, code, shape, values, raw))

    f32 = [0.0, 1.5, -2.25, 3.0e-8, 1.0e30, -0.0]
    add("f32", "F32", [2, 3], f32, struct.pack("<6f", *f32))
    f64 = [1.0 / 3.0, -1.0e-300, 2.5]
    add("f64", "F64", [3], f64, struct.pack("<3d", *f64))
    f16 = [1.0, -2.5, 6.103515625e-05, 65504.0]
    add("f16", "F16", [2, 2], f16, struct.pack("<4e", *f16))
    b16 = [1.0, -3.140625]
    add("bf16", "BF16", [2], b16, b"".join(bf16(x) for x in b16))
    i64 = [-1, 2**40, 0, 7]
    add("i64", "I64", [2, 2], i64, struct.pack("<4q", *i64))
    i32 = [-5, 2**31 - 1, 0]
    add("i32", "I32", [3], i32, struct.pack("<3i", *i32))
    u8 = [0, 1, 128, 255]
    add("u8", "U8", [4], u8, bytes(u8))
    bools = [1, 0, 1]
    add("bool", "BOOL", [3], bools, bytes(bools))
    add("empty", "F32", [0, 4], [], b"")
    add("scalar", "F32", [], [42.0], struct.pack("<f", 42.0))
    return out


def write_python_file(path):
    import torch
    from safetensors.torch import save_file

    dtypes = {"F32": torch.float32, "F64": torch.float64, "F16": torch.float16,
              "BF16": torch.bfloat16, "I64": torch.int64, "I32": torch.int32, "U8": torch.uint8,
              "BOOL": torch.bool}
    tensors = {}
    for name, code, shape, _, raw in cases():
        t = torch.frombuffer(bytearray(raw), dtype=dtypes[code]) if raw else \
            torch.empty(0, dtype=dtypes[code])
        tensors[name] = t.reshape(shape).clone()
    save_file(tensors, path, metadata=METADATA)


def write_hf_sharded(out):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=8, intermediate_size=16, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=4,
                         max_position_embeddings=16, tie_word_embeddings=False)
    model = LlamaForCausalLM(config)
    shutil.rmtree(out, ignore_errors=True)
    model.save_pretrained(out, max_shard_size=SHARDED_MAX_SHARD_SIZE)
    for extra in ("config.json", "generation_config.json"):
        if os.path.exists(os.path.join(out, extra)):
            os.remove(os.path.join(out, extra))
    with open(os.path.join(out, "state_dict_order.txt"), "w") as f:
        for name in model.state_dict():
            f.write(name + "\n")


def main():
    expected = cases()
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        entries, metadata = safetensors_io.read(sys.argv[2])
        assert metadata == METADATA, metadata
        got = sorted((n, c, list(s), raw) for n, c, s, raw in entries)
        want = sorted((n, c, s, raw) for n, c, s, _, raw in expected)
        assert got == want, (got, want)
        print("ok: %s holds the %d expected tensors" % (sys.argv[2], len(got)))
        return
    path = os.path.join(HERE, "python_written.safetensors")
    write_python_file(path)
    print("wrote", path)
    out = os.path.join(HERE, "fixtures", "hf_sharded")
    write_hf_sharded(out)
    print("wrote", out, sorted(os.listdir(out)))


if __name__ == "__main__":
    main()
