// One entry point for a program that runs as a data-parallel job however it was started: by a
// launcher (mpirun, or one process per rank with torchrun's RANK/WORLD_SIZE) or as one plain
// process that runs its ranks as threads. The body is written once, per rank, against the group.
#pragma once

#include <functional>
#include <memory>

#include "comm/process_group.h"
#include "comm/threads/run_ranks.h"

namespace fsdp::comm {

// True when a launcher started this process as one rank of a job: under mpirun, or with
// WORLD_SIZE set (torchrun's variables).
bool started_by_launcher();

// Started by a launcher: runs `body` once, here, with init_from_env()'s group (mpi under mpirun,
// gloo with RANK/WORLD_SIZE, or FSDP_BACKEND's). Otherwise: runs it on `thread_ranks` threads of
// this process, each with its threads-backend group (run_ranks, with its errors and `options`).
void launch(int thread_ranks, const std::function<void(std::shared_ptr<ProcessGroup>)>& body,
            ThreadsOptions options = {});

}  // namespace fsdp::comm
