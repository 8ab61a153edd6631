#include "comm/fake/fake_process_group.h"

#include <fmt/format.h>

#include <cstring>

#include "comm/builtin_backends.h"
#include "comm/errors.h"
#include "comm/registry.h"
#include "core/device_copy.h"

namespace fsdp::comm {

FakeProcessGroup::FakeProcessGroup(int rank, int size) : ProcessGroup(rank, size) {}

FakeProcessGroup::~FakeProcessGroup() {
  shutdown_executor();
}

void FakeProcessGroup::check_supported(const Collective&) const {}  // any device: no data moves

void FakeProcessGroup::execute(const Collective& c) {
  if (size() > 1)
    throw UnsupportedCollectiveError(fmt::format(
        "fake process group cannot run {} with size {} (rank {}): it does not communicate; use "
        "the threads, mpi, gloo or nccl backend for multi-rank collectives ({})",
        collective_name(c.kind), size(), rank(), describe(c)));
  // Size 1: every collective is the identity on the rank's own data; on an accelerator the copy
  // of all_gather and reduce_scatter is queued on the collective's stream.
  if (c.device.is_accelerator()) {
    const bool copies =
        c.kind == CollectiveKind::AllGather || c.kind == CollectiveKind::ReduceScatter;
    if (copies && c.bytes() > 0 && c.input != c.output)
      device_copy(c.device).device_to_device(c.output, c.input, c.bytes(), c.stream);
    return;
  }
  if (!c.device.is_cpu()) return;  // meta: no data
  run_single_rank(c);
}

std::shared_ptr<Work> FakeProcessGroup::execute_async(const Collective& c) {
  execute(c);  // throws synchronously at size > 1: a fake group has nothing to wait for
  if (!c.device.is_accelerator()) return completed_work();
  Event done(c.stream.device);
  done.record(c.stream);
  return std::make_shared<StreamWork>(done);
}

std::shared_ptr<ProcessGroup> FakeProcessGroup::make_subgroup(const std::vector<int>& ranks,
                                                              int new_rank, int) {
  if (new_rank < 0) return nullptr;
  return std::make_shared<FakeProcessGroup>(new_rank, int(ranks.size()));
}

void register_fake_backend() {
  register_backend("fake", [](const InitOptions& o) -> std::shared_ptr<ProcessGroup> {
    return std::make_shared<FakeProcessGroup>(o.rank < 0 ? 0 : o.rank,
                                              o.world_size < 0 ? 1 : o.world_size);
  });
}

}  // namespace fsdp::comm
