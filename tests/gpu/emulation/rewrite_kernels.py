#!/usr/bin/env python3
"""Rewrites one of core/cuda's .cu files into C++ for the host compiler, under emu_cuda.h: every
launch `kernel<<<grid, block[, shared[, stream]]>>>(args...)` (the kernel may carry template
arguments, `<<<` may start a line of its own and the configuration may span lines) becomes

    ::fsdp::emu::launch([](auto... emu_args) { kernel(emu_args...); }, "kernel", grid, block,
                        shared, stream)(args...)

with emu_cuda.h included first and a #line directive, so that diagnostics name the .cu file and
its lines (the rewrite keeps every line where it was).
Usage: rewrite_kernels.py INPUT.cu OUTPUT.cpp"""
import re
import sys

IDENT = re.compile(r"[A-Za-z_][A-Za-z_0-9:]*$")


class RewriteError(Exception):
    pass


def kernel_start(src, end):
    """The start of the kernel expression (identifier and template arguments) ending at `end`."""
    i = end
    if src[i - 1] == ">":  # template arguments: back to the matching '<'
        depth = 0
        while i > 0:
            i -= 1
            depth += {">": 1, "<": -1}.get(src[i], 0)
            if depth == 0:
                break
        if depth != 0:
            raise RewriteError("unbalanced template arguments before <<<")
    m = IDENT.search(src[:i])
    if not m:
        raise RewriteError("no kernel name before <<<")
    return m.start(), m.group(0)


def line_of(src, pos):
    return src.count("\n", 0, pos) + 1


def in_comment(src, pos):
    line_start = src.rfind("\n", 0, pos) + 1
    return "//" in src[line_start:pos]


def rewrite(src):
    out, done = [], 0
    for m in re.finditer(r"<<<", src):
        if m.start() < done or in_comment(src, m.start()):
            continue
        try:
            expr_end = m.start()
            while src[expr_end - 1].isspace():
                expr_end -= 1
            start, name = kernel_start(src, expr_end)
            close = src.find(">>>", m.end())
            if close < 0:
                raise RewriteError("no >>> after <<<")
            paren = close + 3
            while src[paren].isspace():
                paren += 1
            if src[paren] != "(":
                raise RewriteError("no argument list after >>>")
        except RewriteError as e:
            raise RewriteError(f"line {line_of(src, m.start())}: {e}") from None
        expr = src[start:expr_end]
        lines_in_expr = expr.count("\n")
        expr = " ".join(expr.split())
        replacement = (f"::fsdp::emu::launch([](auto... emu_args) {{ {expr}(emu_args...); }}, "
                       f"\"{name}\","
                       f"{src[expr_end:m.start()]} {src[m.end():close]}){src[close + 3:paren]}("
                       + "\n" * lines_in_expr)
        out.append(src[done:start])
        out.append(replacement)
        done = paren + 1
    out.append(src[done:])
    return "".join(out)


def main(argv):
    if len(argv) != 3:
        sys.exit(__doc__)
    source, target = argv[1], argv[2]
    with open(source, encoding="utf-8") as f:
        src = f.read()
    try:
        body = rewrite(src)
    except RewriteError as e:
        sys.exit(f"rewrite_kernels.py: {source}: {e}")
    with open(target, "w", encoding="utf-8") as f:
        f.write('#include "tests/gpu/emulation/emu_cuda.h"\n')
        f.write(f'#line 1 "{source}"\n')
        f.write(body)


if __name__ == "__main__":
    main(sys.argv)
