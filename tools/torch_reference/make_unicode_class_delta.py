#!/usr/bin/env python3
"""Prints the code point ranges of models/tokenizer/unicode_classes.cpp: where HF tokenizers'
regexes (Oniguruma, Unicode 16 tables in tokenizers 0.23) and this machine's PCRE2 (UTF + UCP;
Debian 12's 10.42 has Unicode 14 tables) disagree on \\p{L}, \\p{N} and \\s, over every code point.

    /opt/torch2/bin/python tools/torch_reference/make_unicode_class_delta.py

Needs tokenizers and libpcre2-32 (Debian: libpcre2-32-0).
"""
import ctypes
import ctypes.util

from tokenizers import Regex
from tokenizers.pre_tokenizers import Split

CODE_POINTS = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
PCRE2_UTF, PCRE2_UCP = 0x00080000, 0x00020000


def hf_members(pattern):
    """The code points HF tokenizers' regex `pattern` matches (a "removed" split drops them)."""
    split = Split(Regex(pattern), behavior="removed")
    kept = set()
    for i in range(0, len(CODE_POINTS), 4096):
        text = "".join(map(chr, CODE_POINTS[i:i + 4096]))
        for piece, _ in split.pre_tokenize_str(text):
            kept.update(map(ord, piece))
    return set(CODE_POINTS) - kept


def pcre2_members(pattern):
    lib = ctypes.CDLL(ctypes.util.find_library("pcre2-32") or "libpcre2-32.so.0")
    lib.pcre2_compile_32.restype = ctypes.c_void_p
    lib.pcre2_match_data_create_from_pattern_32.restype = ctypes.c_void_p
    units = (ctypes.c_uint32 * len(pattern))(*map(ord, pattern))
    err, off = ctypes.c_int(), ctypes.c_size_t()
    code = lib.pcre2_compile_32(units, ctypes.c_size_t(len(pattern)), PCRE2_UTF | PCRE2_UCP,
                                ctypes.byref(err), ctypes.byref(off), None)
    data = lib.pcre2_match_data_create_from_pattern_32(ctypes.c_void_p(code), None)
    one = ctypes.c_uint32()
    out = set()
    for c in CODE_POINTS:
        one.value = c
        if lib.pcre2_match_32(ctypes.c_void_p(code), ctypes.byref(one), ctypes.c_size_t(1),
                              ctypes.c_size_t(0), 0, ctypes.c_void_p(data), None) >= 0:
            out.add(c)
    return out


def ranges(points):
    out = []
    for c in sorted(points):
        if out and out[-1][1] == c - 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return out


def main():
    for pattern in [r"\p{L}", r"\p{N}", r"\s"]:
        hf, pcre2 = hf_members(pattern), pcre2_members(pattern)
        print(f"{pattern}: HF only {len(hf - pcre2)}, PCRE2 only {len(pcre2 - hf)}")
        print("  HF only:", " ".join(f"{{0x{a:X}, 0x{b:X}}}," for a, b in ranges(hf - pcre2)))
        print("  PCRE2 only:", " ".join(f"0x{c:X}" for c in sorted(pcre2 - hf)))
        if pattern == r"\s":
            print("  HF:", " ".join(f"{{0x{a:X}, 0x{b:X}}}," for a, b in ranges(hf)))


if __name__ == "__main__":
    main()
