// Internal: one registration function per backend folder; registry.cpp calls those compiled in.
#pragma once

namespace fsdp::comm {

void register_fake_backend();
void register_threads_backend();
void register_mpi_backend();
void register_gloo_backend();
void register_nccl_backend();

}  // namespace fsdp::comm
