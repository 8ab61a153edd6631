// Internal: the backends built into the library, as one ordered table (NCCL's ncclTransports[]
// is the model): each folder's registration function, its name, and what to tell a user who asks
// for it in a build that left it out. registry.cpp walks the table; the folders define their
// register_*_backend().
#pragma once

#include <span>

namespace fsdp::comm {

void register_fake_backend();
void register_threads_backend();
void register_mpi_backend();
void register_gloo_backend();
void register_nccl_backend();

struct BuiltinBackend {
  const char* name;
  void (*register_backend)();  // null: this build left the backend out
  const char* how_to_enable;   // for a backend left out ("" for one always built)
};

// In the order available_backends() lists them.
std::span<const BuiltinBackend> builtin_backends();

}  // namespace fsdp::comm
