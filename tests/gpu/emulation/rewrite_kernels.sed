# core/cuda's .cu source for the host (meson.build, emu_cuda.h): the <<<grid, threads, shared,
# stream>>> launches become emulated_launch calls; <mma.h> and the check macro come from
# emu_cuda.h, included before.
s/([A-Za-z_]+)<<<([^>]*)>>>\(/emulated_launch(\1, \2, /
s|#include <mma.h>||
s|#include "core/cuda/cuda_check.h"||
