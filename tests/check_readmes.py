#!/usr/bin/env python3
"""Every folder's README lists its files: each tracked file of a source folder must be named in the
README.md of its own folder or, where that folder has none, of the nearest ancestor that has one,
either by its path relative to that README's folder or by its file name (a brace list,
`flat_param.{h,cpp}`, names each file it spells). Prints every file that is
missing with the README that should list it. Usage: check_readmes.py SOURCE_ROOT"""
import os
import re
import subprocess
import sys

SOURCE_FOLDERS = ("core", "comm", "policies", "ops", "fsdp", "models", "tools", "examples", "bench",
                  "tests", "docs")
# Data, not code: test inputs, fuzzing corpora, raw benchmark logs, CI plumbing.
SKIPPED_DIRS = ("fixtures", "corpus", ".ci")
SKIPPED_PREFIXES = ("bench/results/",)


def tracked_files(root):
    """The repository's files, tracked or new but not ignored (relative, '/'-separated), so a
    file is checked before it is committed; None outside a checkout."""
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z", "--cached", "--others",
                              "--exclude-standard"], capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    paths = out.decode("utf-8", "replace").split("\0")
    return sorted({p for p in paths if p and os.path.isfile(os.path.join(root, p))})


def checked(path):
    parts = path.split("/")
    if len(parts) < 2 or parts[0] not in SOURCE_FOLDERS or parts[-1] == "README.md":
        return False
    if any(d in SKIPPED_DIRS for d in parts[:-1]):
        return False
    return not path.startswith(SKIPPED_PREFIXES)


def owning_readme(path, readmes):
    """The README.md of the file's folder or of its nearest ancestor with one (root included)."""
    folder = os.path.dirname(path)
    while True:
        candidate = f"{folder}/README.md" if folder else "README.md"
        if candidate in readmes:
            return folder, candidate
        if not folder:
            return None, None
        folder = os.path.dirname(folder)


BRACES = re.compile(r"([\w./-]*)\{([\w.,/-]+)\}([\w./-]*)")


def expanded(text):
    """The README's text with each brace list spelled out as well: `flat_param.{h,cpp}` also
    reads as flat_param.h flat_param.cpp (one level of braces, as the READMEs write them)."""
    words = [m.group(1) + alt + m.group(3) for m in BRACES.finditer(text)
             for alt in m.group(2).split(",")]
    return text + "\n" + " ".join(words)


def names(text, name):
    """Whether `name` stands in `text` as a whole path or a path's tail: not glued to a longer
    name before it (a '/' before it is fine: dir/name) nor after it."""
    pattern = r"(?<![\w.-])" + re.escape(name) + r"(?![\w-]|\.\w)"
    return re.search(pattern, text) is not None


def main(root):
    files = tracked_files(root)
    if files is None:
        print("check_readmes: not a git checkout (the tracked files are unknown): skipping")
        return 77
    readmes = {p for p in files if os.path.basename(p) == "README.md"}
    texts = {}
    missing = []
    count = 0
    for path in sorted(filter(checked, files)):
        folder, readme = owning_readme(path, readmes)
        count += 1
        if readme is None:
            missing.append((path, "README.md"))
            continue
        if readme not in texts:
            with open(os.path.join(root, readme), encoding="utf-8") as f:
                texts[readme] = expanded(f.read())
        rel = os.path.relpath(path, folder) if folder else path
        if not (names(texts[readme], rel) or names(texts[readme], os.path.basename(path))):
            missing.append((path, readme))
    for path, readme in missing:
        print(f"{path}: not listed in {readme}")
    if missing:
        print(f"{len(missing)} of {count} files are not listed in their folder's README")
        return 1
    print(f"readmes: ok ({count} files, each listed in its folder's README)")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
