// ProcessGroup: the one interface every communication backend implements.
//
// Collectives work on raw buffers (pointer, element count, dtype, device) and mean the same on
// every backend (see reduce_op.h for the exact reduction semantics). Each collective has a
// synchronous form and an asynchronous form returning a Work handle; collectives of one group run
// in the order they were issued, whichever form was used.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/collective.h"
#include "comm/reduce_op.h"
#include "comm/work.h"
#include "core/device.h"
#include "core/dtype.h"

namespace fsdp::comm {

class OrderedExecutor;

class ProcessGroup {
 public:
  ProcessGroup(int rank, int size);
  virtual ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  virtual std::string backend_name() const = 0;
  // How data moves, for logs and diagnostics ("mpi: messages"); the backend name by default.
  virtual std::string transport() const { return backend_name(); }

  // output[r*count .. (r+1)*count) = rank r's input (count elements each): FSDP's flat layout.
  // input may alias output + rank()*count (in-place all-gather).
  void all_gather(const void* input, void* output, std::size_t count, DType dtype,
                  Device device = kCPU);
  // input holds size()*count elements; output (count) = op over ranks of chunk rank() of input.
  void reduce_scatter(const void* input, void* output, std::size_t count, DType dtype,
                      ReduceOp op = ReduceOp::Sum, Device device = kCPU);
  // In place: data = op over ranks of data.
  void all_reduce(void* data, std::size_t count, DType dtype, ReduceOp op = ReduceOp::Sum,
                  Device device = kCPU);
  // In place: data = root's data.
  void broadcast(void* data, std::size_t count, DType dtype, int root, Device device = kCPU);
  void barrier();

  std::shared_ptr<Work> all_gather_async(const void* input, void* output, std::size_t count,
                                         DType dtype, Device device = kCPU);
  std::shared_ptr<Work> reduce_scatter_async(const void* input, void* output, std::size_t count,
                                             DType dtype, ReduceOp op = ReduceOp::Sum,
                                             Device device = kCPU);
  std::shared_ptr<Work> all_reduce_async(void* data, std::size_t count, DType dtype,
                                         ReduceOp op = ReduceOp::Sum, Device device = kCPU);
  std::shared_ptr<Work> broadcast_async(void* data, std::size_t count, DType dtype, int root,
                                        Device device = kCPU);
  std::shared_ptr<Work> barrier_async();

  // Runs one validated collective (the typed methods above all end here).
  void run(const Collective& c);
  std::shared_ptr<Work> run_async(const Collective& c);

  // A group of the listed ranks of this group (ranks in the new group follow the list's order).
  // Every rank of this group must call it with the same list, in the same order relative to its
  // other new_group calls (as torch.distributed.new_group); non-members get nullptr.
  std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks);

  // "<backend> rank R/size S": the prefix of every error message from this group; a subgroup
  // adds this rank's world rank and the group's world ranks.
  std::string where() const;
  // Ranks of this group for a message: "1, 2", or in a subgroup "1, 2 (world ranks 3, 5)", so
  // that an error names the process a user can find, not only its position in the subgroup.
  std::string name_ranks(const std::vector<int>& ranks) const;
  // The world rank of rank r of this group (r itself in the world group).
  int world_rank(int r) const { return world_ranks_.empty() ? r : world_ranks_[std::size_t(r)]; }

 protected:
  // Runs c synchronously on the calling thread; c is already validated.
  virtual void execute(const Collective& c) = 0;
  // Asynchronous form; the default runs execute() on this group's ordered worker thread.
  virtual std::shared_ptr<Work> execute_async(const Collective& c);
  // Queues task on this group's ordered worker thread (what execute_async does by default).
  std::shared_ptr<Work> submit_ordered(std::function<void()> task);
  // Backend part of new_group, called on every rank of this group with the validated, unique
  // ranks; new_rank is this rank's position in them or -1 (then return nullptr). call_index
  // counts this group's new_group calls, identical on every rank.
  virtual std::shared_ptr<ProcessGroup> make_subgroup(const std::vector<int>& ranks, int new_rank,
                                                      int call_index) = 0;
  // Throws when the backend cannot run c on this device or dtype (the base checks the rest).
  virtual void check_supported(const Collective& c) const;
  // Stops the ordered worker thread; backends call it first thing in their destructor so that no
  // queued collective runs against a half-destroyed object.
  void shutdown_executor();

 private:
  void validate(const Collective& c) const;
  OrderedExecutor& executor();

  int rank_;
  int size_;
  std::vector<int> world_ranks_;  // of each rank of this group; empty: this group is the world
  std::unique_ptr<OrderedExecutor> executor_;
  int new_group_calls_ = 0;
};

// The two groups of HYBRID_SHARD: parameters are sharded inside a shard group (shard_size
// consecutive ranks) and replicated across the replicate group (same position in every block).
struct HybridGroups {
  std::shared_ptr<ProcessGroup> shard;
  std::shared_ptr<ProcessGroup> replicate;
};

// Every rank of `world` must call it; shard_size must divide world.size().
HybridGroups split_hybrid(ProcessGroup& world, int shard_size);

}  // namespace fsdp::comm
