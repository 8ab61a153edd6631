// MPI backend (Open MPI, launched by mpirun).
//
// Collectives are built from non-blocking point-to-point messages that this backend progresses
// itself (MPI_Testall in a loop), for two reasons measured on the target machine
// (bench/comm, comm/README.md): Open MPI's reduction collectives allocate temporaries on every
// call and lose 20-60x to page faults, while pairwise Isend/Irecv into persistent buffers runs
// near memory bandwidth; and a progress loop we own can give up after the configured timeout,
// naming the ranks that never answered, where a blocking MPI call would hang forever.
//
//   all_gather, reduce_scatter, all_reduce and the signature check: the pairwise algorithms of
//                   comm/algorithms, over this backend's PeerLink (MpiProcessGroup::Link)
//   broadcast:      MPI_Ibcast, barrier: MPI_Ibarrier (progressed the same way)
//
// When every rank runs on one host and may read the others' memory, all_gather, reduce_scatter
// and all_reduce of at least direct::kMinBytes per rank take the direct path instead
// (comm/direct_access.h): MPI carries only small descriptors, and each rank reads what it needs
// straight from its peers' buffers.
#include "comm/mpi/mpi_process_group.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/algorithms/pairwise.h"
#include "comm/algorithms/signature_check.h"
#include "comm/builtin_backends.h"
#include "comm/env.h"
#include "comm/errors.h"
#include "comm/join.h"
#include "comm/mpi/stop_report.h"
#include "comm/process_group.h"
#include "comm/reduce_kernels.h"
#include "comm/registry.h"

namespace fsdp::comm {

[[noreturn]] void throw_mpi_error(int rc, const char* call, const std::string& where,
                                  const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw CommError(fmt::format("{}: {} failed: {} ({}:{})", where, call, text, file, line));
}

namespace mpi {

std::mutex& mpi_mutex() {
  static std::mutex m;
  return m;
}

namespace {

// Set when a group of this process failed for good (a timeout or a transport error): pending
// messages were abandoned, so MPI_Finalize may wait forever for the peer that caused it. The exit
// handler then gives MPI_Finalize the group's timeout and ends the process (and with it, through
// mpirun, the job) if it has not returned, as NCCL's async error handling ends a job.
std::atomic<bool> g_job_broken{false};
std::atomic<long long> g_broken_timeout_ms{0};

void mark_job_broken(std::chrono::milliseconds timeout) {
  g_broken_timeout_ms = static_cast<long long>(timeout.count());
  g_job_broken = true;
}

void ensure_mpi_initialized() {
  std::lock_guard lock(mpi_mutex());
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized) throw CommError("mpi backend: MPI was already finalized in this process");
  if (initialized) return;
  int provided = 0;
  int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
  if (rc != MPI_SUCCESS) throw CommError("mpi backend: MPI_Init_thread failed");
  if (provided < MPI_THREAD_SERIALIZED)
    throw CommError(
        fmt::format("mpi backend: MPI provides thread level {} but the backend "
                    "needs MPI_THREAD_SERIALIZED or better",
                    provided));
  int world_rank = 0, world_size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  set_stop_report_world(world_rank, world_size);
  install_stop_report(env::under_mpirun());
  std::atexit([] {
    int done = 0;
    MPI_Finalized(&done);
    if (done) return;
    if (g_job_broken.load()) {
      std::fflush(nullptr);
      const auto limit = std::chrono::milliseconds(std::max(1000LL, g_broken_timeout_ms.load()));
      std::thread([limit] {
        std::this_thread::sleep_for(limit);
        std::fprintf(stderr,
                     "mpi backend: MPI_Finalize did not return within %lld ms after a "
                     "communication failure; ending the job\n",
                     static_cast<long long>(limit.count()));
        std::fflush(nullptr);
        std::_Exit(1);
      }).detach();
    }
    finish_stop_report();
    MPI_Finalize();
  });
}

constexpr std::size_t kMaxMessage = std::size_t(1) << 30;  // MPI counts are int
// Up to this size an all_reduce sends whole buffers in one exchange instead of two phases (below
// Open MPI's 4 KiB eager limit, where a message costs one hop).
constexpr std::size_t kSmallAllReduceBytes = std::size_t(2) << 10;

}  // namespace

MpiProcessGroup::MpiProcessGroup(MPI_Comm comm, int rank, int size, const InitOptions& options,
                                 direct::Path direct)
    : ProcessGroup(rank, size), comm_(comm), options_(options), direct_(std::move(direct)) {}

MpiProcessGroup::~MpiProcessGroup() {
  shutdown_executor();
  std::lock_guard lock(mpi_mutex());
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void MpiProcessGroup::fail(const std::string& reason, bool timed_out) {
  broken_ = true;
  mark_job_broken(options_.timeout);
  broken_reason_ = reason;
  if (timed_out) throw CommTimeoutError(reason);
  throw CommError(reason);
}

void MpiProcessGroup::transport_failed(int rc, const char* call, const Collective& c,
                                       const char* phase, const std::vector<int>& peers) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  MPI_Error_string(rc, text, &len);
  std::vector<int> ranks;
  for (int r : peers)
    if (r >= 0 && r != rank() && std::find(ranks.begin(), ranks.end(), r) == ranks.end())
      ranks.push_back(r);
  for (int r = 0; ranks.empty() && r < size(); ++r)  // none named (a barrier, a root): all others
    if (r != rank()) ranks.push_back(r);
  fail(
      fmt::format("{}: {} failed {}, exchanging with rank(s) {}: {}: {}; Open MPI's transport "
                  "lost a peer (its messages above say which connection), so this group cannot "
                  "be used again (end the job, e.g. MPI_Abort)",
                  where(), describe(c),
                  phase ? fmt::format("in its {}", phase) : std::string("posting its messages"),
                  name_ranks(ranks), call, std::string_view(text, std::size_t(len))));
}

void MpiProcessGroup::post(Pending& p, bool send, const void* buf, std::size_t bytes, int peer,
                           int tag) {
  // Messages above 1 GiB go as several (MPI counts are int); the receiver splits identically.
  std::size_t offset = 0;
  do {
    std::size_t len = std::min(kMaxMessage, bytes - offset);
    MPI_Request request;
    const char* at = static_cast<const char*>(buf) + offset;
    int rc = MPI_SUCCESS;
    {
      std::lock_guard lock(mpi_mutex());
      rc = send ? MPI_Isend(at, int(len), MPI_BYTE, peer, tag, comm_, &request)
                : MPI_Irecv(const_cast<char*>(at), int(len), MPI_BYTE, peer, tag, comm_, &request);
    }
    if (rc != MPI_SUCCESS) {
      if (current_ == nullptr)
        throw_mpi_error(rc, send ? "MPI_Isend" : "MPI_Irecv", where(), __FILE__, __LINE__);
      transport_failed(rc, send ? "MPI_Isend" : "MPI_Irecv", *current_, nullptr, {peer});
    }
    p.requests.push_back(request);
    p.peers.push_back(peer);
    p.expected_bytes.push_back(send ? SIZE_MAX : len);
    offset += len;
  } while (offset < bytes);
}

void MpiProcessGroup::wait_all(Pending& p, const Collective& c, const char* phase) {
  if (p.requests.empty()) return;
  // The collective's deadline, however many waits it has.
  const auto deadline = current_ ? deadline_ : std::chrono::steady_clock::now() + options_.timeout;
  const auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(200);
  std::vector<MPI_Status> statuses(p.requests.size());
  StopReportScope report(*this, c, phase, p.peers);
  for (int polls = 0;; ++polls) {
    int done = 0, rc = MPI_SUCCESS;
    {
      std::lock_guard lock(mpi_mutex());
      rc = MPI_Testall(int(p.requests.size()), p.requests.data(), &done, statuses.data());
    }
    if (rc != MPI_SUCCESS) transport_failed(rc, "MPI_Testall", c, phase, p.peers);
    if (done) break;
    // Spin like MPI's own blocking calls; after 200 us give the core away between polls, in case
    // ranks outnumber cores (yielding sooner costs whole time slices on a busy machine).
    if (polls > 64 && std::chrono::steady_clock::now() > spin_until) std::this_thread::yield();
    if ((polls & 255) == 0 && std::chrono::steady_clock::now() > deadline) {
      std::vector<int> missing;
      std::lock_guard lock(mpi_mutex());
      for (std::size_t i = 0; i < p.requests.size(); ++i) {
        int finished = 0;
        MPI_Test(&p.requests[i], &finished, MPI_STATUS_IGNORE);
        if (!finished) {
          if (std::find(missing.begin(), missing.end(), p.peers[i]) == missing.end())
            missing.push_back(p.peers[i]);
          if (p.expected_bytes[i] != SIZE_MAX) MPI_Cancel(&p.requests[i]);
        }
      }
      fail(fmt::format(
               "{}: {} timed out after {} ms ({}) waiting for rank(s) {}; pending MPI messages "
               "were abandoned, so this group cannot be used again (end the job, e.g. MPI_Abort)",
               where(), describe(c), options_.timeout.count(), phase, name_ranks(missing)),
           true);
    }
  }
  for (std::size_t i = 0; i < p.requests.size(); ++i) {
    if (p.expected_bytes[i] == SIZE_MAX) continue;
    int received = 0;
    MPI_Get_count(&statuses[i], MPI_BYTE, &received);
    if (std::size_t(received) != p.expected_bytes[i])
      throw CommMismatchError(fmt::format(
          "{}: {}: rank {} sent {} bytes where {} were expected (mismatched counts or dtypes "
          "between ranks)",
          where(), describe(c), p.peers[i], received, p.expected_bytes[i]));
  }
  p.requests.clear();
  p.peers.clear();
  p.expected_bytes.clear();
}

void MpiProcessGroup::Link::start(int tag) {
  tag_ = tag;
  pending_.requests.clear();
  pending_.peers.clear();
  pending_.expected_bytes.clear();
}

void MpiProcessGroup::Link::post_send(const void* data, std::size_t bytes, int peer) {
  group_.post(pending_, true, data, bytes, peer, tag_);
}

void MpiProcessGroup::Link::post_recv(void* data, std::size_t bytes, int peer) {
  group_.post(pending_, false, data, bytes, peer, tag_);
}

void MpiProcessGroup::Link::wait(const Collective& c, const char* phase) {
  ++tag_;  // the next round's messages can never match this round's receives
  group_.wait_all(pending_, c, phase);
}

char* MpiProcessGroup::Link::scratch(std::size_t bytes) {
  if (scratch_.size() < bytes) {
    scratch_.clear();
    scratch_.shrink_to_fit();
    scratch_.resize(bytes);  // value-initialised: pages are touched once, here
  }
  return scratch_.data();
}

void MpiProcessGroup::broadcast_or_barrier(const Collective& c) {
  Pending p;
  std::size_t offset = 0, bytes = c.bytes();
  do {
    std::size_t len = std::min(kMaxMessage, bytes - offset);
    MPI_Request request;
    const bool barrier = c.kind == CollectiveKind::Barrier;
    int rc = MPI_SUCCESS;
    {
      std::lock_guard lock(mpi_mutex());
      rc = barrier ? MPI_Ibarrier(comm_, &request)
                   : MPI_Ibcast(static_cast<char*>(c.output) + offset, int(len), MPI_BYTE, c.root,
                                comm_, &request);
    }
    const int peer = barrier ? -1 : c.root;  // the root itself: every other rank
    if (rc != MPI_SUCCESS)
      transport_failed(rc, barrier ? "MPI_Ibarrier" : "MPI_Ibcast", c, nullptr, {peer});
    p.requests.push_back(request);
    p.peers.push_back(peer);
    p.expected_bytes.push_back(SIZE_MAX);
    offset += len;
  } while (offset < bytes);
  wait_all(p, c, "collective");
}

void MpiProcessGroup::execute(const Collective& c) {
  if (broken_)
    throw CommAbortedError(fmt::format("{}: {} refused: an earlier collective failed: {}", where(),
                                       describe(c), broken_reason_));
  // Tags: 4 per collective (one per round), cycling below MPI's minimum TAG_UB (32767).
  link_.start(int(4 * (sequence_++ % 8000)));
  current_ = &c;
  deadline_ = std::chrono::steady_clock::now() + options_.timeout;
  struct Done {
    const Collective*& current;
    ~Done() { current = nullptr; }
  } done{current_};
  if (size() == 1) return run_single_rank(c);
  StopReportScope report(*this, c);  // what this rank says if mpirun ends it meanwhile
  if (direct_.eligible(c)) return direct_collective(c);  // always checks signatures
  if (options_.check_signatures) algorithms::check_signatures(link_, c, where());
  if (c.kind == CollectiveKind::Broadcast || c.kind == CollectiveKind::Barrier)
    return broadcast_or_barrier(c);
  algorithms::run(link_, c, kSmallAllReduceBytes);
}

std::shared_ptr<ProcessGroup> MpiProcessGroup::make_subgroup(const std::vector<int>& ranks,
                                                             int new_rank, int) {
  MPI_Comm sub = MPI_COMM_NULL;
  {
    std::lock_guard lock(mpi_mutex());
    FSDP_MPI_CHECK(MPI_Comm_split(comm_, new_rank < 0 ? MPI_UNDEFINED : 0, new_rank, &sub),
                   where() + ": new_group");
  }
  if (sub == MPI_COMM_NULL) return nullptr;
  MPI_Comm_set_errhandler(sub, MPI_ERRORS_RETURN);
  direct::Path path;
  if (direct_.on()) probe_direct_access(sub, path);
  return std::make_shared<MpiProcessGroup>(sub, new_rank, int(ranks.size()), options_,
                                           std::move(path));
}

namespace {
std::shared_ptr<ProcessGroup> create_mpi_group(const InitOptions& options) {
  ensure_mpi_initialized();
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 0;
  {
    std::lock_guard lock(mpi_mutex());
    FSDP_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm), "mpi backend");
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
  }
  if ((options.rank >= 0 && options.rank != rank) ||
      (options.world_size >= 0 && options.world_size != size))
    throw ValueError(fmt::format(
        "mpi backend: options ask for rank {} of {}, but mpirun started this process as rank {} "
        "of {}",
        options.rank, options.world_size, rank, size));
  direct::Path path;
  probe_direct_access(comm, path);
  return std::make_shared<MpiProcessGroup>(comm, rank, size, options, std::move(path));
}

}  // namespace
}  // namespace mpi

void register_mpi_backend() {
  register_backend("mpi", mpi::create_mpi_group);
}

}  // namespace fsdp::comm
