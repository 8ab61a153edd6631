#!/bin/sh
# The layering rule for ops/ (docs/design.md): ops/ uses core/ and policies/ only, never comm/,
# fsdp/, examples/ or tools/ headers. Fails listing the offending lines.
root="$1"
found=$(grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"](comm|fsdp|examples|tools)/' \
  "$root/ops" 2>/dev/null)
if [ -n "$found" ]; then
  echo "ops/ includes headers above its layer:"
  echo "$found"
  exit 1
fi
echo "ops layering OK"
