#!/usr/bin/env python3
"""Device dispatch (docs/devices.md, issue 24): the op path names no device of its own. In the ops,
functional, nn, optim, autograd and fsdp sources: no `kCPU` or `TensorOptions(dtype)` (an output
placed on the host whatever the inputs' device) and no `check_cpu(` (a refusal of other devices).
In the op files themselves (core/ops, functional, nn, optim), no loop over data either (`.data<`,
`data_ptr()`, dtype dispatch): kernels live in core/kernels/<device>/, ops call kernels(device).

A line whose comment says "host by design:" and why is a deliberate host placement (torch keeps an
optimizer's step on the CPU), not a default. NOT_MIGRATED lists the files that still do, until they move to the kernel tables: it may only
shrink. A file outside it that matches fails (a new CPU default), and so does a file in it that no
longer matches (take it off the list). Usage: check_no_cpu_default.py SOURCE_ROOT"""
import os
import re
import sys

# Where the op path lives: patterns for every file, and the data-loop patterns for op files.
OP_PATH = ["core/ops", "core/functional", "core/nn", "core/optim", "core/autograd.h",
           "core/autograd.cpp", "core/multi_grad_hook.h", "core/multi_grad_hook.cpp", "fsdp"]
OP_FILES = ["core/ops", "core/functional", "core/nn", "core/optim"]
# kCPU, a refusal of other devices, or options with a dtype and no device (cpu by default).
CPU_DEFAULT = re.compile(r"\bkCPU\b|\bcheck_cpu\(|\bTensorOptions\(\s*[^,()]*\)")
DATA_LOOP = re.compile(r"\.data<|\bdata_ptr\(\)|\bdispatch_all\(|\bdispatch_float\(")
# Kernel files that take pointers, not tensors (called from kernels or from migrated ops).
KERNEL_FILES = {"core/optim/update_kernels.cpp", "core/optim/update_kernels.h",
                "core/functional/vec_math.h", "core/functional/masked_softmax.h",
                "core/ops/op_utils.h"}

NOT_MIGRATED = set()
HOST_BY_DESIGN = "host by design:"
SOURCES = (".h", ".cpp")


def sources(root, entry):
    path = os.path.join(root, entry)
    if os.path.isfile(path):
        yield entry
        return
    for folder, _, files in os.walk(path):
        for name in sorted(files):
            if name.endswith(SOURCES):
                yield os.path.relpath(os.path.join(folder, name), root)


def offending_lines(root, rel):
    in_op_file = any(rel == d or rel.startswith(d + "/") for d in OP_FILES)
    found = []
    with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, 1):
            code, _, comment = line.partition("//")
            if HOST_BY_DESIGN in comment:
                continue
            if CPU_DEFAULT.search(code) or (in_op_file and rel not in KERNEL_FILES and
                                            DATA_LOOP.search(code)):
                found.append(f"{rel}:{number}: {line.strip()}")
    return found


def main(root):
    failures = []
    matched = set()
    for entry in OP_PATH:
        for rel in sources(root, entry):
            lines = offending_lines(root, rel)
            if lines:
                matched.add(rel)
                if rel not in NOT_MIGRATED:
                    failures.append(f"{lines[0]}\n  {rel} runs on the cpu whatever its inputs' "
                                    "device: create outputs with new_tensor(shape, dtype, "
                                    "common_device(...)) and run kernels(device) (docs/devices.md)")
    for rel in sorted(NOT_MIGRATED - matched):
        failures.append(f"{rel} is migrated: take it off NOT_MIGRATED in "
                        "tests/check_no_cpu_default.py")
    for f in failures:
        print(f)
    print(f"{len(matched)} unmigrated files, {len(failures)} problems")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
