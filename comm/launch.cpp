#include "comm/launch.h"

#include "comm/env.h"
#include "comm/registry.h"

namespace fsdp::comm {

bool started_by_launcher() {
  return env::under_mpirun() || env::world_size().has_value();
}

void launch(int thread_ranks, const std::function<void(std::shared_ptr<ProcessGroup>)>& body,
            ThreadsOptions options) {
  if (started_by_launcher())
    body(init_from_env());
  else
    run_ranks(thread_ranks, body, options);
}

}  // namespace fsdp::comm
