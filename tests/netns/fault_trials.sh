#!/bin/bash
# Faults across hosts, N trials of each fault x backend (fault_trial.sh: cut, stop, kill,
# storedies on gloo and mpi): prints one line per trial and, per fault, the passes out of N with
# the worst time from the fault to a survivor's error and to the end of the job.
#   fault_trials.sh N NETNS_RANK_EXE [NP] [LOG_DIR]
# NP: ranks (3 by default: a survivor that is not the victim's neighbour). LOG_DIR: where each
# trial's output is kept (a temporary directory by default, removed at the end). Needs root
# (network namespaces) and mpirun for the mpi rows; exits 77 when no trial could run, 1 when any
# trial failed. FSDP_FAULT_ONLY="mpi/kill gloo/cut" runs only those rows; with LOG_DIR, a failed
# trial's namespaces' files (each rank's stdout and stderr, mpirun's output) are kept beside its log.
set -euo pipefail
n=$1 exe=$2 np=${3:-3}
here=$(dirname "$(readlink -f "$0")")
if [ -n "${4:-}" ]; then
  logs=$4
  mkdir -p "$logs"
else
  logs=$(mktemp -d "${TMPDIR:-/tmp}/fsdp-fault-trials.XXXXXX")
  trap 'rm -rf "$logs"' EXIT
fi
summary=()
any_ran=0 any_failed=0
for backend in gloo mpi; do
  for fault in cut stop kill storedies; do
    if [ -n "${FSDP_FAULT_ONLY:-}" ] && [[ " $FSDP_FAULT_ONLY " != *" $backend/$fault "* ]]; then
      continue
    fi
    pass=0 ran=0 worst_error=0 worst_job=0
    for ((t = 1; t <= n; t++)); do
      log="$logs/$backend-$fault-$t.log"
      rc=0
      keep=()
      [ -n "${4:-}" ] && keep=(env FSDP_NETNS_KEEP_FAILED="$logs/$backend-$fault-$t.files")
      timeout 180 "${keep[@]}" "$here/fault_trial.sh" "$backend" "$np" "$exe" "$fault" >"$log" 2>&1 || rc=$?
      [ "$rc" = 77 ] && break
      ran=$((ran + 1))
      result=$(grep '^RESULT ' "$log" | tail -n 1 || true)
      echo "trial $t: ${result:-RESULT $backend $fault np$np fail (exit $rc, no result)}"
      [ "$rc" = 0 ] && [[ "$result" == *" pass "* ]] && pass=$((pass + 1))
      [ "$rc" = 0 ] || echo "  log: $log"
      e=$(sed -n 's/.*error_ms=\([0-9]*\).*/\1/p' <<<"$result")
      j=$(sed -n 's/.*job_ms=\([0-9]*\).*/\1/p' <<<"$result")
      [ -n "$e" ] && [ "$e" -gt "$worst_error" ] && worst_error=$e
      [ -n "$j" ] && [ "$j" -gt "$worst_job" ] && worst_job=$j
    done
    if [ "$ran" = 0 ]; then
      summary+=("$(printf '%-5s %-10s skipped' "$backend" "$fault")")
      continue
    fi
    any_ran=1
    [ "$pass" = "$ran" ] || any_failed=1
    summary+=("$(printf '%-5s %-10s %2d/%-2d pass  worst error %5d ms  worst job end %5d ms' \
      "$backend" "$fault" "$pass" "$ran" "$worst_error" "$worst_job")")
  done
done
echo "== $n trial(s) per fault, $np ranks, FSDP_TIMEOUT_MS=3000 (fault_trial.sh)"
printf '%s\n' "${summary[@]}"
[ "$any_ran" = 1 ] || exit 77
[ "$any_failed" = 0 ]
