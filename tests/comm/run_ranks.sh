#!/bin/sh
# Starts a multi-process comm test: run_ranks.sh LAUNCHER NP STORE EXE [ARGS...]
#   LAUNCHER: mpirun (ranks read OMPI_COMM_WORLD_RANK/SIZE) or shell (RANK/WORLD_SIZE, one
#             background process per rank, as torchrun users launch jobs)
#   STORE:    file (a fresh mktemp directory, FSDP_STORE_PATH) or tcp (MASTER_ADDR/MASTER_PORT,
#             a port picked from the process id so that concurrent runs rarely collide)
set -u
launcher=$1 np=$2 store=$3
shift 3
dir=$(mktemp -d "${TMPDIR:-/tmp}/fsdp-comm-test.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
if [ "$store" = file ]; then
  export FSDP_STORE_PATH="$dir"
else
  unset FSDP_STORE_PATH
  export MASTER_ADDR=127.0.0.1 MASTER_PORT=$((20000 + $$ % 20000))
fi
if [ "$launcher" = mpirun ]; then
  exec_rc=0
  # Unbound: gloo's network thread needs a core beside the caller's (comm/README.md).
  mpirun --bind-to none -np "$np" "$@" || exec_rc=$?
  exit $exec_rc
fi
pids=""
r=0
while [ "$r" -lt "$np" ]; do
  RANK=$r WORLD_SIZE=$np "$@" &
  pids="$pids $!"
  r=$((r + 1))
done
rc=0
for p in $pids; do
  wait "$p" || rc=$?
done
exit $rc
