#!/usr/bin/env python3
"""Writes the seed corpora of the TcpStore fuzz targets (comm/store/tcp_store_protocol.h):
a request is op, u32 LE key length, key, u32 LE value length, value; a reply is status,
u32 LE length, data. Run from tests/fuzz/."""
import struct


def req(op, key, value=b""):
    return op + struct.pack("<I", len(key)) + key + struct.pack("<I", len(value)) + value


def rep(status, data=b""):
    return bytes([status]) + struct.pack("<I", len(data)) + data


requests = {
    "set": req(b"S", b"world/0", b"10.77.0.1:41817"),
    "get": req(b"G", b"world/1"),
    "check": req(b"C", b"job/key"),
    "empty": req(b"S", b""),
    "binary": req(b"S", b"nccl_unique_id", b"\0\x01\xff\x80 value"),
}
requests["stream"] = requests["set"] + requests["get"] + requests["check"]
replies = {"ok": rep(0), "present": rep(1), "address": rep(0, b"10.77.0.2:50211")}
for folder, seeds in (("tcp_store_request", requests), ("tcp_store_reply", replies)):
    for name, data in seeds.items():
        with open(f"corpus/{folder}/{name}", "wb") as f:
            f.write(data)
