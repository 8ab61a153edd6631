#!/bin/sh
# fsdp-cpp as a Meson subproject of an outside project (tests/install/subproject/): the project's
# subprojects/fsdp-cpp points at this source tree; `dependency('fsdp-cpp')` finds the
# dependency fsdp-cpp overrides; the consumer (tests/install/consumer.cpp) is built and run.
# A full second build of the library: skipped (77) unless FSDP_TEST_SUBPROJECT=1.
#   subproject_consumer.sh SOURCE_DIR
set -eu
src=$(readlink -f "$1")
if [ "${FSDP_TEST_SUBPROJECT:-0}" != 1 ]; then
  echo "SKIP: set FSDP_TEST_SUBPROJECT=1 to build fsdp-cpp as a subproject (a second full build)"
  exit 77
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/fsdp-subproject.XXXXXX")
trap 'rm -rf "$work"' EXIT
cp "$src/tests/install/subproject/meson.build" "$src/tests/install/consumer.cpp" "$work/"
mkdir "$work/subprojects"
ln -s "$src" "$work/subprojects/fsdp-cpp"
meson setup "$work/build" "$work" >"$work/setup.log" 2>&1 ||
  { tail -n 20 "$work/setup.log"; exit 1; }
ninja -C "$work/build" consumer >"$work/build.log" 2>&1 || { tail -n 20 "$work/build.log"; exit 1; }
"$work/build/consumer" | tee "$work/out"
grep -qx "consumer ok" "$work/out"
echo "fsdp-cpp as a subproject: consumer built and ran"
