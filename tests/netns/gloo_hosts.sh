#!/bin/sh
# Gloo across hosts (issue 12, defect 10): two hosts on one switch (netns_lib.sh), rank 0 at
# 10.77.0.1 hosting the TCP store, rank 1 at 10.77.0.2; the collective matrix of test_comm_gloo
# must pass, once with each rank's address found from its route to MASTER_ADDR and once with the
# interface named (FSDP_GLOO_IFNAME, as PyTorch users set GLOO_SOCKET_IFNAME). Before the fix
# each rank advertised 127.0.0.1 and the peer's connect failed, after 5 timeouts (gloo waits 5x
# its timeout to connect); both are checked. Each run is bounded (60 s).
#   gloo_hosts.sh TEST_COMM_GLOO
set -u
exe=$1
here=$(dirname "$(readlink -f "$0")")
. "$here/netns_lib.sh"
dir=$(mktemp -d "${TMPDIR:-/tmp}/fsdp-netns.XXXXXX") || exit 1
trap 'netns_cleanup; rm -rf "$dir"' EXIT
netns_up 2
failures=0
for mode in route ifname; do
  extra=""
  [ "$mode" = ifname ] && extra="FSDP_GLOO_IFNAME=eth0"
  pids=""
  for r in 0 1; do
    netns_exec "$r" env RANK=$r WORLD_SIZE=2 MASTER_ADDR="$(netns_addr 0)" MASTER_PORT=29500 \
      FSDP_TIMEOUT_MS=10000 FSDP_GLOO_DIRECT=0 $extra timeout 60 "$exe" --run_test=collective_matrix \
      >"$dir/$mode$r" 2>&1 &
    pids="$pids $!"
  done
  r=0
  for p in $pids; do
    if ! wait "$p"; then
      echo "FAIL ($mode): rank $r:"
      tail -n 5 "$dir/$mode$r"
      failures=$((failures + 1))
    fi
    r=$((r + 1))
  done
  [ "$failures" = 0 ] && echo "gloo across two hosts ($mode): collective matrix passed"
done
# Ranks that advertise an address the peer cannot reach (127.0.0.1 on two hosts, as before the
# fix): each ends with an error within the timeout (3 s for the store, one fifth of it for gloo's
# connect, which waits 5 times its own timeout), not after 5 timeouts.
start=$(date +%s%N)
pids=""
for r in 0 1; do
  netns_exec "$r" env RANK=$r WORLD_SIZE=2 MASTER_ADDR="$(netns_addr 0)" MASTER_PORT=29501 \
    FSDP_TIMEOUT_MS=3000 FSDP_GLOO_HOSTNAME=127.0.0.1 timeout 60 "$exe" \
    --run_test=collective_matrix >"$dir/unreachable$r" 2>&1 &
  pids="$pids $!"
done
for p in $pids; do wait "$p"; done
elapsed_ms=$((($(date +%s%N) - start) / 1000000))
echo "unreachable peers: both ranks ended after $elapsed_ms ms (timeout 3000 ms)"
# Whichever rank connects first is refused at once; the other's connect times out.
if [ "$elapsed_ms" -gt 11000 ] ||
  ! grep -q "gloo rank 0/2: \(rendezvous through tcp store\|connecting\)" "$dir/unreachable0" ||
  ! grep -q "gloo rank 1/2: \(rendezvous through tcp store\|connecting\)" "$dir/unreachable1" ||
  ! cat "$dir/unreachable0" "$dir/unreachable1" |
  grep -q "connecting to the other ranks timed out after 3000 ms"; then
  echo "FAIL: unreachable peers:"
  grep -h "error" "$dir/unreachable0" "$dir/unreachable1"
  failures=$((failures + 1))
fi
# An interface this host does not have is named in the error, with the ones it has.
netns_exec 0 env RANK=0 WORLD_SIZE=1 FSDP_GLOO_IFNAME=wlan9 timeout 60 "$exe" \
  --run_test=collective_matrix >"$dir/bad" 2>&1
if ! grep -q "FSDP_GLOO_IFNAME='wlan9' is not a network interface of this host (it has: lo, eth0" \
  "$dir/bad"; then
  echo "FAIL: a missing interface is not named:"
  tail -n 5 "$dir/bad"
  failures=$((failures + 1))
fi
[ "$failures" = 0 ]
