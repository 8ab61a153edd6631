#include "comm/builtin_backends.h"

namespace fsdp::comm {

namespace {

// FSDP_COMM_HAVE_<BACKEND> comes from the backend folder's meson.build when it is compiled in.
#if FSDP_COMM_HAVE_MPI
constexpr void (*kMpi)() = register_mpi_backend;
#else
constexpr void (*kMpi)() = nullptr;
#endif
#if FSDP_COMM_HAVE_GLOO
constexpr void (*kGloo)() = register_gloo_backend;
#else
constexpr void (*kGloo)() = nullptr;
#endif
#if FSDP_COMM_HAVE_NCCL
constexpr void (*kNccl)() = register_nccl_backend;
#else
constexpr void (*kNccl)() = nullptr;
#endif

constexpr BuiltinBackend kBackends[] = {
    {"fake", register_fake_backend, ""},
    {"threads", register_threads_backend, ""},
    {"mpi", kMpi, "reconfigure with -Dmpi=enabled (needs OpenMPI: libopenmpi-dev)"},
    {"gloo", kGloo, "reconfigure with -Dgloo=enabled (needs libgloo-dev and cmake)"},
    {"nccl", kNccl,
     "reconfigure with -Dnccl=enabled (needs the CUDA toolkit with NCCL; set "
     "-Dnccl_home=PREFIX if it is not found)"},
};

}  // namespace

std::span<const BuiltinBackend> builtin_backends() {
  return kBackends;
}

}  // namespace fsdp::comm
