#!/bin/bash
# HYBRID_SHARD across two "nodes": two network namespaces on one switch (netns_lib.sh), ranks 0
# and 1 on node 0 (10.77.0.1, which hosts the TCP store), ranks 2 and 3 on node 1 (10.77.0.2);
# train_gpt on the GPT fixture (tests/fixtures/gpt) with --sharding HYBRID_SHARD --node-size 2
# over gloo (FSDP_GLOO_DIRECT=0: every byte goes through TCP, the replicate group's across the
# link). MODE:
#   losses  4 steps: the per-step losses equal those of the same job on thread ranks and of one
#           rank with the whole batch (--sharding none), within 1e-5 relative; node 1's link
#           carried the replicate group's traffic (its byte counters are printed)
#   cut     node 1 loses its link after step 1 (FSDP_TIMEOUT_MS=3000): every rank ends with an
#           error naming the collective and a rank (node 0's name a world rank of node 1), the
#           last within the timeout + 1 s of the cut, and the job ends within 2 x timeout + 5 s
#   hybrid_nodes.sh losses|cut TRAIN_GPT FIXTURE_DIR
# Exits 77 where namespaces are not permitted. Every launch is bounded (`timeout 120`).
set -euo pipefail
mode=$1 exe=$2 fixtures=$3
here=$(dirname "$(readlink -f "$0")")
# shellcheck source-path=SCRIPTDIR source=netns_lib.sh
. "$here/netns_lib.sh"
dir=$(mktemp -d "${TMPDIR:-/tmp}/fsdp-netns-hybrid.XXXXXX")
cleanup() {
  for ((k = 0; k < NETNS_HOSTS; k++)); do
    for p in $(ip netns pids "$(netns_name "$k")" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
  done
  netns_cleanup || true
  rm -rf "$dir"
}
trap 'cleanup || true' EXIT
now_ms() { echo $(($(date +%s%N) / 1000000)); }
model=(--layers 2 --d-model 32 --heads 4 --seq 16 --data "$fixtures/data.txt"
  --load "$fixtures/init.safetensors" --log-every 1)
np=4 node_size=2

# "step <i> loss <x>" lines of a run as "<i> <x>".
losses() { sed -n 's/^step \([0-9][0-9]*\) loss \([^ ]*\).*/\1 \2/p' "$1"; }
# Succeeds when both files hold the same steps with losses within 1e-5 relative.
same_losses() {
  awk 'NR == FNR { want[$1] = $2; n++; next }
       { m++; d = $2 - want[$1]; if (d < 0) d = -d; w = want[$1] < 0 ? -want[$1] : want[$1]
         if (!($1 in want) || d > 1e-5 * w) {
           bad = 1; print "  step " $1 ": " $2 " vs " want[$1] } }
       END { exit (bad || m != n || n == 0) }' "$2" "$1"
}

netns_up 2
# Starts the 4 ranks (rank r on node r / node_size); each writes out<r>, err<r> and, when it
# has ended, end<r> (the time in ms).
launch() {
  local timeout_ms=$1
  shift
  for ((r = 0; r < np; r++)); do
    (
      netns_exec $((r / node_size)) env RANK=$r WORLD_SIZE=$np MASTER_ADDR="$(netns_addr 0)" \
        MASTER_PORT=29500 FSDP_TIMEOUT_MS="$timeout_ms" FSDP_GLOO_DIRECT=0 timeout 120 \
        "$exe" "${model[@]}" --backend gloo --batch 1 --sharding HYBRID_SHARD \
        --node-size $node_size "$@" >"$dir/out$r" 2>"$dir/err$r" || true
      now_ms >"$dir/end$r"
    ) &
  done
}
link_bytes() {
  ip -n "$(netns_name 1)" -s -j link show eth0 | sed -n 's/.*"tx":{"bytes":\([0-9]*\).*/\1/p'
}

if [ "$mode" = losses ]; then
  steps=4
  before=$(link_bytes)
  launch 60000 --steps $steps
  wait
  after=$(link_bytes)
  for ((r = 0; r < np; r++)); do
    grep -q "train_gpt: error" "$dir/err$r" && { echo "FAIL: rank $r:"; cat "$dir/err$r"; exit 1; }
  done
  losses "$dir/out0" >"$dir/hybrid"
  timeout 120 "$exe" "${model[@]}" --backend threads --ranks $np --batch 1 \
    --sharding HYBRID_SHARD --node-size $node_size --steps $steps >"$dir/threads.out"
  timeout 120 "$exe" "${model[@]}" --backend threads --ranks 1 --batch $np --sharding none \
    --steps $steps >"$dir/one.out"
  losses "$dir/threads.out" >"$dir/threads"
  losses "$dir/one.out" >"$dir/one"
  echo "HYBRID_SHARD on 2 nodes x 2 ranks (gloo over the link): $(tr '\n' ' ' <"$dir/hybrid")"
  echo "node 1 sent $((after - before)) bytes over its link"
  failures=0
  [ "$(wc -l <"$dir/hybrid")" = $steps ] || { echo "FAIL: $steps steps expected"; failures=1; }
  same_losses "$dir/hybrid" "$dir/threads" ||
    { echo "FAIL: losses differ from HYBRID_SHARD on thread ranks"; failures=1; }
  same_losses "$dir/hybrid" "$dir/one" ||
    { echo "FAIL: losses differ from one unsharded rank"; failures=1; }
  # The replicate group's gradients (and the world's collectives) cross the link each step.
  [ $((after - before)) -gt 100000 ] ||
    { echo "FAIL: node 1's link carried too little"; failures=1; }
  [ "$failures" = 0 ] && echo "ok: the same losses as on thread ranks and as one unsharded rank"
  exit "$failures"
fi

[ "$mode" = cut ] || { echo "usage: hybrid_nodes.sh losses|cut TRAIN_GPT FIXTURE_DIR" >&2; exit 2; }
timeout_ms=3000
launch $timeout_ms --steps 100000
for ((waited = 0; ; waited++)); do
  grep -q "^step 1 " "$dir/out0" 2>/dev/null && break
  if [ "$waited" -ge 900 ] || [ -f "$dir/end0" ]; then
    echo "FAIL: step 1 was not reached within 90 s"
    tail -n 3 "$dir"/err*
    exit 1
  fi
  sleep 0.1
done
cut_at=$(now_ms)
netns_cut 1
echo "node 1 (ranks 2, 3) cut off after step 1"
wait
failures=0 named=0 latest=0
for ((r = 0; r < np; r++)); do
  line=$(grep "train_gpt: error" "$dir/err$r" | tail -n 1 || true)
  ended=$(($(cat "$dir/end$r") - cut_at))
  [ "$ended" -gt "$latest" ] && latest=$ended
  echo "== rank $r ended after $ended ms: ${line:0:600}"
  collective='(all_gather|reduce_scatter|all_reduce|broadcast|barrier)\('
  if ! [[ "$line" =~ $collective.*waiting\ for\ rank\(s\)\ [0-9] ]]; then
    echo "FAIL: rank $r did not end with an error naming the collective and a rank"
    failures=$((failures + 1))
  fi
  # FSDP's own context names this rank by its world rank, not its place in the shard group.
  unit_rank="FSDP unit '[^']*' on rank ([0-9]+)"
  if [[ "$line" =~ $unit_rank ]] && [ "${BASH_REMATCH[1]}" != "$r" ]; then
    echo "FAIL: rank $r calls itself rank ${BASH_REMATCH[1]}"
    failures=$((failures + 1))
  fi
  # The world ranks it names: "(world rank(s) ...)" in a subgroup, else the ranks themselves.
  names='.*waiting for rank(s) \([0-9]\+\(, [0-9]\+\)*\)\( (world ranks\? \([0-9, ]*\))\)\?.*'
  peers=$(sed -n "s/$names/\\1|\\4/p" <<<"$line" | tr -d ' ')
  world=${peers#*|}
  [ -n "$world" ] || world=${peers%|*}
  [ "$r" -lt $node_size ] && [[ ",$world," =~ ,[23], ]] && named=1
done
if [ "$named" = 0 ]; then
  echo "FAIL: no rank of node 0 named a rank of node 1"
  failures=$((failures + 1))
fi
# Each rank ends at its error (gloo has no MPI_Finalize to bound): the last within the timeout.
if [ "$latest" -gt $((timeout_ms + 1000)) ]; then
  echo "FAIL: the last rank ended $latest ms after the cut (timeout $timeout_ms ms)"
  failures=$((failures + 1))
fi
echo "the job ended $latest ms after the cut (timeout $timeout_ms ms)"
[ "$failures" = 0 ]
