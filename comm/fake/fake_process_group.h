// FakeProcessGroup: a group of any rank and size that never communicates (PyTorch's
// DummyProcessGroup). FSDP's construction and sharding logic can run as "rank 3 of 8" without any
// peer. At size 1 every collective is the identity (a copy where input and output differ, queued
// on the collective's stream for accelerator buffers); at size > 1 every collective throws
// UnsupportedCollectiveError naming the collective, rank and size.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/process_group.h"

namespace fsdp::comm {

class FakeProcessGroup final : public ProcessGroup {
 public:
  FakeProcessGroup(int rank, int size);
  ~FakeProcessGroup() override;
  std::string backend_name() const override { return "fake"; }

 protected:
  void execute(const Collective& c) override;
  std::shared_ptr<Work> execute_async(const Collective& c) override;
  void check_supported(const Collective& c) const override;
  std::shared_ptr<ProcessGroup> make_subgroup(const std::vector<int>& ranks, int new_rank,
                                              int call_index) override;
};

}  // namespace fsdp::comm
