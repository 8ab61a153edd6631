#!/usr/bin/env python3
"""The one layering table (docs/design.md): which layer may include which. Every #include "x/..."
of a project header in a layer's folder must name a layer that the table allows. comm/ also takes
only the listed core headers, and nothing outside comm/ (tests and benchmarks aside) includes a
backend's own headers or a communication library's. A layer's tests (tests/<layer>/) have a row
too: tests/fsdp, for one, builds without tools/ and examples/. Usage: check_layering.py SOURCE_ROOT"""
import os
import re
import sys

# layer -> the layers its files may include (itself included), bottom up.
ALLOWED = {
    "core": {"core"},
    "policies": {"core", "policies"},
    "comm": {"core", "comm"},
    "ops": {"core", "policies", "ops"},
    "fsdp": {"core", "policies", "comm", "ops", "fsdp"},
    "models": {"core", "models"},
    "tools": {"core", "policies", "comm", "ops", "fsdp", "models", "tools"},
    "examples": {"core", "policies", "comm", "ops", "fsdp", "models", "tools", "examples"},
    "bench": {"core", "policies", "comm", "ops", "fsdp", "models", "tools", "examples", "bench"},
}
# tests/<layer> -> the layers its tests may include (tests/ itself aside): a layer's tests use
# the layers below it, so that they build, and fail, without the layers above.
TESTS = {
    "tests/core": ALLOWED["core"],
    "tests/policies": ALLOWED["policies"],
    "tests/comm": ALLOWED["comm"],
    "tests/ops": ALLOWED["ops"] | {"comm", "fsdp"},  # activation checkpointing under FSDP
    "tests/fsdp": ALLOWED["fsdp"],
    "tests/tools": ALLOWED["tools"] | {"examples"},  # train_gpt's measured peak, its command line
    "tests/examples": ALLOWED["examples"],
    "tests/models": ALLOWED["models"],
}
# comm/ stands beside core, not above all of it: the header-only pieces it needs.
COMM_CORE = {"core/dtype.h", "core/device.h", "core/memory_stats.h", "core/error.h", "core/env.h",
             "core/start_thread.h", "core/stream.h", "core/device_copy.h",
             "core/stream_sanitizer.h", "core/native_stream.h"}
BACKEND = re.compile(r'#\s*include\s*[<"](comm/(mpi|gloo|nccl|store)/|'
                     r'comm/threads/threads_(world|process_group)\.h|mpi\.h|gloo/|nccl\.h)')
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([a-z_]+)/([^>"]+)[>"]')
SOURCES = (".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh", ".inc")


def sources(root, folder):
    """(path relative to root, line number, line) of every C++ source line under `folder`."""
    for top, _, files in os.walk(os.path.join(root, folder)):
        for name in sorted(files):
            if name.endswith(SOURCES):
                path = os.path.join(top, name)
                with open(path, encoding="utf-8", errors="replace") as f:
                    for number, line in enumerate(f, 1):
                        yield os.path.relpath(path, root), number, line


def main(root):
    bad = []
    for layer, allowed in ALLOWED.items():
        for rel, number, line in sources(root, layer):
            m = INCLUDE.match(line)
            if m and m.group(1) in ALLOWED and m.group(1) not in allowed:
                bad.append(f"{rel}:{number}: {layer}/ may not include "
                           f"{m.group(1)}/ (it may include {', '.join(sorted(allowed))})")
            elif (m and layer == "comm" and m.group(1) == "core" and
                  f"core/{m.group(2)}" not in COMM_CORE):
                bad.append(f"{rel}:{number}: comm/ may include only "
                           f"{', '.join(sorted(COMM_CORE))} from core")
            if layer not in ("comm", "bench") and BACKEND.search(line):
                bad.append(f"{rel}:{number}: {layer}/ includes a backend's header (use "
                           "comm/process_group.h and comm/registry.h)")
    for folder, allowed in TESTS.items():
        for rel, number, line in sources(root, folder):
            m = INCLUDE.match(line)
            if m and m.group(1) in ALLOWED and m.group(1) not in allowed:
                bad.append(f"{rel}:{number}: {folder}/ may not include "
                           f"{m.group(1)}/ (it may include {', '.join(sorted(allowed))})")
    for line in bad:
        print(line)
    if bad:
        print(f"{len(bad)} include(s) against the layering table")
        return 1
    print(f"layering: ok ({len(ALLOWED)} layers, {len(TESTS)} test folders)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
