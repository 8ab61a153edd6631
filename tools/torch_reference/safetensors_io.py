"""The safetensors format with the standard library only (json + struct), no torch needed.

A file is: an 8-byte little-endian header length N, N bytes of JSON
{name: {"dtype", "shape", "data_offsets": [begin, end)}, "__metadata__": {str: str}} padded with
spaces to a multiple of 8, then the tensors' raw little-endian bytes. The writer lays the file
out as Python's safetensors and fsdp::io::save_safetensors do (compact JSON, metadata first,
tensors by dtype, 8-byte elements first, then by name), so the same tensors give the same bytes
from all three.
"""
import json
import struct

DTYPE_SIZES = {"F32": 4, "F64": 8, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "U8": 1, "BOOL": 1}
# The reference writer's order of dtypes (its Dtype enum, descending).
LAYOUT_ORDER = ["I64", "F64", "F32", "I32", "BF16", "F16", "U8", "BOOL"]
METADATA_KEY = "__metadata__"


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def write(path, entries, metadata=None):
    """entries: [(name, dtype_code, shape, raw_bytes)], laid out as the reference does."""
    entries = sorted(entries, key=lambda e: (LAYOUT_ORDER.index(e[1]), e[0]))
    header = {}
    if metadata:
        header[METADATA_KEY] = {k: metadata[k] for k in sorted(metadata)}
    offset = 0
    for name, code, shape, raw in entries:
        assert len(raw) == numel(shape) * DTYPE_SIZES[code], name
        header[name] = {"dtype": code, "shape": list(shape),
                        "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, _, _, raw in entries:
            f.write(raw)


def read(path):
    """Returns ([(name, dtype_code, shape, raw_bytes)] in file order, metadata)."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    metadata = header.pop(METADATA_KEY, {})
    entries = []
    for name, v in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"]):
        begin, end = v["data_offsets"]
        assert end - begin == numel(v["shape"]) * DTYPE_SIZES[v["dtype"]], name
        entries.append((name, v["dtype"], v["shape"], data[begin:end]))
    return entries, metadata
