#!/usr/bin/env python3
"""The one layering table (docs/design.md): which layer may include which. Every #include "x/..."
of a project header in a layer's folder must name a layer that the table allows. comm/ also takes
only the listed core headers, and nothing outside comm/ (tests and benchmarks aside) includes a
backend's own headers or a communication library's. Usage: check_layering.py SOURCE_ROOT"""
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
# comm/ stands beside core, not above all of it: the header-only pieces it needs.
COMM_CORE = {"core/dtype.h", "core/device.h", "core/memory_stats.h", "core/error.h", "core/env.h",
             "core/start_thread.h"}
BACKEND = re.compile(r'#\s*include\s*[<"](comm/(mpi|gloo|nccl|store)/|'
                     r'comm/threads/threads_(world|process_group)\.h|mpi\.h|gloo/|nccl\.h)')
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([a-z_]+)/([^>"]+)[>"]')
SOURCES = (".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh", ".inc")


def main(root):
    bad = []
    for layer, allowed in ALLOWED.items():
        top = os.path.join(root, layer)
        for folder, _, files in os.walk(top):
            for name in files:
                if not name.endswith(SOURCES):
                    continue
                path = os.path.join(folder, name)
                rel = os.path.relpath(path, root)
                with open(path, encoding="utf-8", errors="replace") as f:
                    for number, line in enumerate(f, 1):
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
    for line in bad:
        print(line)
    if bad:
        print(f"{len(bad)} include(s) against the layering table")
        return 1
    print(f"layering: ok ({len(ALLOWED)} layers)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
