// An emulated NCCL (libnccl.so.2) for the emulated CUDA device: ranks are processes (mpirun, or
// a store) or threads, each with its own emulated device; a communicator is a file in /dev/shm
// named by the unique id, holding one slot per rank and two arrival counters. A collective runs
// on the caller's stream in stream order (cudaLaunchHostFunc: the stream's worker waits for the
// peers as a NCCL kernel would): each rank copies its input into its slot, all arrive, each
// computes its own output from the slots in rank order (so every rank gets the same bits), all
// arrive again before the slots are reused. Peers missing for FSDP_EMU_NCCL_TIMEOUT seconds
// (default 120) make the collective fail: ncclCommGetAsyncError reports ncclSystemError.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <nccl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/gpu/emulation/emu_runtime.h"

namespace {

constexpr std::size_t kSlotBytes = std::size_t(64) << 20;  // the largest input a rank sends
constexpr std::size_t kHeaderBytes = 4096;

struct Header {
  std::atomic<std::uint64_t> arrived;  // 2 per rank per collective
  std::atomic<std::uint64_t> joined;   // ranks that mapped the region
};

std::string hex_of(const ncclUniqueId& id) {
  char out[33];
  for (int i = 0; i < 16; ++i)
    std::snprintf(out + 2 * i, 3, "%02x", static_cast<unsigned char>(id.internal[i]));
  return out;
}

int timeout_seconds() {
  const char* v = std::getenv("FSDP_EMU_NCCL_TIMEOUT");
  return v && *v ? std::atoi(v) : 120;
}

}  // namespace

struct ncclComm {
  std::string name;
  int nranks = 1, rank = 0, device = 0;
  unsigned char* region = nullptr;
  std::size_t region_bytes = 0;
  std::uint64_t issued = 0;  // collectives queued so far (the same order on every rank)
  std::atomic<int> async_error{ncclSuccess};
  int splits = 0;

  Header& header() { return *reinterpret_cast<Header*>(region); }
  unsigned char* slot(int r) { return region + kHeaderBytes + std::size_t(r) * kSlotBytes; }
};

namespace {

ncclResult_t open_region(ncclComm* c) {
  const std::string path = "/fsdp_emu_nccl_" + c->name;
  const int fd = shm_open(path.c_str(), O_CREAT | O_RDWR, 0600);
  if (fd < 0) return ncclSystemError;
  c->region_bytes = kHeaderBytes + std::size_t(c->nranks) * kSlotBytes;
  if (ftruncate(fd, static_cast<off_t>(c->region_bytes)) != 0) {
    close(fd);
    return ncclSystemError;
  }
  void* p = mmap(nullptr, c->region_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return ncclSystemError;
  c->region = static_cast<unsigned char*>(p);
  // The last rank to map it unlinks the name: the mappings keep the memory.
  if (c->header().joined.fetch_add(1) + 1 == std::uint64_t(c->nranks)) shm_unlink(path.c_str());
  return ncclSuccess;
}

// Until `target` arrivals (peers' processes or threads), or the timeout.
bool wait_for(ncclComm* c, std::uint64_t target) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_seconds());
  while (c->header().arrived.load() < target) {
    if (c->async_error.load() != ncclSuccess) return false;
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

std::size_t size_of(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    default:
      return 8;
  }
}

template <typename T, typename Acc>
void reduce_as(ncclComm* c, ncclRedOp_t op, std::size_t offset, std::size_t count, void* out,
               Acc (*load)(T), T (*store)(Acc)) {
  for (std::size_t i = 0; i < count; ++i) {
    Acc acc{};
    for (int r = 0; r < c->nranks; ++r) {
      T v;
      std::memcpy(&v, c->slot(r) + (offset + i) * sizeof(T), sizeof(T));
      const Acc x = load(v);
      if (r == 0)
        acc = x;
      else if (op == ncclSum || op == ncclAvg)
        acc = acc + x;
      else if (op == ncclProd)
        acc = acc * x;
      else if (op == ncclMax)
        acc = (x > acc || x != x) ? x : acc;
      else
        acc = (x < acc || x != x) ? x : acc;
    }
    if (op == ncclAvg) acc = acc / static_cast<Acc>(c->nranks);
    const T result = store(acc);
    std::memcpy(static_cast<unsigned char*>(out) + i * sizeof(T), &result, sizeof(T));
  }
}

template <typename T>
T same(T x) {
  return x;
}
float from_half(__half x) {
  return __half2float(x);
}
__half to_half(float x) {
  return __float2half_rn(x);
}
float from_bf16(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
__nv_bfloat16 to_bf16(float x) {
  return __float2bfloat16_rn(x);
}

// out[i] = op over the ranks' slots at element offset + i (16-bit floats summed in float).
bool reduce(ncclComm* c, ncclDataType_t t, ncclRedOp_t op, std::size_t offset, std::size_t count,
            void* out) {
  switch (t) {
    case ncclInt8:
      reduce_as<std::int8_t, std::int8_t>(c, op, offset, count, out, same, same);
      break;
    case ncclUint8:
      reduce_as<std::uint8_t, std::uint8_t>(c, op, offset, count, out, same, same);
      break;
    case ncclInt32:
      reduce_as<std::int32_t, std::int32_t>(c, op, offset, count, out, same, same);
      break;
    case ncclUint32:
      reduce_as<std::uint32_t, std::uint32_t>(c, op, offset, count, out, same, same);
      break;
    case ncclInt64:
      reduce_as<std::int64_t, std::int64_t>(c, op, offset, count, out, same, same);
      break;
    case ncclUint64:
      reduce_as<std::uint64_t, std::uint64_t>(c, op, offset, count, out, same, same);
      break;
    case ncclFloat32:
      reduce_as<float, float>(c, op, offset, count, out, same, same);
      break;
    case ncclFloat64:
      reduce_as<double, double>(c, op, offset, count, out, same, same);
      break;
    case ncclFloat16:
      reduce_as<__half, float>(c, op, offset, count, out, from_half, to_half);
      break;
    case ncclBfloat16:
      reduce_as<__nv_bfloat16, float>(c, op, offset, count, out, from_bf16, to_bf16);
      break;
    default:
      return false;
  }
  return true;
}

enum class Kind { AllReduce, ReduceScatter, AllGather, Broadcast };

struct Call {
  ncclComm* comm;
  Kind kind;
  const void* send;
  void* recv;
  std::size_t count;  // elements: allreduce/broadcast all, reduce_scatter/allgather per rank
  ncclDataType_t type;
  ncclRedOp_t op;
  int root;
  std::uint64_t index;  // this collective's place in the communicator's order
};

void run(void* p) {
  std::unique_ptr<Call> call(static_cast<Call*>(p));
  ncclComm* c = call->comm;
  const std::size_t elem = size_of(call->type);
  const std::size_t in_count =
      call->kind == Kind::ReduceScatter ? call->count * c->nranks : call->count;
  const std::size_t out_count =
      call->kind == Kind::AllGather ? call->count * c->nranks : call->count;
  const std::uint64_t base = call->index * 2 * std::uint64_t(c->nranks);
  if (call->kind != Kind::Broadcast || c->rank == call->root)
    std::memcpy(c->slot(c->rank), call->send, in_count * elem);
  c->header().arrived.fetch_add(1);
  if (!wait_for(c, base + c->nranks)) {
    c->async_error = ncclSystemError;
    fsdp_emu_report_fault(
        cudaErrorLaunchFailure,
        ("emulated NCCL: rank " + std::to_string(c->rank) + " of " + std::to_string(c->nranks) +
         ": peers missing from collective " + std::to_string(call->index))
            .c_str());
    return;
  }
  std::vector<unsigned char> result(out_count * elem);
  switch (call->kind) {
    case Kind::AllReduce:
      reduce(c, call->type, call->op, 0, call->count, result.data());
      break;
    case Kind::ReduceScatter:
      reduce(c, call->type, call->op, std::size_t(c->rank) * call->count, call->count,
             result.data());
      break;
    case Kind::AllGather:
      for (int r = 0; r < c->nranks; ++r)
        std::memcpy(result.data() + std::size_t(r) * call->count * elem, c->slot(r),
                    call->count * elem);
      break;
    case Kind::Broadcast:
      std::memcpy(result.data(), c->slot(call->root), out_count * elem);
      break;
  }
  c->header().arrived.fetch_add(1);
  if (!wait_for(c, base + 2 * std::uint64_t(c->nranks))) {
    c->async_error = ncclSystemError;
    return;
  }
  std::memcpy(call->recv, result.data(), result.size());  // in place allowed: written last
}

ncclResult_t enqueue(ncclComm* c, Kind kind, const void* send, void* recv, std::size_t count,
                     ncclDataType_t type, ncclRedOp_t op, int root, cudaStream_t stream) {
  if (c == nullptr) return ncclInvalidArgument;
  if (c->async_error.load() != ncclSuccess) return static_cast<ncclResult_t>(c->async_error.load());
  if (type < 0 || type >= ncclNumTypes ||
      (kind != Kind::AllGather && kind != Kind::Broadcast && (op < 0 || op >= ncclNumOps)))
    return ncclInvalidArgument;
  const std::size_t elem = size_of(type);
  const std::size_t in_count = kind == Kind::ReduceScatter ? count * c->nranks : count;
  const std::size_t out_count = kind == Kind::AllGather ? count * c->nranks : count;
  if (in_count * elem > kSlotBytes) {
    std::fprintf(stderr, "emulated NCCL: %zu bytes, above the emulation's %zu a rank\n",
                 in_count * elem, kSlotBytes);
    return ncclInvalidUsage;
  }
  if (count > 0) {
    const bool sends = kind != Kind::Broadcast || c->rank == root;
    if ((sends && !fsdp_emu_device_accessible(send)) || !fsdp_emu_device_accessible(recv) ||
        (sends &&
         !fsdp_emu_device_accessible(static_cast<const char*>(send) + in_count * elem - 1)) ||
        !fsdp_emu_device_accessible(static_cast<char*>(recv) + out_count * elem - 1)) {
      std::fprintf(stderr,
                   "emulated NCCL: rank %d: a buffer is not device memory (send %p, recv %p)\n",
                   c->rank, send, recv);
      return ncclInvalidArgument;
    }
  }
  auto* call = new Call{c, kind, send, recv, count, type, op, root, c->issued++};
  if (cudaLaunchHostFunc(stream, run, call) != cudaSuccess) {
    delete call;
    return ncclUnhandledCudaError;
  }
  return ncclSuccess;
}

}  // namespace

extern "C" {

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (id == nullptr) return ncclInvalidArgument;
  std::memset(id->internal, 0, sizeof id->internal);
  std::random_device rd;
  for (int i = 0; i < 16; ++i) id->internal[i] = static_cast<char>(rd() & 0xff);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  if (comm == nullptr || nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  auto* c = new ncclComm;
  c->name = hex_of(id);
  c->nranks = nranks;
  c->rank = rank;
  if (cudaGetDevice(&c->device) != cudaSuccess) {
    delete c;
    return ncclUnhandledCudaError;
  }
  if (ncclResult_t r = open_region(c); r != ncclSuccess) {
    delete c;
    return r;
  }
  // NCCL's init is collective: every rank has joined when it returns.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_seconds());
  while (c->header().joined.load() < std::uint64_t(nranks)) {
    if (std::chrono::steady_clock::now() > deadline) return ncclSystemError;
    std::this_thread::yield();
  }
  *comm = c;
  return ncclSuccess;
}

// Ranks agree on the new groups through a split region of their own: each writes (color, key),
// all arrive, each builds its group (ranks of its color in (key, rank) order).
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                           ncclConfig_t*) {
  if (comm == nullptr || newcomm == nullptr) return ncclInvalidArgument;
  ncclComm split;
  split.name = comm->name + "s" + std::to_string(comm->splits++);
  split.nranks = comm->nranks;
  split.rank = comm->rank;
  if (ncclResult_t r = open_region(&split); r != ncclSuccess) return r;
  const int mine[2] = {color, key};
  std::memcpy(split.slot(split.rank), mine, sizeof mine);
  split.header().arrived.fetch_add(1);
  if (!wait_for(&split, std::uint64_t(split.nranks))) return ncclSystemError;
  std::vector<std::pair<int, int>> members;  // (key, rank) of my color
  for (int r = 0; r < split.nranks; ++r) {
    int theirs[2];
    std::memcpy(theirs, split.slot(r), sizeof theirs);
    if (color != NCCL_SPLIT_NOCOLOR && theirs[0] == color) members.emplace_back(theirs[1], r);
  }
  split.header().arrived.fetch_add(1);
  wait_for(&split, 2 * std::uint64_t(split.nranks));  // all read before the region goes
  munmap(split.region, split.region_bytes);
  if (color == NCCL_SPLIT_NOCOLOR) {
    *newcomm = nullptr;
    return ncclSuccess;
  }
  std::sort(members.begin(), members.end());
  auto* c = new ncclComm;
  c->name = comm->name + "c" + std::to_string(comm->splits) + "_" + std::to_string(color);
  c->nranks = static_cast<int>(members.size());
  c->device = comm->device;
  for (std::size_t i = 0; i < members.size(); ++i)
    if (members[i].second == comm->rank) c->rank = static_cast<int>(i);
  if (ncclResult_t r = open_region(c); r != ncclSuccess) {
    delete c;
    return r;
  }
  *newcomm = c;
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  cudaDeviceSynchronize();  // its collectives have run
  munmap(comm->region, comm->region_bytes);
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  comm->async_error = ncclSystemError;  // queued collectives give up instead of waiting
  return ncclSuccess;  // the region stays mapped: a stream may still be in a collective
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* error) {
  if (comm == nullptr || error == nullptr) return ncclInvalidArgument;
  *error = static_cast<ncclResult_t>(comm->async_error.load());
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error";
    case ncclSystemError:
      return "unhandled system error";
    case ncclInternalError:
      return "internal error";
    case ncclInvalidArgument:
      return "invalid argument";
    case ncclInvalidUsage:
      return "invalid usage";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
    default:
      return "unknown result code";
  }
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return enqueue(comm, Kind::AllReduce, send, recv, count, type, op, 0, stream);
}

ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t count, ncclDataType_t type,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return enqueue(comm, Kind::ReduceScatter, send, recv, count, type, op, 0, stream);
}

ncclResult_t ncclAllGather(const void* send, void* recv, size_t count, ncclDataType_t type,
                           ncclComm_t comm, cudaStream_t stream) {
  return enqueue(comm, Kind::AllGather, send, recv, count, type, ncclSum, 0, stream);
}

ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type,
                           int root, ncclComm_t comm, cudaStream_t stream) {
  if (comm != nullptr && (root < 0 || root >= comm->nranks)) return ncclInvalidArgument;
  return enqueue(comm, Kind::Broadcast, send, recv, count, type, ncclSum, root, stream);
}

}  // extern "C"
