#!/usr/bin/env python3
"""bench/gpu: where a train_gpt step's GPU time goes, kernel by kernel, from Nsight Compute's
per-kernel durations (`ncu --metrics gpu__time_duration.sum --csv --page raw`): launches, total
ms, share and mean us for each kernel name (template arguments and parameter lists dropped),
largest first. tests/gpu/run_device_checks.sh's kernel_profile step feeds it about one step's
launches; ncu runs the kernels one at a time, so the sum is the step's kernels without overlap.

    bench/gpu/kernel_profile.py CSV [--top 30]

Exits 1 with "kernel_profile: error: <what>" when the file holds no ncu raw-page table.
"""
import argparse
import csv
import re
import sys

METRIC = "gpu__time_duration.sum"
SCALE_TO_US = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "second": 1e6}


def short_name(name):
    """'void fsdp::cuda::(anon)::flash_forward_kernel<bf16>(...)' -> 'flash_forward_kernel';
    library kernels (cuBLASLt's) keep their own names."""
    name = re.sub(r"^void\s+", "", name.strip()).replace("(anonymous namespace)::", "")
    depth, cut = 0, len(name)
    for i, ch in enumerate(name):  # the first '<' or '(' outside brackets ends the name
        if ch in "<(" and depth == 0:
            cut = i
            break
    name = name[:cut]
    return name.rsplit("::", 1)[-1] or name


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def read_durations(path):
    """[(kernel name, microseconds)] from an ncu --csv --page raw file."""
    with open(path, newline="") as f:
        rows = [r for r in csv.reader(f) if r]
    for h, header in enumerate(rows):
        if "Kernel Name" in header and METRIC in header:
            break
    else:
        raise ValueError("no header row with 'Kernel Name' and '%s'" % METRIC)
    name_col, time_col = header.index("Kernel Name"), header.index(METRIC)
    scale, out = 1e-3, []  # ncu's base unit for durations: nanoseconds
    for row in rows[h + 1:]:
        if len(row) <= max(name_col, time_col):
            continue
        value = number(row[time_col])
        if value is None:  # the units row
            scale = SCALE_TO_US.get(row[time_col].strip(), scale)
            continue
        out.append((short_name(row[name_col]), value * scale))
    if not out:
        raise ValueError("no kernel rows under the header")
    return out


def table(durations, top):
    total = sum(us for _, us in durations)
    by_name = {}
    for name, us in durations:
        n, t = by_name.get(name, (0, 0.0))
        by_name[name] = (n + 1, t + us)
    lines = ["kernel_profile: %d kernels, %.3f ms in all (ncu, one at a time)"
             % (len(durations), total / 1e3),
             "%-44s %8s %10s %7s %9s" % ("kernel", "launches", "total ms", "share", "mean us")]
    ranked = sorted(by_name.items(), key=lambda kv: -kv[1][1])
    for name, (n, us) in ranked[:top]:
        lines.append("%-44s %8d %10.3f %6.1f%% %9.1f"
                     % (name[:44], n, us / 1e3, 100.0 * us / total if total else 0.0, us / n))
    if len(ranked) > top:
        rest = sum(us for _, (_, us) in ranked[top:])
        lines.append("%-44s %8d %10.3f %6.1f%%" % ("(%d others)" % (len(ranked) - top),
                                                   sum(n for _, (n, _) in ranked[top:]),
                                                   rest / 1e3, 100.0 * rest / total))
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(prog="kernel_profile", description=__doc__.splitlines()[0])
    p.add_argument("csv")
    p.add_argument("--top", type=int, default=30)
    a = p.parse_args(argv)
    try:
        durations = read_durations(a.csv)
    except (OSError, ValueError) as e:
        sys.exit("kernel_profile: error: %s: %s" % (a.csv, e))
    print(table(durations, max(a.top, 1)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
