#!/usr/bin/env python3
"""Rewrites one of core/cuda's .cu files into C++ for the host compiler, under emu_cuda.h: every
launch `kernel<<<grid, block[, shared[, stream]]>>>(args...)` (the kernel may carry template
arguments, `<<<` may start a line of its own and the configuration may span lines) becomes

    ::fsdp::emu::launch([](auto... emu_args) { kernel(emu_args...); }, "kernel",
                        FSDP_EMU_KERNEL_ADDRESS(kernel), grid, block, shared, stream)(args...)

(the kernel's address names it to the runtime: cudaFuncSetAttribute's opt-ins are per kernel),
every `__shared__ T name[...];` declaration is followed, on its line, by
`::fsdp::emu::poison_shared(&name, sizeof(name));` (shared memory starts undefined in each CTA),
and every `extern __shared__ [__align__(N)] T name[];` inside a function (dynamic shared memory)
becomes

    T* const name = static_cast<T*>(::fsdp::emu::dynamic_shared(alignment));

the running CTA's buffer of the launch's dynamic shared bytes (alignment: N or alignof(T),
whichever is larger); one at file scope, or one in another form, is refused naming its line.
emu_cuda.h is included first and a #line directive follows, so that diagnostics name the .cu
file and its lines (the rewrite keeps every line where it was).
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


def rewrite(src):
    code = code_only(src)
    out, done = [], 0
    for m in re.finditer(r"<<<", code):
        if m.start() < done:
            continue
        try:
            expr_end = m.start()
            while src[expr_end - 1].isspace():
                expr_end -= 1
            start, name = kernel_start(src, expr_end)
            close = code.find(">>>", m.end())
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
                       f"\"{name}\", FSDP_EMU_KERNEL_ADDRESS({expr}),"
                       f"{src[expr_end:m.start()]} {src[m.end():close]}){src[close + 3:paren]}("
                       + "\n" * lines_in_expr)
        out.append(src[done:start])
        out.append(replacement)
        done = paren + 1
    out.append(src[done:])
    return "".join(out)


def code_only(src):
    """`src` with its comments and the insides of its string and character literals blanked
    (newlines kept, so positions and lines stay): what brace counting and searches should see."""
    out, i, n = list(src), 0, len(src)
    while i < n:
        if src.startswith("//", i):
            end = src.find("\n", i)
            end = n if end < 0 else end
        elif src.startswith("/*", i):
            end = src.find("*/", i + 2)
            end = n if end < 0 else end + 2
        elif src[i] in "\"'":
            end = i + 1
            while end < n and src[end] not in (src[i], "\n"):
                end += 2 if src[end] == "\\" else 1
            i, end = i + 1, min(end, n)  # keep the quotes: `extern "C"` still reads as such
        else:
            i += 1
            continue
        for k in range(i, end):
            if out[k] != "\n":
                out[k] = " "
        i = end + 1
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
    code = code_only(src)
    out, done = [], 0
    for m in re.finditer(r"\b__shared__\b", code):
        if m.start() < done:
            continue
        end = code.find(";", m.end())
        if end < 0:
            raise RewriteError(f"line {line_of(src, m.start())}: no ; after __shared__")
        names = []
        for k, part in enumerate(top_level_split(code[m.end():end])):
            head = part.split("[", 1)[0]
            found = re.findall(r"[A-Za-z_][A-Za-z_0-9]*", head)
            if not found or "extern" in code[max(0, m.start() - 8):m.start()]:
                raise RewriteError(f"line {line_of(src, m.start())}: a __shared__ declaration "
                                   "the rewrite does not read (extern or no name)")
            names.append(found[-1] if k == 0 else found[0])
        out.append(src[done:end + 1])
        out.append("".join(f" ::fsdp::emu::poison_shared(&{n}, sizeof({n}));" for n in names))
        done = end + 1
    out.append(src[done:])
    return "".join(out)


# What opens a brace that does not make a function body: a namespace, a linkage block, a class.
SCOPE_HEAD = re.compile(r'^\s*(template\s*<.*>\s*)?(namespace\b|extern\s*"\s*"|class\b|struct\b|'
                        r'union\b|enum\b)', re.S)


def in_function(code, pos):
    """Whether `pos` of `code` (code_only's) lies in a function body: some brace enclosing it
    is not a namespace's, a linkage block's or a class's."""
    stack = []
    for m in re.finditer(r"[{}]", code[:pos]):
        if m.group() == "}":
            if stack:
                stack.pop()
            continue
        head_start = max(code.rfind(c, 0, m.start()) for c in ";{}") + 1
        head = "\n".join(line for line in code[head_start:m.start()].split("\n")
                         if not line.lstrip().startswith("#"))
        stack.append(not SCOPE_HEAD.match(head))
    return any(stack)


EXTERN_SHARED = re.compile(r"\bextern\s+__shared__\b")
DYNAMIC_DECL = re.compile(r"extern\s+__shared__\s+(?:__align__\s*\(\s*(?P<align>[^()]+?)\s*\)\s+)?"
                          r"(?P<type>[A-Za-z_][\w:]*(?:\s+[A-Za-z_][\w:]*)*?)\s+"
                          r"(?P<name>[A-Za-z_]\w*)\s*\[\s*\]\s*;")


def dynamic_shared(src):
    """Rewrites each `extern __shared__ [__align__(N)] T name[];` in a function into a pointer to
    the running CTA's dynamic shared memory, its lines kept."""
    code = code_only(src)
    out, done = [], 0
    for m in EXTERN_SHARED.finditer(code):
        line = line_of(src, m.start())
        if not in_function(code, m.start()):
            raise RewriteError(f"line {line}: extern __shared__ at file scope: the emulation "
                               "gives dynamic shared memory to declarations inside kernels only")
        decl = DYNAMIC_DECL.match(code, m.start())
        if not decl:
            raise RewriteError(f"line {line}: an extern __shared__ declaration the rewrite does "
                               "not read (the form is `extern __shared__ [__align__(N)] T name[];`)")
        t, name, align = decl.group("type"), decl.group("name"), decl.group("align")
        alignment = f"alignof({t})"
        if align:
            alignment = f"alignof({t}) > ({align}) ? alignof({t}) : ({align})"
        out.append(src[done:m.start()])
        out.append(f"{t}* const {name} = static_cast<{t}*>(::fsdp::emu::dynamic_shared("
                   f"{alignment}));" + "\n" * src.count("\n", m.start(), decl.end()))
        done = decl.end()
    out.append(src[done:])
    return "".join(out)


def main(argv):
    if len(argv) != 3:
        sys.exit(__doc__)
    source, target = argv[1], argv[2]
    with open(source, encoding="utf-8") as f:
        src = f.read()
    try:
        body = poison_shared(rewrite(dynamic_shared(src)))
    except RewriteError as e:
        sys.exit(f"rewrite_kernels.py: {source}: {e}")
    with open(target, "w", encoding="utf-8") as f:
        f.write('#include "tests/gpu/emulation/emu_cuda.h"\n')
        f.write(f'#line 1 "{source}"\n')
        f.write(body)


if __name__ == "__main__":
    main(sys.argv)
