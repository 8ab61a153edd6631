"""Writes tests/core/io/python_written.safetensors by hand (json + struct, no torch): every dtype
with known values, an empty and a 0-d tensor, and metadata. test_safetensors.cpp loads it and
checks the values, and checks that save_safetensors writes the same bytes for the same tensors.

    python3 tests/core/io/gen_safetensors_fixture.py            # regenerate the fixture
    python3 tests/core/io/gen_safetensors_fixture.py --check F  # verify a file written by C++
"""
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "tools", "torch_reference"))
import safetensors_io  # noqa: E402

METADATA = {"format": "pt", "generator": "gen_safetensors_fixture.py"}


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


def main():
    expected = cases()
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        entries, metadata = safetensors_io.read(sys.argv[2])
        assert metadata == METADATA, metadata
        got = [(n, c, list(s), raw) for n, c, s, raw in entries]
        want = [(n, c, s, raw) for n, c, s, _, raw in expected]
        assert got == want, (got, want)
        print("ok: %s holds the %d expected tensors" % (sys.argv[2], len(got)))
        return
    path = os.path.join(HERE, "python_written.safetensors")
    safetensors_io.write(path, [(n, c, s, raw) for n, c, s, _, raw in expected], METADATA)
    print("wrote", path)


if __name__ == "__main__":
    main()
