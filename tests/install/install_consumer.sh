#!/bin/sh
# fsdp-cpp consumed as an installed library: `meson install` of BUILD_DIR into a temporary
# destination (headers, libraries, pkg-config file), then three outside programs compiled from
# copies outside the source tree with nothing but `pkg-config fsdp-cpp` flags: consumer.cpp,
# examples/autowrap_transformer.cpp and examples/fsdp_minimal.cpp, unchanged; each linked against
# the shared library and against the static one, and run (fsdp_minimal on 2 thread ranks, and
# under `MPIRUN -np 2` when given), checking that fsdp_minimal's loss falls.
#   install_consumer.sh BUILD_DIR SOURCE_DIR [EXTRA_CXXFLAGS [MPIRUN]]
# EXTRA_CXXFLAGS: the sanitizer flags of a sanitized build (its consumers need its runtime).
# MPIRUN: mpirun's path when the library was built with the MPI backend; empty: no MPI run.
set -eu
build=$1 src=$2 extra=${3:-} mpirun=${4:-}
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
cp "$src/tests/install/consumer.cpp" "$src/examples/autowrap_transformer.cpp" \
  "$src/examples/fsdp_minimal.cpp" "$dest/work/"
cd "$dest/work"
for prog in consumer autowrap_transformer fsdp_minimal; do
  g++ -std=c++20 -O1 $extra $cflags "$prog.cpp" -o "$prog" $libs
  LD_LIBRARY_PATH="$libdir" "./$prog" >"$prog.out"
  g++ -std=c++20 -O1 $extra $cflags "$prog.cpp" -o "$prog-static" $static_libs
  "./$prog-static" >"$prog-static.out"
  cmp -s "$prog.out" "$prog-static.out" || { echo "FAIL: $prog: shared and static differ"; exit 1; }
  tail -n 1 "$prog.out"
done
grep -qx "consumer ok" consumer.out
grep -qx "13 units" autowrap_transformer.out
"$src/tests/install/loss_falls.sh" fsdp_minimal.out "fsdp_minimal, 2 thread ranks"
if [ -n "$mpirun" ]; then
  # As root in a container, and with more ranks than cores (tests/comm/meson.build's settings).
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
    OMPI_MCA_btl_vader_single_copy_mechanism=none LD_LIBRARY_PATH="$libdir" \
    "$mpirun" -np 2 ./fsdp_minimal >fsdp_minimal-mpi.out
  "$src/tests/install/loss_falls.sh" fsdp_minimal-mpi.out "fsdp_minimal, mpirun -np 2"
fi
# The installed headers are the public list (the staged tree's list in BUILD_DIR) and nothing
# else: no internal header (runtime, scheduler, kernels, the backends' own) is installed.
include=$(pkg-config --variable=includedir fsdp-cpp)
(cd "$include" && find . -name '*.h' | sed 's|^\./||' | sort) >"$dest/installed.txt"
sed -n 's/^#include <\(.*\)>$/\1/p' "$build/fsdp_public_headers.h" | sort >"$dest/public.txt"
if ! cmp -s "$dest/installed.txt" "$dest/public.txt"; then
  echo "FAIL: the installed headers differ from the public list (< installed, > public):"
  diff "$dest/installed.txt" "$dest/public.txt" | grep '^[<>]'
  exit 1
fi
echo "installed headers: the $(wc -l <"$dest/public.txt") public headers, nothing else"
echo "installed fsdp-cpp: shared and static consumers built with pkg-config and ran" \
  "(fsdp_minimal on thread ranks${mpirun:+ and under mpirun})"
