#!/bin/sh
# Layering rules of comm/ (docs/design.md): comm uses only core/dtype.h, core/device.h,
# core/memory_stats.h, core/error.h (header-only: the root fsdp::Error that CommError derives
# from, issue 12), core/env.h (the one table of environment knobs, its own small library) and
# core/start_thread.h (header-only: a refused thread as one clear error) from core, and nothing outside comm (its tests and benchmarks aside) includes
# a backend's headers or a communication library's. Usage: check_layering.sh SOURCE_ROOT
root=${1:?usage: check_layering.sh SOURCE_ROOT}
status=0
bad=$(grep -rnE '#include *"core/' "$root/comm" --include='*.h' --include='*.cpp' |
      grep -vE '"core/(dtype|device|memory_stats|error|env|start_thread)\.h"')
if [ -n "$bad" ]; then
  echo "comm/ may include only core/dtype.h, core/device.h, core/memory_stats.h, core/error.h," \
    "core/env.h and core/start_thread.h from core:"
  echo "$bad"; status=1
fi
backend='comm/(mpi|gloo|nccl|store)/|comm/threads/threads_(world|process_group)\.h'
library='mpi\.h|gloo/|nccl\.h'
for dir in core policies fsdp ops tools examples; do
  [ -d "$root/$dir" ] || continue
  bad=$(grep -rnE "#include *[<\"]($backend|$library)" "$root/$dir" \
        --include='*.h' --include='*.cpp' --include='*.hpp' --include='*.cc')
  if [ -n "$bad" ]; then
    echo "$dir/ includes backend headers (use comm/process_group.h and comm/registry.h):"
    echo "$bad"; status=1
  fi
done
[ $status -eq 0 ] && echo "comm layering: ok"
exit $status
