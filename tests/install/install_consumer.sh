#!/bin/sh
# fsdp-cpp consumed as an installed library: `meson install` of BUILD_DIR into a temporary
# destination (headers, libraries, pkg-config file), then two outside programs compiled from
# copies outside the source tree with nothing but `pkg-config fsdp-cpp` flags: consumer.cpp and
# examples/autowrap_transformer.cpp, unchanged; each linked against the shared library and
# against the static one, and run.
#   install_consumer.sh BUILD_DIR SOURCE_DIR [EXTRA_CXXFLAGS]
# EXTRA_CXXFLAGS: the sanitizer flags of a sanitized build (its consumers need its runtime).
set -eu
build=$1 src=$2 extra=${3:-}
dest=$(mktemp -d "${TMPDIR:-/tmp}/fsdp-install.XXXXXX")
trap 'rm -rf "$dest"' EXIT
meson install -C "$build" --no-rebuild --quiet --tags devel,runtime --destdir "$dest" >/dev/null
pc=$(find "$dest" -name fsdp-cpp.pc)
[ -n "$pc" ] || { echo "FAIL: no fsdp-cpp.pc installed"; exit 1; }
libdir=$(dirname "$(dirname "$pc")")
# The file as installed, its prefix moved to where the destination put it (a relocated install).
prefix=$(sed -n 's/^prefix=//p' "$pc")
mkdir "$dest/pc"
sed "s|^prefix=.*|prefix=$dest$prefix|" "$pc" >"$dest/pc/fsdp-cpp.pc"
export PKG_CONFIG_PATH="$dest/pc"
cflags=$(pkg-config --cflags fsdp-cpp)
libs=$(pkg-config --libs fsdp-cpp)
static_libs=$(pkg-config --static --libs fsdp-cpp | sed "s|-lfsdp-cpp|$libdir/libfsdp-cpp.a|")
echo "pkg-config fsdp-cpp: $cflags $libs"
mkdir "$dest/work"
cp "$src/tests/install/consumer.cpp" "$src/examples/autowrap_transformer.cpp" "$dest/work/"
cd "$dest/work"
for prog in consumer autowrap_transformer; do
  g++ -std=c++20 -O1 $extra $cflags "$prog.cpp" -o "$prog" $libs
  LD_LIBRARY_PATH="$libdir" "./$prog" >"$prog.out"
  g++ -std=c++20 -O1 $extra $cflags "$prog.cpp" -o "$prog-static" $static_libs
  "./$prog-static" >"$prog-static.out"
  cmp -s "$prog.out" "$prog-static.out" || { echo "FAIL: $prog: shared and static differ"; exit 1; }
  tail -n 1 "$prog.out"
done
grep -qx "consumer ok" consumer.out
grep -qx "13 units" autowrap_transformer.out
# The headers of the backends' libraries stay internal.
[ ! -e "$(dirname "$libdir")/include/fsdp-cpp/comm/mpi" ]
echo "installed fsdp-cpp: shared and static consumers built with pkg-config and ran"
