#!/bin/sh
# fsdp-cpp as a Meson subproject of an outside project (tests/install/subproject/): the project's
# subprojects/fsdp-cpp points at this source tree; `dependency('fsdp-cpp')` finds the
# dependency fsdp-cpp overrides; the consumer (tests/install/consumer.cpp) and
# examples/fsdp_minimal.cpp are built and run (fsdp_minimal on 2 thread ranks: its loss falls).
# A second build of the library's layers (without tests, benchmarks or examples): skipped (77)
# unless FSDP_TEST_SUBPROJECT=1. With WORK_DIR the outside project is kept there, so that a
# second run rebuilds only what changed; without it, in a temporary directory.
#   subproject_consumer.sh SOURCE_DIR [WORK_DIR]
set -eu
src=$(readlink -f "$1")
if [ "${FSDP_TEST_SUBPROJECT:-0}" != 1 ]; then
  echo "SKIP: set FSDP_TEST_SUBPROJECT=1 to build fsdp-cpp as a subproject (a second build)"
  exit 77
fi
if [ -n "${2:-}" ]; then
  work=$2
  mkdir -p "$work"
else
  work=$(mktemp -d "${TMPDIR:-/tmp}/fsdp-subproject.XXXXXX")
  trap 'rm -rf "$work"' EXIT
fi
cp "$src/tests/install/subproject/meson.build" "$src/tests/install/consumer.cpp" \
  "$src/examples/fsdp_minimal.cpp" "$work/"
mkdir -p "$work/subprojects"
ln -sfn "$src" "$work/subprojects/fsdp-cpp"
# ccache (when meson finds it) hits across work directories: paths relative to the work dir.
export CCACHE_BASEDIR="$work" CCACHE_NOHASHDIR=true
if [ ! -f "$work/build/build.ninja" ]; then
  meson setup "$work/build" "$work" >"$work/setup.log" 2>&1 ||
    { tail -n 20 "$work/setup.log"; exit 1; }
fi
ninja -C "$work/build" consumer fsdp_minimal >"$work/build.log" 2>&1 ||
  { tail -n 20 "$work/build.log"; exit 1; }
"$work/build/consumer" | tee "$work/out"
grep -qx "consumer ok" "$work/out"
"$work/build/fsdp_minimal" 2 >"$work/fsdp_minimal.out"
"$src/tests/install/loss_falls.sh" "$work/fsdp_minimal.out" "fsdp_minimal as a subproject"
echo "fsdp-cpp as a subproject: consumer and fsdp_minimal built and ran"
