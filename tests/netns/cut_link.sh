#!/bin/sh
# Faults across hosts: NP ranks, each in its own network namespace (netns_lib.sh), run
# netns_rank (all_reduce in a loop); once all are ready, the last rank's host gets FAULT:
#   cut   its link goes down (default): every rank ends with a timeout naming a peer (the ranks
#         still connected name the cut rank)
#   stop  the rank is frozen (SIGSTOP): the others end with a timeout naming it
#   kill  the rank dies (SIGKILL, gloo only: mpirun ends an MPI job itself when a rank dies): the
#         others end with an error naming it, when they notice or at the timeout
# in every case within the configured timeout, and the whole job ends: no hang.
#   cut_link.sh gloo|mpi NP NETNS_RANK_EXE [cut|stop|kill]
# Bounds: FSDP_TIMEOUT_MS=3000; each rank is killed after 60 s; the ranks must all have ended
# within 2 x the timeout + 10 s of the cut (the second timeout: the mpi backend gives MPI_Finalize
# one timeout before it ends the process).
set -u
backend=$1 np=$2 exe=$3 fault=${4:-cut}
here=$(dirname "$(readlink -f "$0")")
. "$here/netns_lib.sh"
dir=$(mktemp -d "${TMPDIR:-/tmp}/fsdp-netns.XXXXXX") || exit 1
launcher_pid=""
cleanup() {
  [ -n "$launcher_pid" ] && kill "$launcher_pid" 2>/dev/null
  netns_cleanup
  rm -rf "$dir"
}
trap cleanup EXIT
timeout_ms=3000
cut=$((np - 1))
if [ "$backend" = mpi ] && ! command -v mpirun >/dev/null; then
  echo "SKIP: mpirun not installed"
  exit 77
fi
netns_up "$np"

# The environment of rank R, run on host R.
rank_cmd() {
  echo "ip netns exec $(netns_name "$1") env FSDP_BACKEND=$backend FSDP_TIMEOUT_MS=$timeout_ms FSDP_GLOO_DIRECT=0 \
MASTER_ADDR=$(netns_addr 0) MASTER_PORT=29500 timeout 60 $exe"
}

pids=""
if [ "$backend" = gloo ]; then
  r=0
  while [ "$r" -lt "$np" ]; do
    env RANK=$r WORLD_SIZE=$np sh -c "exec $(rank_cmd "$r")" >"$dir/out$r" 2>"$dir/err$r" &
    pids="$pids $!"
    r=$((r + 1))
  done
else
  # mpirun starts every rank on this machine; each rank then enters its host's namespace. Data
  # goes through the TCP BTL on the hosts' data addresses (no shared memory, no direct reads);
  # PMIx and ORTE talk over the management network.
  netns_mgmt_up
  cat >"$dir/rank.sh" <<EOS
#!/bin/sh
r=\$OMPI_COMM_WORLD_RANK
exec ip netns exec ${NETNS_ID}h\$r env FSDP_BACKEND=mpi FSDP_TIMEOUT_MS=$timeout_ms \
FSDP_MPI_DIRECT=0 $exe >"$dir/out\$r" 2>"$dir/err\$r"
EOS
  chmod +x "$dir/rank.sh"
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    PMIX_MCA_ptl_tcp_if_include=10.78.0.0/24 PMIX_MCA_ptl_tcp_remote_connections=1 \
    timeout 90 mpirun --oversubscribe --bind-to none -np "$np" --mca btl tcp,self \
    --mca btl_tcp_if_include 10.77.0.0/24 --mca oob_tcp_if_include 10.78.0.0/24 \
    "$dir/rank.sh" >"$dir/mpirun.out" 2>&1 &
  launcher_pid=$!
  pids=$launcher_pid
fi

# Wait (up to 60 s) until every rank has finished its first all_reduce.
waited=0
while :; do
  ready=0
  r=0
  while [ "$r" -lt "$np" ]; do
    grep -q "ready" "$dir/out$r" 2>/dev/null && ready=$((ready + 1))
    r=$((r + 1))
  done
  [ "$ready" = "$np" ] && break
  if [ "$waited" -ge 600 ]; then
    echo "FAIL: only $ready of $np ranks got ready within 60 s"
    for f in "$dir"/err* "$dir"/mpirun.out; do [ -f "$f" ] && { echo "== $f"; cat "$f"; }; done
    exit 1
  fi
  sleep 0.1
  waited=$((waited + 1))
done
sleep 0.5
cut_at=$(date +%s%N)
victim=$(sed -n 's/.*ready (pid \([0-9]*\)).*/\1/p' "$dir/out$cut")
case "$fault" in
  cut) netns_cut "$cut" ;;
  stop) kill -STOP "$victim" ;;
  kill) kill -KILL "$victim" ;;
esac
echo "rank $cut at $(netns_addr "$cut"): $fault; waiting for the ranks"
if [ "$fault" = stop ] && [ "$backend" = gloo ]; then
  # Nobody else ends a frozen rank of a job without a launcher: once the others have ended, the
  # test does (its own process, by pid).
  for p in $pids; do
    [ "$p" = "$(echo $pids | cut -d' ' -f$((cut + 1)))" ] || wait "$p"
  done
  kill -KILL "$victim"
fi
for p in $pids; do wait "$p"; done
launcher_pid=""
ended_ms=$((($(date +%s%N) - cut_at) / 1000000))
bound_ms=$((2 * timeout_ms + 10000))

failures=0
named_victim=0
r=0
while [ "$r" -lt "$np" ]; do
  echo "== rank $r: $(cat "$dir/err$r" 2>/dev/null | head -c 600)"
  if [ "$r" = "$cut" ] && [ "$fault" != cut ]; then
    r=$((r + 1))
    continue  # frozen or killed: it says nothing
  fi
  if [ "$r" != "$cut" ]; then
    pattern="timed out after $timeout_ms ms.*waiting for rank(s) [0-9, ]*\\b$cut\\b"
  else
    pattern="timed out after $timeout_ms ms.*waiting for rank(s) [0-9]"
  fi
  # A killed rank is noticed at once by whoever reads from it first; that rank then closes its
  # connections, and a rank that was reading from it may report that one instead (a cascade:
  # gloo has no channel to say why a peer left). Each names a peer; one must name the killed rank.
  [ "$fault" = kill ] &&
    pattern="\\(timed out after $timeout_ms ms\\|failed after [0-9]* ms\\).*\
waiting for rank(s) [0-9]"
  [ "$fault" = kill ] && grep -q "waiting for rank(s) [0-9, ]*\\b$cut\\b" "$dir/err$r" &&
    named_victim=1
  if ! grep -q "^rank $r: error after .*$pattern" "$dir/err$r" 2>/dev/null; then
    echo "FAIL: rank $r did not end with a timeout naming its peer ($pattern)"
    failures=$((failures + 1))
  fi
  r=$((r + 1))
done
if [ "$fault" = kill ] && [ "$named_victim" = 0 ]; then
  echo "FAIL: no rank named the killed rank $cut"
  failures=$((failures + 1))
fi
if [ "$ended_ms" -gt "$bound_ms" ]; then
  echo "FAIL: the job ended $ended_ms ms after the cut (bound $bound_ms ms)"
  failures=$((failures + 1))
fi
[ -f "$dir/mpirun.out" ] && sed -n '1,20p' "$dir/mpirun.out"
echo "the job ended $ended_ms ms after the cut (timeout $timeout_ms ms)"
[ "$failures" = 0 ]
