// NCCL backend (the CUDA toolkit's NCCL). Buffers must be on a CUDA device.
//
// One communicator per group. A collective is enqueued on the stream it is given
// (Collective::stream: the caller's current stream unless named, core/stream.h), so it is ordered
// after the work queued there and before the work queued after it, as torch's NCCL collectives
// on a stream; FSDP's stream protocol (fsdp/streams.h) runs unchanged. Its Work is an event
// recorded after it on that stream (pooled by the device's stream backend): block_stream makes
// another stream wait for it on the device; wait() is the host's wait, polling the event and
// ncclCommGetAsyncError, and aborts the communicator after the configured timeout (a peer that
// never joined or died), naming the collective. The synchronous form only enqueues (torch's
// collectives without async_op); a barrier, whose meaning is the host's, waits.
//
// Semantics: ncclAvg is native; bool reduces as uint8 with SUM/MAX = ncclMax (logical or) and
// MIN = ncclMin (logical and), like comm/reduce_op.h. NCCL accumulates float16/bfloat16 in their
// own type, not float32: results can differ from the CPU backends in the last bits.
//
// The unique id travels through MPI when the job was started by mpirun (and MPI is built), else
// through the store of InitOptions (rank 0 publishes it).
#include <cuda_runtime.h>
#include <fmt/format.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "comm/builtin_backends.h"
#include "comm/collective_accesses.h"
#include "comm/env.h"
#include "comm/errors.h"
#include "comm/process_group.h"
#include "comm/registry.h"
#include "comm/store/store.h"
#include "core/error.h"
#include "core/native_stream.h"
#include "core/stream.h"
#include "core/stream_sanitizer.h"

// Checks an NCCL / CUDA return code; the message names the call, the group and the error text.
#define FSDP_NCCL_CHECK(call, where)                                                         \
  do {                                                                                       \
    ncclResult_t fsdp_nccl_rc_ = (call);                                                     \
    if (fsdp_nccl_rc_ != ncclSuccess)                                                        \
      throw ::fsdp::comm::CommError(fmt::format("{}: {} failed: {} ({}:{})", (where), #call, \
                                                ncclGetErrorString(fsdp_nccl_rc_), __FILE__, \
                                                __LINE__));                                  \
  } while (0)
#define FSDP_CUDA_CHECK(call, where)                                                         \
  do {                                                                                       \
    cudaError_t fsdp_cuda_rc_ = (call);                                                      \
    if (fsdp_cuda_rc_ != cudaSuccess)                                                        \
      throw ::fsdp::comm::CommError(fmt::format("{}: {} failed: {} ({}:{})", (where), #call, \
                                                cudaGetErrorString(fsdp_cuda_rc_), __FILE__, \
                                                __LINE__));                                  \
  } while (0)

namespace fsdp::comm {

namespace {

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::Float32:
      return ncclFloat32;
    case DType::Float64:
      return ncclFloat64;
    case DType::Float16:
      return ncclFloat16;
    case DType::BFloat16:
      return ncclBfloat16;
    case DType::Int64:
      return ncclInt64;
    case DType::Int32:
      return ncclInt32;
    case DType::UInt8:
      return ncclUint8;
    case DType::Bool:
      return ncclUint8;
  }
  return ncclUint8;
}

ncclRedOp_t nccl_op(ReduceOp op, DType t) {
  if (t == DType::Bool) return op == ReduceOp::Min ? ncclMin : ncclMax;
  switch (op) {
    case ReduceOp::Sum:
      return ncclSum;
    case ReduceOp::Avg:
      return ncclAvg;
    case ReduceOp::Max:
      return ncclMax;
    case ReduceOp::Min:
      return ncclMin;
  }
  return ncclSum;
}

// Completion of one enqueued collective: an event recorded after it on its stream.
class NcclWork final : public Work {
 public:
  NcclWork(Event done, ncclComm_t comm, std::shared_ptr<std::atomic<bool>> aborted,
           std::string what, std::chrono::milliseconds timeout)
      : done_(done),
        comm_(comm),
        aborted_(std::move(aborted)),
        what_(std::move(what)),
        timeout_(timeout) {}

  void wait() override {
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    while (!test()) {
      if (std::chrono::steady_clock::now() > deadline) {
        if (!aborted_->exchange(true))
          ncclCommAbort(comm_);  // unblocks the stream; the communicator is gone afterwards
        throw CommTimeoutError(fmt::format(
            "{} timed out after {} ms (a peer never joined or died); the communicator was "
            "aborted",
            what_, timeout_.count()));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  bool wait_for(std::chrono::milliseconds timeout) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!test()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    return true;
  }
  bool test() override {
    ncclResult_t async_error = ncclSuccess;
    ncclCommGetAsyncError(comm_, &async_error);
    if (async_error != ncclSuccess && async_error != ncclInProgress)
      throw CommError(fmt::format("{} failed: {}", what_, ncclGetErrorString(async_error)));
    try {
      return done_.query();
    } catch (const std::exception& e) {
      throw CommError(fmt::format("{} failed: {}", what_, e.what()));
    }
  }
  // The device-side wait: later work on `stream` runs after the collective (no host wait).
  void block_stream(const Stream& stream) override { stream.wait_event(done_); }

 private:
  Event done_;
  ncclComm_t comm_;
  std::shared_ptr<std::atomic<bool>> aborted_;
  std::string what_;
  std::chrono::milliseconds timeout_;
};

class NcclProcessGroup final : public ProcessGroup {
 public:
  NcclProcessGroup(int rank, int size, int device, ncclComm_t comm, const InitOptions& options)
      : ProcessGroup(rank, size), device_(device), comm_(comm), options_(options) {
    FSDP_CUDA_CHECK(cudaSetDevice(device_), where());
  }
  ~NcclProcessGroup() override {
    shutdown_executor();
    cudaSetDevice(device_);
    if (!aborted_->load()) {
      cudaDeviceSynchronize();  // collectives queued on the callers' streams use the comm
      ncclCommDestroy(comm_);
    }
    if (barrier_scratch_ != nullptr) cudaFree(barrier_scratch_);
  }
  std::string backend_name() const override { return "nccl"; }

 protected:
  void check_supported(const Collective& c) const override {
    if (c.kind == CollectiveKind::Barrier || c.device.is_cpu()) return;  // host: staged
    if (!c.device.is_cuda())
      throw ValueError(fmt::format("{}: {} needs cuda or cpu buffers, got device {}", where(),
                                   describe(c), c.device.str()));
    if (stream_device(c.device).index != device_)
      throw ValueError(fmt::format("{}: {} has buffers on {}, but this group's device is cuda:{}",
                                   where(), describe(c), c.device.str(), device_));
  }
  // Stream-ordered: queued, not waited for (a barrier is the host's, so it waits). Host
  // buffers (a job's agreement on an error, a loss) go through device copies, waited for.
  void execute(const Collective& c) override {
    if (c.device.is_cpu() && c.kind != CollectiveKind::Barrier) return (void)staged(c);
    auto work = enqueue(c);
    if (c.kind == CollectiveKind::Barrier) work->wait();
  }
  std::shared_ptr<Work> execute_async(const Collective& c) override {
    if (c.device.is_cpu() && c.kind != CollectiveKind::Barrier) return staged(c);
    return enqueue(c);
  }
  std::shared_ptr<ProcessGroup> make_subgroup(const std::vector<int>& ranks, int new_rank,
                                              int) override {
    ncclComm_t sub = nullptr;
    FSDP_NCCL_CHECK(
        ncclCommSplit(comm_, new_rank < 0 ? NCCL_SPLIT_NOCOLOR : 0, new_rank, &sub, nullptr),
        where() + ": new_group");
    if (new_rank < 0) return nullptr;
    return std::make_shared<NcclProcessGroup>(new_rank, int(ranks.size()), device_, sub, options_);
  }

 private:
  std::shared_ptr<Work> enqueue(const Collective& c);
  std::shared_ptr<Work> staged(const Collective& c);

  int device_;
  ncclComm_t comm_;
  InitOptions options_;
  void* barrier_scratch_ = nullptr;
  std::shared_ptr<std::atomic<bool>> aborted_ = std::make_shared<std::atomic<bool>>(false);
};

// NCCL moves device memory only: host buffers are copied to the group's device, the collective
// runs there on the device's current stream, and the result comes back before this returns
// (the completed Work is returned). For the small control values jobs agree on, as torch's
// object collectives stage through the current device.
std::shared_ptr<Work> NcclProcessGroup::staged(const Collective& c) {
  const std::string what = where() + ": " + describe(c) + " (host buffers staged on the device)";
  FSDP_CUDA_CHECK(cudaSetDevice(device_), what);
  const std::size_t elem = dtype_size(c.dtype), n = static_cast<std::size_t>(size());
  std::size_t in_bytes = 0, out_bytes = c.count * elem;
  if (c.kind == CollectiveKind::AllGather) {
    in_bytes = c.count * elem;
    out_bytes = in_bytes * n;
  } else if (c.kind == CollectiveKind::ReduceScatter) {
    in_bytes = c.count * elem * n;
  }
  void* dev_in = nullptr;
  void* dev_out = nullptr;
  FSDP_CUDA_CHECK(cudaMalloc(&dev_out, out_bytes ? out_bytes : 1), what);
  if (in_bytes) FSDP_CUDA_CHECK(cudaMalloc(&dev_in, in_bytes), what);
  struct Free {
    void* a;
    void* b;
    ~Free() {
      cudaFree(a);
      cudaFree(b);
    }
  } free_both{dev_in, dev_out};
  if (in_bytes)
    FSDP_CUDA_CHECK(cudaMemcpy(dev_in, c.input, in_bytes, cudaMemcpyHostToDevice), what);
  if (c.kind == CollectiveKind::AllReduce || c.kind == CollectiveKind::Broadcast)
    FSDP_CUDA_CHECK(cudaMemcpy(dev_out, c.output, out_bytes, cudaMemcpyHostToDevice), what);
  Collective d = c;
  d.device = Device(DeviceType::CUDA, device_);
  d.stream = current_stream(d.device);
  d.input = dev_in;
  d.output = dev_out;
  auto work = enqueue(d);
  work->wait();
  FSDP_CUDA_CHECK(cudaMemcpy(c.output, dev_out, out_bytes, cudaMemcpyDeviceToHost), what);
  return work;
}

std::shared_ptr<Work> NcclProcessGroup::enqueue(const Collective& c) {
  const std::string what = where() + ": " + describe(c);
  if (aborted_->load())
    throw CommAbortedError(what + " refused: the communicator was aborted after a timeout");
  FSDP_CUDA_CHECK(cudaSetDevice(device_), what);
  // A barrier has no buffers: it goes on the group's device's current stream (as torch's).
  const Stream on =
      c.device.is_cuda() ? c.stream : current_stream(Device(DeviceType::CUDA, device_));
  cudaStream_t stream = static_cast<cudaStream_t>(native_stream(on));
  const ncclDataType_t type = nccl_type(c.dtype);
  // One item of work on the stream for the stream sanitizer, this rank's buffers its accesses.
  if (c.device.is_cuda() && c.bytes() > 0)
    stream_sanitizer::on_work(on, collective_name(c.kind).data(), own_accesses(c, size(), rank()));
  char* out = static_cast<char*>(c.output);
  switch (c.kind) {
    case CollectiveKind::AllGather:
      FSDP_NCCL_CHECK(ncclAllGather(c.input, out, c.count, type, comm_, stream), what);
      break;
    case CollectiveKind::ReduceScatter:
      FSDP_NCCL_CHECK(
          ncclReduceScatter(c.input, out, c.count, type, nccl_op(c.op, c.dtype), comm_, stream),
          what);
      break;
    case CollectiveKind::AllReduce:
      FSDP_NCCL_CHECK(ncclAllReduce(out, out, c.count, type, nccl_op(c.op, c.dtype), comm_, stream),
                      what);
      break;
    case CollectiveKind::Broadcast:
      FSDP_NCCL_CHECK(ncclBroadcast(out, out, c.count, type, c.root, comm_, stream), what);
      break;
    case CollectiveKind::Barrier:
      // NCCL has no barrier: an all-reduce of one element on a scratch buffer.
      if (barrier_scratch_ == nullptr)
        FSDP_CUDA_CHECK(cudaMalloc(&barrier_scratch_, sizeof(float)), what);
      FSDP_NCCL_CHECK(
          ncclAllReduce(barrier_scratch_, barrier_scratch_, 1, ncclFloat32, ncclSum, comm_, stream),
          what);
      break;
  }
  Event done(on.device);
  done.record(on);
  return std::make_shared<NcclWork>(done, comm_, aborted_, what, options_.timeout);
}

ncclUniqueId exchange_unique_id(const InitOptions& o) {
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  if (o.rank == 0) FSDP_NCCL_CHECK(ncclGetUniqueId(&id), "nccl backend rank 0");
  if (env::under_mpirun() && backend_available("mpi")) {
    auto mpi = create_process_group("mpi", o);
    mpi->broadcast(&id, sizeof id, DType::UInt8, 0);
    return id;
  }
  auto store = make_store(o, o.rank);
  if (o.rank == 0) {
    store->set("nccl_unique_id", std::vector<char>(id.internal, id.internal + sizeof id.internal));
  } else {
    auto bytes = store->get("nccl_unique_id", o.timeout);
    if (bytes.size() != sizeof id.internal)
      throw CommError(fmt::format("nccl backend rank {}: unique id from {} has {} bytes", o.rank,
                                  store->describe(), bytes.size()));
    std::memcpy(id.internal, bytes.data(), bytes.size());
  }
  return id;
}

std::shared_ptr<ProcessGroup> create_nccl_group(const InitOptions& o) {
  if (o.rank < 0 || o.world_size < 1 || o.rank >= o.world_size)
    throw ValueError(fmt::format("nccl backend: needs rank and world_size (got rank {} of {})",
                                 o.rank, o.world_size));
  int devices = 0;
  cudaError_t rc = cudaGetDeviceCount(&devices);
  if (rc != cudaSuccess || devices == 0)
    throw CommError(fmt::format("nccl backend rank {}: no CUDA device ({})", o.rank,
                                rc != cudaSuccess ? cudaGetErrorString(rc) : "0 devices"));
  const int device = o.device_index >= 0 ? o.device_index : o.rank % devices;
  const std::string where = fmt::format("nccl rank {}/{}", o.rank, o.world_size);
  FSDP_CUDA_CHECK(cudaSetDevice(device), where);
  ncclUniqueId id = exchange_unique_id(o);
  ncclComm_t comm = nullptr;
  FSDP_NCCL_CHECK(ncclCommInitRank(&comm, o.world_size, id, o.rank), where);
  return std::make_shared<NcclProcessGroup>(o.rank, o.world_size, device, comm, o);
}

}  // namespace

void register_nccl_backend() {
  register_backend("nccl", create_nccl_group);
}

}  // namespace fsdp::comm
