// Debian 12's OpenBLAS (0.3.21) does not recognise some recent CPUs (on this project's VMs it
// reads "Intel(R) Xeon(R) Processor") and falls back to its Prescott (SSE3) kernels, whose sgemm
// is about 3x slower than the AVX-512 or AVX2 one (bench/fsdp/README.md). OpenBLAS chooses its
// kernels when the library loads, from OPENBLAS_CORETYPE, so a program can only fix the choice
// by running again with that variable set.
#pragma once

#include <optional>
#include <string>

namespace fsdp {

// The OpenBLAS core type to ask for instead of `chosen` on a CPU with these features; nothing
// when OpenBLAS's own choice is fine (it recognised the CPU, or the CPU has no AVX2).
std::optional<std::string> better_openblas_coretype(const std::string& chosen, bool avx512f,
                                                    bool avx2_fma);

// When OpenBLAS fell back to a generic core on a CPU with AVX2/AVX-512 and OPENBLAS_CORETYPE is
// unset, sets it and re-executes this program (its resolved path) with the same arguments; returns
// only when nothing needed to change (or the re-execution failed). FSDP_BLAS_AUTOSELECT=0 turns it
// off (another value is an EnvError). Call it first thing in main, before threads or MPI start.
void select_blas_kernels(char** argv);

// The number of threads OpenBLAS's routines use from now on. OpenBLAS reads OPENBLAS_NUM_THREADS
// only when it loads, before main: a program that takes a thread count calls this instead.
void set_blas_threads(int threads);

}  // namespace fsdp
