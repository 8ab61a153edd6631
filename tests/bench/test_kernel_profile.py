#!/usr/bin/env python3
"""bench/gpu/kernel_profile.py on a table in Nsight Compute's raw CSV layout (a header row, a
units row, a row per kernel): names shortened, launches and times summed per name, largest
first, shares of the total, the units row honoured; a file without the table is one error line.
"""
import contextlib
import io
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench", "gpu"))
import kernel_profile  # noqa: E402

HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
          '"Block Size","Grid Size","Device","CC","gpu__time_duration.sum"\n')


def row(i, name, value):
    return '"%d","7","train_gpt","h","%s","1","13","(128, 1, 1)","(96, 1, 1)","0","9.0","%s"\n' % (
        i, name, value)


def profile(text, *args):
    with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
        f.write(text)
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            kernel_profile.main([f.name] + list(args))
    finally:
        os.unlink(f.name)
    return out.getvalue().splitlines()


def check(cond, what):
    if not cond:
        sys.exit("test_kernel_profile: FAILED: " + what)


def main():
    flash = "void fsdp::cuda::(anonymous namespace)::flash_forward_kernel<__nv_bfloat16>" \
            "(const __nv_bfloat16 *, fsdp::cuda::FlashGeometry)"
    gemm = "nvjet_tst_128x256_64x4_1x2_h_bz_coopB_TNT"
    text = ("==PROF== Connected to process 7\n" + HEADER +
            '"","","","","","","","","","","","usecond"\n' +
            row(0, flash, "100.5") + row(1, gemm, "1,200") + row(2, flash, "99.5") +
            row(3, "void fsdp::cuda::layer_norm_forward_kernel<float, float>(int)", "50"))
    lines = profile(text)
    check(lines[0] == "kernel_profile: 4 kernels, 1.450 ms in all (ncu, one at a time)", lines[0])
    body = [l.split() for l in lines[2:]]
    check([b[0] for b in body] == [gemm, "flash_forward_kernel", "layer_norm_forward_kernel"],
          "names, largest first: %s" % body)
    check(body[0][1:] == ["1", "1.200", "82.8%", "1200.0"], "the product's row: %s" % body[0])
    check(body[1][1:] == ["2", "0.200", "13.8%", "100.0"], "flash's two launches: %s" % body[1])
    # Nanoseconds (ncu's base unit, and the default without a units row), and --top.
    ns = HEADER + row(0, gemm, "2000000") + row(1, flash, "1000000") + row(2, "k3(x)", "500000")
    lines = profile(ns, "--top", "1")
    check(lines[0].startswith("kernel_profile: 3 kernels, 3.500 ms"), lines[0])
    check(lines[3].split() == ["(2", "others)", "2", "1.500", "42.9%"], "the rest: %s" % lines[3])
    # No table: one error line, exit status 1.
    try:
        profile("==PROF== Disconnected\n")
        check(False, "a file without the table must fail")
    except SystemExit as e:
        check("kernel_profile: error:" in str(e.code) and "Kernel Name" in str(e.code), str(e.code))
    print("test_kernel_profile: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
