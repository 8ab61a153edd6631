// Internal: one rank of a threads-backend group. Collectives exchange buffer pointers through
// the shared ThreadsWorld and copy/reduce directly between the ranks' buffers: each rank moves its
// own share of the data, with two barriers per collective and no staging copies.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/process_group.h"
#include "comm/threads/threads_world.h"

namespace fsdp::comm {

class ThreadsProcessGroup final : public ProcessGroup {
 public:
  ThreadsProcessGroup(int rank, std::shared_ptr<ThreadsWorld> world);
  ~ThreadsProcessGroup() override;
  std::string backend_name() const override { return "threads"; }

  ThreadsWorld& world() { return *world_; }

 protected:
  void execute(const Collective& c) override;
  std::shared_ptr<ProcessGroup> make_subgroup(const std::vector<int>& ranks, int new_rank,
                                              int call_index) override;

 private:
  void sync(const Collective& c);
  void check_signatures(const Collective& c);

  std::shared_ptr<ThreadsWorld> world_;
};

}  // namespace fsdp::comm
