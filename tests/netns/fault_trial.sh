#!/bin/bash
# One trial of one fault across hosts: NP ranks, each in its own network namespace
# (netns_lib.sh), run netns_rank (all_reduce in a loop); once every rank is ready, FAULT strikes:
#   cut        the last rank's host loses its link (`ip link set <its switch port> down`): every
#              rank, the cut one included, ends with a timeout naming a peer; the connected ones
#              name the cut rank
#   stop       the last rank is frozen (SIGSTOP): the others end with a timeout naming it
#   kill       the last rank dies (SIGKILL): the others end with an error naming a peer, when they
#              notice or at the timeout (gloo has no channel to say why a peer left, so a rank may
#              name a survivor that gave up first); one of them names the killed rank. Under
#              mpirun the launcher ends the others (SIGCONT, SIGTERM, SIGKILL): each reports the
#              collective it was in and the ranks it was waiting for
#   storedies  the host of the store dies.
#              gloo: host 0, which runs rank 0 and the TCP store at MASTER_ADDR, loses power: its
#              link goes down, then its rank is killed (SIGKILL), so nothing it sends reaches
#              anyone; the others end with a timeout naming rank 0
#              mpi: MPI's store is mpirun's PMIx server (the ranks found each other through it),
#              so the launcher is what dies (SIGKILL): its ranks must not outlive it; each ends
#              with an error naming the collective it was in and the ranks it was waiting for
#   storedies_nohup  (mpi) as storedies, with a shell kept between mpirun and each rank, so no
#              SIGHUP (PR_SET_PDEATHSIG) tells a rank that mpirun died: only PMIx's lost
#              connection does, which Open MPI ends the rank for (comm/mpi/launcher_loss.h)
# Every survivor's last line on stderr about the collective must name it (all_reduce) and a rank,
# within the timeout (+1 s) of the fault, and the whole job must end within 2 x the timeout + 5 s
# (the mpi backend gives MPI_Finalize one timeout after a failure before it ends the process).
#   fault_trial.sh gloo|mpi NP NETNS_RANK_EXE cut|stop|kill|storedies|storedies_nohup
# Prints the ranks' errors and, last, one line:
#   RESULT <backend> <fault> np<NP> pass|fail error_ms=<latest error> job_ms=<job end>
# Exits 0 on pass, 1 on fail, 77 where namespaces (or mpirun, for mpi) are not available.
# FSDP_NETNS_KEEP=1 keeps the trial's files (each rank's out/err, mpirun.out);
# FSDP_NETNS_KEEP_FAILED=DIR copies them to DIR when the trial did not pass.
# Bounds: FSDP_TIMEOUT_MS=3000, every rank and mpirun under `timeout 60`/`timeout 90`.
set -euo pipefail
backend=$1 np=$2 exe=$3 fault=$4
rank_exec=exec  # the rank replaces rank.sh: mpirun is its parent
if [ "$backend/$fault" = mpi/storedies_nohup ]; then
  fault=storedies
  rank_exec=""
fi
here=$(dirname "$(readlink -f "$0")")
# shellcheck source-path=SCRIPTDIR source=netns_lib.sh
. "$here/netns_lib.sh"
case "$backend/$fault" in
  gloo/cut | gloo/stop | gloo/kill | gloo/storedies | mpi/cut | mpi/stop | mpi/kill | \
    mpi/storedies) ;;
  *)
    echo "usage: fault_trial.sh gloo|mpi NP NETNS_RANK_EXE cut|stop|kill|storedies|storedies_nohup" >&2
    exit 2
    ;;
esac
if [ "$backend" = mpi ] && ! command -v mpirun >/dev/null; then
  echo "SKIP: mpirun not installed"
  exit 77
fi
dir=$(mktemp -d "${TMPDIR:-/tmp}/fsdp-netns.XXXXXX")
launcher_pid=""
rank_pids=()
verdict=unfinished
cleanup() {
  [ -n "$launcher_pid" ] && kill -KILL "$launcher_pid" 2>/dev/null
  for p in "${rank_pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
  netns_cleanup || true
  if [ "$verdict" != pass ] && [ -n "${FSDP_NETNS_KEEP_FAILED:-}" ]; then
    cp -r "$dir" "$FSDP_NETNS_KEEP_FAILED" && echo "kept in $FSDP_NETNS_KEEP_FAILED"
  fi
  if [ -n "${FSDP_NETNS_KEEP:-}" ]; then echo "kept $dir"; else rm -rf "$dir"; fi
}
trap 'cleanup || true' EXIT
timeout_ms=3000
netns_up "$np"
now_ms() { echo $(($(date +%s%N) / 1000000)); }

if [ "$backend" = gloo ]; then
  for ((r = 0; r < np; r++)); do
    netns_exec "$r" env RANK="$r" WORLD_SIZE="$np" FSDP_BACKEND=gloo \
      FSDP_TIMEOUT_MS=$timeout_ms FSDP_GLOO_DIRECT=0 MASTER_ADDR="$(netns_addr 0)" \
      MASTER_PORT=29500 timeout 60 "$exe" >"$dir/out$r" 2>"$dir/err$r" &
    rank_pids+=($!)
  done
else
  # mpirun starts every rank on this machine; each rank then enters its host's namespace. Data
  # goes through the TCP BTL on the hosts' data addresses (no shared memory, no direct reads);
  # PMIx and ORTE talk over the management network (netns_mgmt_up).
  netns_mgmt_up
  cat >"$dir/rank.sh" <<EOS
#!/bin/sh
r=\$OMPI_COMM_WORLD_RANK
$rank_exec ip netns exec ${NETNS_ID}h\$r env FSDP_BACKEND=mpi FSDP_TIMEOUT_MS=$timeout_ms \
FSDP_MPI_DIRECT=0 $exe >"$dir/out\$r" 2>"$dir/err\$r"
EOS
  chmod +x "$dir/rank.sh"
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    PMIX_MCA_ptl_tcp_if_include=10.78.0.0/24 PMIX_MCA_ptl_tcp_remote_connections=1 \
    timeout 90 mpirun --oversubscribe --bind-to none -np "$np" --mca btl tcp,self \
    --mca btl_tcp_if_include 10.77.0.0/24 --mca oob_tcp_if_include 10.78.0.0/24 \
    "$dir/rank.sh" >"$dir/mpirun.out" 2>&1 &
  launcher_pid=$!
fi

# Wait (up to 60 s) until every rank has finished its first all_reduce.
for ((waited = 0; ; waited++)); do
  ready=$(cat "$dir"/out* 2>/dev/null | grep -c "ready" || true)
  [ "$ready" = "$np" ] && break
  if [ "$waited" -ge 600 ]; then
    echo "FAIL: only $ready of $np ranks got ready within 60 s"
    tail -n 5 "$dir"/err* "$dir"/mpirun.out 2>/dev/null || true
    echo "RESULT $backend $fault np$np fail error_ms=- job_ms=-"
    exit 1
  fi
  sleep 0.1
done
# The pids of the ranks themselves (under mpirun, launched through rank.sh).
pid_of() { sed -n 's/.*ready (pid \([0-9]*\)).*/\1/p' "$dir/out$1"; }
for ((r = 0; r < np; r++)); do rank_pids+=("$(pid_of "$r")"); done
sleep 0.5

victim=$((np - 1))
[ "$fault" = storedies ] && victim=0
fault_at=$(now_ms)
case "$fault" in
  cut) netns_cut "$victim" ;;
  stop) kill -STOP "$(pid_of "$victim")" ;;
  kill) kill -KILL "$(pid_of "$victim")" ;;
  storedies)
    if [ "$backend" = gloo ]; then
      netns_cut 0
      kill -KILL "$(pid_of 0)"
    else
      kill -KILL "$(pgrep -P "$launcher_pid" -x mpirun)"  # $launcher_pid is its `timeout`
    fi
    ;;
esac
echo "$backend, $np ranks: $fault (victim: $([ "$backend/$fault" = mpi/storedies ] &&
  echo mpirun || echo "rank $victim at $(netns_addr "$victim")"))"

# Every rank must end by itself within the bound (the frozen one excepted: nothing ends it but
# a launcher, and without one the test does, once the others have ended).
bound_ms=$((2 * timeout_ms + 5000))
frozen=-1
[ "$fault" = stop ] && frozen=$victim
ended=()  # when each rank was first seen gone, in ms after the fault
while :; do
  alive=0
  for ((r = 0; r < np; r++)); do
    [ "$r" = "$frozen" ] && continue
    p=$(pid_of "$r")
    if kill -0 "$p" 2>/dev/null && ! grep -q '^State:.*Z' "/proc/$p/status" 2>/dev/null; then
      alive=$((alive + 1))
    elif [ -z "${ended[$r]:-}" ]; then
      ended[r]=$(($(now_ms) - fault_at))
    fi
  done
  [ "$alive" = 0 ] && break
  [ $(($(now_ms) - fault_at)) -gt $((bound_ms + 20000)) ] && break
  sleep 0.05
done
# (mpirun may have ended the frozen rank already: then kill fails, which set -e must not see.)
[ "$frozen" -ge 0 ] && { kill -KILL "$(pid_of "$frozen")" 2>/dev/null || true; }
[ -n "$launcher_pid" ] && { wait "$launcher_pid" || true; }
for p in "${rank_pids[@]:0:$np}"; do wait "$p" 2>/dev/null || true; done
launcher_pid=""
job_ms=$(($(now_ms) - fault_at))

failures=0
error_ms=0
named_victim=0
survivors=0
for ((r = 0; r < np; r++)); do
  # netns_rank's "rank R: error ..." or, for a rank that mpirun ended, the mpi backend's report.
  line=$(grep "all_reduce(" "$dir/err$r" 2>/dev/null | tail -n 1 || true)
  echo "== rank $r: ${line:0:700}"
  # A frozen or killed rank says nothing; a host that died is not a survivor.
  [ "$r" = "$victim" ] && [ "$fault" != cut ] && [ "$backend/$fault" != mpi/storedies ] &&
    continue
  survivors=$((survivors + 1))
  if ! [[ "$line" =~ all_reduce\(.*(waiting\ for|exchanging\ with)\ rank\(s\)\ [0-9] ]]; then
    echo "FAIL: rank $r did not end with an error naming the collective and a rank"
    failures=$((failures + 1))
    continue
  fi
  [[ "$line" =~ (waiting\ for|exchanging\ with)\ rank\(s\)\ ([0-9]+,\ )*$victim([^0-9]|$) ]] &&
    named_victim=1
  if [ "$fault" = cut ] && [ "$r" != "$victim" ] && [[ ! "$line" =~ \
    waiting\ for\ rank\(s\)\ ([0-9]+,\ )*$victim([^0-9]|$) ]]; then
    echo "FAIL: rank $r did not name the cut rank $victim"
    failures=$((failures + 1))
  fi
  # When the error was caught (netns_rank's line), else when the rank ended (a signal's report).
  at=$(sed -n 's/.*(unix time \([0-9]*\) ms).*/\1/p' <<<"$line")
  e=${ended[$r]:-0}
  [ -n "$at" ] && e=$((at - fault_at))
  [ "$e" -gt "$error_ms" ] && error_ms=$e
done
if [ "$backend/$fault" != mpi/storedies ] && [ "$named_victim" = 0 ]; then
  echo "FAIL: no rank named rank $victim"
  failures=$((failures + 1))
fi
if [ "$error_ms" -gt $((timeout_ms + 1000)) ]; then
  echo "FAIL: an error came $error_ms ms after the fault (timeout $timeout_ms ms)"
  failures=$((failures + 1))
fi
if [ "$job_ms" -gt "$bound_ms" ]; then
  echo "FAIL: the job ended $job_ms ms after the fault (bound $bound_ms ms)"
  failures=$((failures + 1))
fi
[ -f "$dir/mpirun.out" ] && [ "$failures" != 0 ] && head -n 20 "$dir/mpirun.out"
echo "$survivors survivor(s); latest error $error_ms ms, job ended $job_ms ms after the fault" \
  "(timeout $timeout_ms ms)"
verdict=pass
[ "$failures" = 0 ] || verdict=fail
echo "RESULT $backend $fault np$np $verdict error_ms=$error_ms job_ms=$job_ms"
[ "$failures" = 0 ]
