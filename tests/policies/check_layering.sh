#!/bin/sh
# The layering rule (docs/design.md): core/ and policies/ never include comm/ or fsdp/ headers.
# Fails listing the offending lines.
root="$1"
found=$(grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"](comm|fsdp)/' \
  "$root/core" "$root/policies" 2>/dev/null)
if [ -n "$found" ]; then
  echo "core/ or policies/ include comm/ or fsdp/ headers:"
  echo "$found"
  exit 1
fi
echo "layering OK"
