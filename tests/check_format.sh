#!/bin/sh
# Formatting: every C++ and CUDA source of the tree as .clang-format says (clang-format
# --dry-run --Werror), so that CI fails on a file that drifted. Skips (77) without clang-format.
# Usage: check_format.sh SOURCE_ROOT
root=${1:?usage: check_format.sh SOURCE_ROOT}
command -v clang-format > /dev/null || { echo "clang-format not found: skipped"; exit 77; }
cd "$root" || exit 1
files=$(find core policies comm ops fsdp models tools examples bench tests \
          \( -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \) 2>/dev/null | sort)
out=$(printf '%s\n' $files | xargs clang-format --dry-run --Werror 2>&1)
if [ -n "$out" ]; then
  printf '%s\n' "$out" | grep 'error:' | head -40
  echo "$(printf '%s\n' "$out" | grep -c 'error:') formatting difference(s): run clang-format -i on the files above"
  exit 1
fi
echo "format: ok ($(printf '%s\n' $files | wc -l) files)"
