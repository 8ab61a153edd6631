#!/bin/sh
# shellcheck disable=SC2086,SC2317  # $model, $plain: word lists; cleanup: run by trap
# train_gpt under mpirun, on the GPT fixture (tests/fixtures/gpt: L2 D32 H4 T16, 4 sequences per
# step):  run_train_gpt.sh MODE NP TRAIN_GPT FIXTURE_DIR
#   mpi, gloo   NP ranks under mpirun print the per-step losses of `--backend threads --ranks NP`
#               and of one rank with NP x the batch (--sharding none), within 1e-5 relative, for
#               a few strategies and both optimizers.
#   mpi-kill    rank 1 is killed (SIGKILL) after step 2 was printed: the job ends non-zero within
#               the timeout and its stderr names rank 1 (mpirun's report of the dead process).
#   mpi-stop, gloo-stop
#               rank 1 stops (SIGSTOP) after step 2: the other ranks' collectives time out
#               (FSDP_TIMEOUT_MS), their error names rank 1, and the job ends non-zero.
#   mpi-resume, gloo-resume
#               for each strategy, 6 steps in one job equal 3 steps + save + a resumed job of 3
#               (--checkpoint-dir, --resume): the same printed losses and byte-identical final
#               checkpoints (model and optimizer shards); the step-3 checkpoint resumed on 1 and
#               on 4 (NP 2) or 2 thread ranks gives the job's losses within 1e-5 relative.
# Exits 77 (skipped) when mpirun or the backend is absent. Every launch is bounded by `timeout`.
set -u
mode=$1 np=$2 exe=$3 fixtures=$4
backend=${mode%%-*}

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
command -v mpirun >/dev/null 2>&1 || { echo "skip: no mpirun"; exit 77; }
[ -x "$exe" ] || { echo "FAIL: $exe is not an executable (build train_gpt)"; exit 1; }

dir=$(mktemp -d "${TMPDIR:-/tmp}/fsdp-train-gpt.XXXXXX") || exit 1
job=""
cleanup() {
  [ -n "$job" ] && kill -KILL "$job" 2>/dev/null
  for pid in $(job_pids any); do kill -KILL "$pid" 2>/dev/null; done
  rm -rf "$dir"
}
trap cleanup EXIT
tag="$$-$(date +%s%N)"  # marks this script's ranks among other jobs' processes

base_model="--layers 2 --d-model 32 --heads 4 --seq 16 --data $fixtures/data.txt"
model="$base_model --load $fixtures/init.safetensors"
# A resumed job takes its weights from the checkpoint (--load with --resume is refused).
model_for() { case " $* " in *" --resume "*) echo "$base_model" ;; *) echo "$model" ;; esac; }
global_batch=4
[ $((global_batch % np)) -eq 0 ] || { echo "FAIL: np $np does not divide $global_batch"; exit 1; }
batch=$((global_batch / np))
limit=120                # seconds for one launch
comm_timeout_ms=300000   # the comm layer's default

# Launches NP ranks of train_gpt on $backend: launch OUT ERR [train_gpt flags...]
launch() {
  out=$1 err=$2
  shift 2
  set -- "$exe" $(model_for "$@") --backend "$backend" --batch "$batch" "$@"
  store="$dir/store.$(date +%s%N)"
  mkdir "$store"
  # gloo's network thread needs a core beside the caller's (comm/README.md): unbound ranks.
  # FSDP_RANK_ENV: VAR=value words set in the ranks only, not in mpirun (.ci/sanitize.sh).
  for kv in ${FSDP_RANK_ENV:-}; do set -- -x "$kv" "$@"; done
  FSDP_STORE_PATH=$store FSDP_TEST_JOB=$tag FSDP_TIMEOUT_MS=$comm_timeout_ms timeout "$limit" \
    mpirun --oversubscribe --bind-to none -np "$np" -x FSDP_STORE_PATH -x FSDP_TEST_JOB \
    -x FSDP_TIMEOUT_MS "$@" >"$out" 2>"$err"
}

# The pids of this script's train_gpt processes of rank $1 (any: every rank).
job_pids() {
  for p in /proc/[0-9]*; do
    [ "$(cat "$p/comm" 2>/dev/null)" = train_gpt ] || continue
    env=$({ tr '\0' '\n' <"$p/environ"; } 2>/dev/null) || continue  # gone, or a zombie
    printf '%s\n' "$env" | grep -qx "FSDP_TEST_JOB=$tag" || continue
    [ "$1" = any ] || printf '%s\n' "$env" | grep -qx "OMPI_COMM_WORLD_RANK=$1" || continue
    echo "${p#/proc/}"
  done
}

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

fail=0
check_losses() {  # NAME [flags shared by every run...]
  name=$1
  shift
  if ! launch "$dir/job.out" "$dir/job.err" "$@"; then
    if grep -q "was not built" "$dir/job.err"; then
      echo "skip: $(grep -m1 'was not built' "$dir/job.err")"
      exit 77
    fi
    echo "FAIL $name: mpirun -np $np exited non-zero"
    cat "$dir/job.out" "$dir/job.err"
    fail=1
    return
  fi
  losses "$dir/job.out" >"$dir/job.losses"
  timeout "$limit" "$exe" $model --backend threads --ranks "$np" --batch "$batch" "$@" \
    >"$dir/threads.out" 2>&1 || { echo "FAIL $name: the threads run failed"; fail=1; }
  # One rank, the whole global batch, the plain model: the flags that shard are dropped.
  plain=""
  while [ $# -gt 0 ]; do
    case $1 in
    --sharding | --node-size | --backward-prefetch) shift ;;
    --use-orig-params | --forward-prefetch) ;;
    *) plain="$plain $1" ;;
    esac
    shift
  done
  timeout "$limit" "$exe" $model --backend threads --ranks 1 --batch "$global_batch" \
    --sharding none $plain >"$dir/plain.out" 2>&1 ||
    { echo "FAIL $name: the one-rank run failed"; fail=1; }
  for ref in threads plain; do
    losses "$dir/$ref.out" >"$dir/$ref.losses"
    if same_losses "$dir/job.losses" "$dir/$ref.losses" >"$dir/diff"; then
      echo "ok   $name: $backend np $np = $ref ($(wc -l <"$dir/job.losses") steps)"
    else
      echo "FAIL $name: $backend np $np != $ref"
      cat "$dir/diff"
      fail=1
    fi
  done
}

# Starts a long job, waits for step 2, sends SIG to rank 1 and waits for the job's end.
fault() {  # SIG
  comm_timeout_ms=5000
  limit=60
  launch "$dir/job.out" "$dir/job.err" --steps 1000000 --optimizer sgd --lr 0.1 &
  job=$!
  tries=0
  until grep -q "^step 2 loss" "$dir/job.out" 2>/dev/null; do
    if ! kill -0 "$job" 2>/dev/null || [ $tries -ge 600 ]; then
      if grep -q "was not built" "$dir/job.err"; then
        echo "skip: $(grep -m1 'was not built' "$dir/job.err")"
        exit 77
      fi
      echo "FAIL: the job did not reach step 2"
      cat "$dir/job.out" "$dir/job.err"
      exit 1
    fi
    tries=$((tries + 1))
    sleep 0.1
  done
  victim=$(job_pids 1)
  [ -n "$victim" ] || { echo "FAIL: rank 1's process not found"; exit 1; }
  kill -s "$1" "$victim"
  wait "$job"
  rc=$?
  job=""
  echo "job exit status $rc after SIG$1 to rank 1 (pid $victim)"
  if [ $rc -eq 124 ]; then
    echo "FAIL: the job did not end within $limit s (the comm timeout is $comm_timeout_ms ms)"
    fail=1
  elif [ $rc -eq 0 ]; then
    echo "FAIL: the job exited 0"
    fail=1
  fi
}

# Launches under mpirun, or skips (77) when the backend was not built: must_launch NAME OUT ...
must_launch() {
  name=$1 out=$2
  shift 2
  launch "$out" "$out.err" "$@" && return 0
  if grep -q "was not built" "$out.err"; then
    echo "skip: $(grep -m1 'was not built' "$out.err")"
    exit 77
  fi
  echo "FAIL $name: mpirun -np $np exited non-zero"
  cat "$out" "$out.err"
  fail=1
  return 1
}

# 6 steps straight == 3 steps, save, resume, 3 steps; then the step-3 checkpoint at other world
# sizes (thread ranks, the same global batch): check_resume NAME [train_gpt flags...]
check_resume() {
  name=$1
  shift
  r="$dir/resume.$(date +%s%N)"
  mkdir -p "$r"
  must_launch "$name" "$r/straight.out" --steps 6 --checkpoint-dir "$r/straight" "$@" || return
  must_launch "$name" "$r/head.out" --steps 3 --checkpoint-dir "$r/resumed" "$@" || return
  mkdir "$r/other" && cp -r "$r/resumed/step-00000003" "$r/other/"
  must_launch "$name" "$r/tail.out" --steps 6 --checkpoint-dir "$r/resumed" \
    --resume "$r/resumed" "$@" || return
  losses "$r/straight.out" >"$r/straight.losses"
  { losses "$r/head.out"; losses "$r/tail.out"; } >"$r/resumed.losses"
  if [ "$(wc -l <"$r/straight.losses")" -eq 6 ] && cmp -s "$r/straight.losses" "$r/resumed.losses"
  then
    echo "ok   $name: $backend np $np, 6 steps = 3 + resume + 3 (identical losses)"
  else
    echo "FAIL $name: $backend np $np, resumed losses differ (straight | resumed)"
    paste "$r/straight.losses" "$r/resumed.losses"
    fail=1
  fi
  same_files=1
  for f in "$r/straight/step-00000006"/*; do
    cmp "$f" "$r/resumed/step-00000006/${f##*/}" || same_files=0
  done
  if [ $same_files -eq 1 ]; then
    echo "ok   $name: the step-6 checkpoints are byte-identical ($(find "$r/straight/step-00000006" \
      -type f | wc -l) files)"
  else
    echo "FAIL $name: the step-6 checkpoints differ"
    fail=1
  fi
  awk '$1 >= 3' "$r/straight.losses" >"$r/straight.tail"
  for ranks in 1 $((np == 2 ? 4 : 2)); do
    # The flags that need NP ranks are dropped (HYBRID's node size is recomputed).
    flags="" prev=""
    for a in "$@"; do
      [ "$a" = --node-size ] || [ "$prev" = --node-size ] || flags="$flags $a"
      prev=$a
    done
    timeout "$limit" "$exe" $base_model --backend threads --ranks $ranks \
      --batch $((global_batch / ranks)) --steps 6 --resume "$r/other" --allow-change world-size \
      $flags \
      >"$r/threads$ranks.out" 2>&1 || { echo "FAIL $name: resume on $ranks thread ranks failed"
      cat "$r/threads$ranks.out"; fail=1; continue; }
    losses "$r/threads$ranks.out" >"$r/threads$ranks.losses"
    if same_losses "$r/straight.tail" "$r/threads$ranks.losses" >"$r/diff"; then
      echo "ok   $name: saved at $backend np $np, resumed on $ranks thread rank(s): within 1e-5"
    else
      echo "FAIL $name: saved at $backend np $np, resumed on $ranks thread rank(s)"
      cat "$r/diff"
      fail=1
    fi
  done
}

case $mode in
mpi-resume | gloo-resume)
  check_resume "FULL_SHARD adamw" --optimizer adamw --lr 0.003
  check_resume "SHARD_GRAD_OP orig-params sgd" --optimizer sgd --lr 0.1 --sharding SHARD_GRAD_OP \
    --use-orig-params
  check_resume "NO_SHARD adamw" --optimizer adamw --lr 0.003 --sharding NO_SHARD
  check_resume "HYBRID_SHARD node 1 sgd" --optimizer sgd --lr 0.1 --sharding HYBRID_SHARD \
    --node-size 1
  check_resume "_HYBRID_SHARD_ZERO2 orig-params adamw" --optimizer adamw --lr 0.003 \
    --sharding _HYBRID_SHARD_ZERO2 --use-orig-params
  ;;
mpi | gloo)
  check_losses "FULL_SHARD sgd" --steps 8 --optimizer sgd --lr 0.1
  check_losses "SHARD_GRAD_OP orig-params post adamw" --steps 8 --optimizer adamw --lr 0.003 \
    --sharding SHARD_GRAD_OP --use-orig-params --backward-prefetch post
  if [ "$np" -eq 4 ]; then
    check_losses "HYBRID_SHARD node 2 forward-prefetch adamw" --steps 8 --optimizer adamw \
      --lr 0.003 --sharding HYBRID_SHARD --node-size 2 --forward-prefetch
  else
    check_losses "NO_SHARD sgd" --steps 8 --optimizer sgd --lr 0.1 --sharding NO_SHARD
  fi
  ;;
mpi-kill)
  fault KILL
  # mpirun ends the job and reports the process that died.
  if grep -q "process rank 1 with PID .* exited on signal 9" "$dir/job.err"; then
    echo "ok   stderr names rank 1: $(grep -m1 'process rank 1' "$dir/job.err")"
  else
    echo "FAIL: stderr does not name rank 1"
    cat "$dir/job.err"
    fail=1
  fi
  ;;
mpi-stop | gloo-stop)
  fault STOP
  # The survivor's comm layer names the rank that stopped answering.
  if grep -Eq "$backend rank 0/$np: .* waiting for rank\(s\) 1([^0-9]|$)" "$dir/job.err"; then
    echo "ok   stderr names rank 1: $(grep -m1 'waiting for rank' "$dir/job.err")"
  else
    echo "FAIL: rank 0's error does not name rank 1"
    cat "$dir/job.err"
    fail=1
  fi
  ;;
*)
  echo "usage: $0 mpi|gloo|mpi-kill|mpi-stop|gloo-stop|mpi-resume|gloo-resume NP TRAIN_GPT FIXTURE_DIR"
  exit 2
  ;;
esac
exit $fail
