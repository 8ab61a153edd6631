#!/usr/bin/env bash
# ASan + UBSan run of the test suites (issue 12), by hand or from `./run sanitize`: builds
# build-asan/ (-Db_sanitize=address,undefined) and runs the given meson suites there (default:
# all of them), each test stopping at its first report. Prints the failing tests and the first
# report line of each, and exits non-zero when there are any. Without suites named, then also
# .ci/sanitize_quick.sh with FSDP_TSAN_FSDP=1 (TSan over FSDP on fake_cuda ranks).
#   .ci/sanitize.sh [SUITE...]
# FSDP_ASAN_DIR overrides the build directory. Leaks inside third-party libraries (Open MPI and
# its PMIx/hwloc/libevent, gloo) are suppressed in .ci/lsan.supp, each with its reason; nothing
# of ours is. Not part of the 30-minute CI: a full ASan build and run takes longer on 2 cores.
set -euo pipefail
cd "$(dirname "$(readlink -f "$0")")/.."
dir=${FSDP_ASAN_DIR:-build-asan}
suites=("$@")
if [ ! -f "$dir/build.ninja" ]; then
  # b_lundef=false: the sanitizer runtimes resolve at load time.
  meson setup "$dir" -Db_sanitize=address,undefined -Db_lundef=false -Dnative_arch=false
fi
ninja -C "$dir"
# ASan's redzones make stack frames several times larger: tests/core/nn's forward through a
# 5 000-deep chain of Sequentials overflows the default 8 MiB stack under ASan only.
ulimit -s 65536 2>/dev/null || true
# halt_on_error: a UBSan report fails the test instead of scrolling by.
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
export LSAN_OPTIONS="suppressions=$(pwd)/.ci/lsan.supp:print_suppressions=0"
# train_gpt's MPI ranks (tests/examples/mpi/run_train_gpt.sh) keep Open MPI's plugins loaded through
# MPI_Finalize (.ci/keep_plugins.c; libasan first, as ASan requires of a preload list) and unwind
# malloc's callers fully (Open MPI's libraries have no frame pointers), so the leaks Open MPI leaves
# are named and suppressed, and one of ours still fails the test.
cc -shared -fPIC -O1 -o "$dir/keep_plugins.so" .ci/keep_plugins.c
export FSDP_RANK_ENV="LD_PRELOAD=$(cc -print-file-name=libasan.so):$(pwd)/$dir/keep_plugins.so LSAN_OPTIONS=$LSAN_OPTIONS:fast_unwind_on_malloc=0"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
args=()
for s in "${suites[@]}"; do args+=(--suite "$s"); done
rc=0
# Sanitized tests run several times slower: the timeouts are multiplied.
meson test -C "$dir" --no-rebuild --print-errorlogs --timeout-multiplier 4 "${args[@]}" || rc=$?
log="$dir/meson-logs/testlog.txt"
echo "== failing tests and their first sanitizer report"
grep -E "^ *[0-9]+/[0-9]+ .* (FAIL|TIMEOUT)" "$dir/meson-logs/testlog.txt" || true
grep -nE "runtime error:|ERROR: AddressSanitizer|ERROR: LeakSanitizer|SUMMARY: .*Sanitizer" "$log" |
  sort -t: -k2 -u | head -n 50 || true
# Without suites named, the whole of it: CI's quick set too, with TSan over FSDP on fake_cuda
# ranks, which CI leaves out for time (.ci/sanitize_quick.sh).
if ((${#suites[@]} == 0)); then
  FSDP_TSAN_FSDP=1 .ci/sanitize_quick.sh || rc=1
fi
exit $rc
