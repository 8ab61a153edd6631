#!/usr/bin/env python3
"""README.md shows examples/fsdp_minimal.cpp whole, as the first code under "## Use it in your own
project": the copy must equal the file, so the README never shows a program that does not build.
On a difference, prints the first differing line of each. Usage: check_readme_example.py ROOT"""
import os
import sys


def main(root):
    with open(os.path.join(root, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    with open(os.path.join(root, "examples", "fsdp_minimal.cpp"), encoding="utf-8") as f:
        program = f.read()
    section = readme.find("\n## Use it in your own project\n")
    start = readme.find("```cpp\n", section)
    end = readme.find("```\n", start + 7)
    if section < 0 or start < 0 or end < 0:
        print("README.md: no ```cpp block under '## Use it in your own project'")
        return 1
    shown = readme[start + 7:end]
    if shown == program:
        return 0
    a, b = shown.splitlines(), program.splitlines()
    for i in range(max(len(a), len(b))):
        x = a[i] if i < len(a) else "<end>"
        y = b[i] if i < len(b) else "<end>"
        if x != y:
            print(f"README.md's copy of examples/fsdp_minimal.cpp differs at line {i + 1}:\n"
                  f"  README: {x}\n  file:   {y}")
            break
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
