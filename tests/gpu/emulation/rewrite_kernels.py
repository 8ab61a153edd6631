#!/usr/bin/env python3
"""Rewrites one of core/cuda's .cu files into C++ for the host compiler, under emu_cuda.h: every
launch `kernel<<<grid, block[, shared[, stream]]>>>(args...)` (the kernel may carry template
arguments, `<<<` may start a line of its own and the configuration may span lines) becomes

    ::fsdp::emu::launch([](auto... emu_args) { kernel(emu_args...); }, "kernel", grid, block,
                        shared, stream)(args...)

and every `__shared__ T name[...];` declaration is followed, on its line, by
`::fsdp::emu::poison_shared(&name, sizeof(name));` (shared memory starts undefined in each CTA),
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


def top_level_split(text):
    """`text` cut at the commas outside brackets and parentheses."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += {"[": 1, "(": 1, "]": -1, ")": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def poison_shared(src):
    """Appends poison_shared calls after each __shared__ declaration (its names)."""
    out, done = [], 0
    for m in re.finditer(r"\b__shared__\b", src):
        if m.start() < done or in_comment(src, m.start()):
            continue
        end = src.find(";", m.end())
        if end < 0:
            raise RewriteError(f"line {line_of(src, m.start())}: no ; after __shared__")
        names = []
        for k, part in enumerate(top_level_split(src[m.end():end])):
            head = part.split("[", 1)[0]
            found = re.findall(r"[A-Za-z_][A-Za-z_0-9]*", head)
            if not found or "extern" in src[max(0, m.start() - 8):m.start()]:
                raise RewriteError(f"line {line_of(src, m.start())}: a __shared__ declaration "
                                   "the rewrite does not read (extern or no name)")
            names.append(found[-1] if k == 0 else found[0])
        out.append(src[done:end + 1])
        out.append("".join(f" ::fsdp::emu::poison_shared(&{n}, sizeof({n}));" for n in names))
        done = end + 1
    out.append(src[done:])
    return "".join(out)


def main(argv):
    if len(argv) != 3:
        sys.exit(__doc__)
    source, target = argv[1], argv[2]
    with open(source, encoding="utf-8") as f:
        src = f.read()
    try:
        body = poison_shared(rewrite(src))
    except RewriteError as e:
        sys.exit(f"rewrite_kernels.py: {source}: {e}")
    with open(target, "w", encoding="utf-8") as f:
        f.write('#include "tests/gpu/emulation/emu_cuda.h"\n')
        f.write(f'#line 1 "{source}"\n')
        f.write(body)


if __name__ == "__main__":
    main(sys.argv)
