#!/usr/bin/env bash
# ASan + UBSan run of the test suites (issue 12): builds build-asan/ with
# -Db_sanitize=address,undefined and runs the given meson suites there (default: tools policies
# comm), stopping each test at its first report. Usage: .ci/sanitize.sh [SUITE...]
# Prints the failing tests and exits non-zero when there are any.
set -euo pipefail
cd "$(dirname "$(readlink -f "$0")")/.."
dir=${FSDP_ASAN_DIR:-build-asan}
suites=("$@")
[ ${#suites[@]} -gt 0 ] || suites=(tools policies comm)
if [ ! -f "$dir/build.ninja" ]; then
  meson setup "$dir" -Db_sanitize=address,undefined -Db_lundef=false
fi
ninja -C "$dir"
# halt_on_error: a UBSan report fails the test instead of scrolling by.
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
args=()
for s in "${suites[@]}"; do args+=(--suite "$s"); done
rc=0
meson test -C "$dir" --no-rebuild --print-errorlogs "${args[@]}" || rc=$?
grep -E "^ *[0-9]+/[0-9]+ .* (FAIL|TIMEOUT)" "$dir/meson-logs/testlog.txt" || true
exit $rc
