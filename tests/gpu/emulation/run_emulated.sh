#!/bin/sh
# Runs a program on the emulated CUDA device: the emulated libraries' folder (tests/gpu/
# emulation in the build) first on LD_LIBRARY_PATH, ahead of whatever meson puts there (it may
# prepend the real kernels' folder for a program linking them).
# Usage: run_emulated.sh EMULATED_LIBS PROGRAM [ARGS...]
libs=$1
shift
LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$@"
