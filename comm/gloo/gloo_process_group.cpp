// Gloo backend (Debian's libgloo, TCP transport).
//
// Gloo provides the connections (a full mesh of TCP pairs, rendezvous through our FileStore or
// TcpStore) and its unbound-buffer send/recv; the collectives are the pairwise algorithms of
// comm/algorithms over it (GlooProcessGroup::Link), the same code as the MPI backend's:
//   - gloo 0.5 has reduce-scatter only as ReduceScatterHalvingDoubling (a typed class per buffer,
//     no AVG, float16 summed in float16) and no bfloat16 at all; a direct exchange plus our
//     reduction kernel gives every dtype and op, float32 accumulation, and results bit-identical
//     to the threads and MPI backends;
//   - waiting per peer lets a timeout name the ranks that never answered.
// The scratch buffer (and its unbound buffer) is created once per size and reused.
// Every collective first exchanges a 16-byte signature, so mismatched calls are reported rather
// than corrupting data (a few tens of microseconds on loopback).
#include <arpa/inet.h>
#include <fmt/format.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "comm/algorithms/pairwise.h"
#include "comm/algorithms/signature_check.h"
#include "comm/builtin_backends.h"
#include "comm/direct_access.h"
#include "comm/env.h"
#include "comm/errors.h"
#include "comm/gloo/gloo_store_adapter.h"
#include "comm/join.h"
#include "comm/process_group.h"
#include "comm/reduce_kernels.h"
#include "comm/registry.h"
#include "comm/store/store.h"

namespace fsdp::comm {

namespace {

using gloo::transport::UnboundBuffer;

// Up to this size an all_reduce sends whole buffers in one exchange instead of two phases.
constexpr std::size_t kSmallAllReduceBytes = std::size_t(64) << 10;

// Gloo's own checks end in "[enforce fail at gloo/...cc:N] <condition>. <detail>": internal
// text that means, at rendezvous, that the ranks disagree on the group (world size, ranks).
std::string plain_gloo_message(const std::string& what) {
  if (what.find("enforce fail") == std::string::npos) return what;
  // Only the check's place is kept ("gloo/transport/tcp/address.cc:45"), for a bug report.
  std::string at;
  const auto b = what.find("enforce fail at "), e = what.find(']', b);
  if (b != std::string::npos && e != std::string::npos) at = what.substr(b + 16, e - b - 16);
  if (auto slash = at.find("gloo/"); slash != std::string::npos) at = at.substr(slash);
  return "the ranks disagree on the group (world size or ranks differ between them: every rank "
         "must be started with the same WORLD_SIZE and a distinct RANK below it; gloo's check " +
         at + " failed)";
}

class GlooProcessGroup final : public ProcessGroup {
 public:
  GlooProcessGroup(int rank, int size, const InitOptions& options, std::shared_ptr<Store> store,
                   std::string prefix, std::shared_ptr<gloo::transport::Device> device)
      : ProcessGroup(rank, size),
        options_(options),
        store_(std::move(store)),
        prefix_(std::move(prefix)),
        device_(std::move(device)) {
    GlooStoreAdapter adapter(store_, options_.timeout);
    gloo::rendezvous::PrefixStore prefixed(prefix_, adapter);
    context_ = std::make_shared<gloo::rendezvous::Context>(rank, size);
    // gloo waits 5 times its timeout for a pair to connect (a 10 s timeout waited 51 s): give
    // the connection phase a fifth, so that the whole wait stays within the timeout.
    context_->setTimeout(std::max(std::chrono::milliseconds(1), options_.timeout / 5));
    try {
      context_->connectFullMesh(prefixed, device_);
      context_->setTimeout(options_.timeout);
    } catch (const CommTimeoutError& e) {
      throw CommTimeoutError(fmt::format(
          "{}: rendezvous timed out after {} ms; the missing keys are the ranks that never "
          "joined: {}",
          where(), options_.timeout.count(), e.what()));
    } catch (const std::exception& e) {
      // gloo names the peer's address ("Connect timeout [10.77.0.2]:41817").
      if (std::string(e.what()).find("timeout") != std::string::npos)
        throw CommTimeoutError(fmt::format(
            "{}: connecting to the other ranks timed out after {} ms (this rank bound {}): {}",
            where(), options_.timeout.count(), device_->str(), e.what()));
      throw CommError(fmt::format("{}: rendezvous through {} failed: {}", where(),
                                  store_->describe(), plain_gloo_message(e.what())));
    }
    // connectFullMesh returns once this rank's pairs are up, not everyone's: without a barrier a
    // fast rank could close its connections while a slow one is still completing its handshake.
    execute(Collective{});
    probe_direct_access();
  }

  ~GlooProcessGroup() override { shutdown_executor(); }

  std::string backend_name() const override { return "gloo"; }
  std::string transport() const override {
    if (!direct_.on()) return "gloo: tcp";
    return direct::Path::describe("gloo", "tcp below");
  }

 protected:
  void execute(const Collective& c) override;
  std::shared_ptr<ProcessGroup> make_subgroup(const std::vector<int>& ranks, int new_rank,
                                              int call_index) override;

 private:
  // The TCP path's PeerLink (comm/algorithms) over gloo's unbound buffers: each round takes one
  // slot of the context, and waits for all its transfers against one deadline.
  class Link final : public algorithms::PeerLink {
   public:
    explicit Link(GlooProcessGroup& group) : group_(group) {}
    // Every round of the collective that begins must end by `deadline`.
    void begin_collective(std::chrono::steady_clock::time_point deadline) { deadline_ = deadline; }

    int rank() const override { return group_.rank(); }
    int size() const override { return group_.size(); }
    void post_send(const void* data, std::size_t bytes, int peer) override {
      post(data, bytes, peer, true);
    }
    void post_recv(void* data, std::size_t bytes, int peer) override {
      post(data, bytes, peer, false);
    }
    void wait(const Collective& c, const char* phase) override;
    char* scratch(std::size_t bytes) override;

   private:
    struct Transfer {
      UnboundBuffer* buffer;
      int peer;
    };
    // A caller's buffer wrapped for this round.
    struct Wrapped {
      std::uintptr_t begin;
      std::size_t bytes;
      std::unique_ptr<UnboundBuffer> buffer;
    };

    // A failure while posting (gloo throws at once for a peer whose connection broke) is kept
    // for wait(), which reports it with the collective and the phase.
    void post(const void* data, std::size_t bytes, int peer, bool send);
    // The unbound buffer holding [data, data + bytes) and data's offset in it: the scratch
    // buffer's own, or a wrap of the caller's buffer kept until the round ends.
    std::pair<UnboundBuffer*, std::size_t> buffer_for(const void* data, std::size_t bytes);
    void end_round();

    GlooProcessGroup& group_;
    bool round_open_ = false;
    std::uint64_t slot_ = 0;
    std::chrono::steady_clock::time_point round_start_;
    // The collective's deadline (its start + the timeout): every round of it ends by then.
    std::chrono::steady_clock::time_point deadline_ = std::chrono::steady_clock::time_point::max();
    std::vector<Transfer> sends_, recvs_;
    std::vector<Wrapped> wrapped_;
    std::exception_ptr post_error_;
    int posting_peer_ = -1;  // the peer of post_error_
    std::vector<char> scratch_;
    std::unique_ptr<UnboundBuffer> scratch_buffer_;
  };

  // Breaks the group, throws CommError (CommTimeoutError when `timed_out`).
  [[noreturn]] void fail(const std::string& reason, bool timed_out);
  // Whether every rank can read the others' memory (same host, ptrace rights): then large
  // collectives take the direct path (comm/direct_access.h). FSDP_GLOO_DIRECT=0 turns it off.
  void probe_direct_access();

  InitOptions options_;
  std::shared_ptr<Store> store_;
  std::string prefix_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::rendezvous::Context> context_;
  Link link_{*this};
  bool broken_ = false;
  std::string broken_reason_;
  direct::Path direct_;
};

void GlooProcessGroup::fail(const std::string& reason, bool timed_out) {
  broken_ = true;
  broken_reason_ = reason;
  if (timed_out) throw CommTimeoutError(reason);
  throw CommError(reason);
}

char* GlooProcessGroup::Link::scratch(std::size_t bytes) {
  if (!scratch_buffer_ || scratch_.size() < bytes) {
    scratch_buffer_.reset();
    scratch_.clear();
    scratch_.shrink_to_fit();
    scratch_.resize(std::max<std::size_t>(bytes, 1));
    scratch_buffer_ = group_.context_->createUnboundBuffer(scratch_.data(), scratch_.size());
  }
  return scratch_.data();
}

std::pair<UnboundBuffer*, std::size_t> GlooProcessGroup::Link::buffer_for(const void* data,
                                                                          std::size_t bytes) {
  const auto at = reinterpret_cast<std::uintptr_t>(data);
  auto holds = [&](std::uintptr_t begin, std::size_t size) {
    return at >= begin && at + bytes <= begin + size;
  };
  if (scratch_buffer_ && holds(reinterpret_cast<std::uintptr_t>(scratch_.data()), scratch_.size()))
    return {scratch_buffer_.get(), at - reinterpret_cast<std::uintptr_t>(scratch_.data())};
  for (auto& w : wrapped_)
    if (holds(w.begin, w.bytes)) return {w.buffer.get(), at - w.begin};
  wrapped_.push_back(
      {at, bytes, group_.context_->createUnboundBuffer(const_cast<void*>(data), bytes)});
  return {wrapped_.back().buffer.get(), 0};
}

void GlooProcessGroup::Link::post(const void* data, std::size_t bytes, int peer, bool send) {
  if (!round_open_) {
    end_round();  // whatever a round left that threw before its wait
    round_open_ = true;
    slot_ = uint64_t(group_.context_->nextSlot());
    round_start_ = std::chrono::steady_clock::now();
  }
  if (bytes == 0 || post_error_) return;
  try {
    auto [buffer, offset] = buffer_for(data, bytes);
    if (send)
      buffer->send(peer, slot_, offset, bytes);
    else
      buffer->recv(peer, slot_, offset, bytes);
    (send ? sends_ : recvs_).push_back({buffer, peer});
  } catch (const std::exception&) {
    post_error_ = std::current_exception();
    posting_peer_ = peer;
  }
}

void GlooProcessGroup::Link::end_round() {
  round_open_ = false;
  sends_.clear();
  recvs_.clear();
  wrapped_.clear();
  post_error_ = nullptr;
  posting_peer_ = -1;
}

void GlooProcessGroup::Link::wait(const Collective& c, const char* phase) {
  std::vector<int> pending;  // the peers not heard from yet
  try {
    for (auto& r : recvs_) pending.push_back(r.peer);
    if (post_error_) std::rethrow_exception(post_error_);
    // One deadline for the whole collective, however many rounds and peers it waits for.
    const auto deadline = deadline_;
    auto left = [&] {
      return std::max(std::chrono::milliseconds(1),
                      std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now()));
    };
    for (auto& r : recvs_) {
      int source = -1;
      r.buffer->waitRecv(&source, left());
      pending.erase(std::remove(pending.begin(), pending.end(), source), pending.end());
    }
    // The receives are in; what is left to wait for is the sends' peers.
    for (auto& s : sends_) pending.push_back(s.peer);
    for (auto& s : sends_) {
      int target = -1;
      s.buffer->waitSend(&target, left());
      pending.erase(std::remove(pending.begin(), pending.end(), target), pending.end());
    }
  } catch (const std::exception& e) {
    // A peer whose connection broke while its transfer was being posted is the one to name.
    if (posting_peer_ >= 0 &&
        std::find(pending.begin(), pending.end(), posting_peer_) == pending.end())
      pending.insert(pending.begin(), posting_peer_);
    const bool timed_out = std::string(e.what()).find("imed out") != std::string::npos;
    // A timeout is said with the timeout; a peer that died is said when it was noticed.
    const auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::steady_clock::now() - round_start_)
                             .count();
    const auto timeout = group_.options_.timeout.count();
    const std::string reason = fmt::format(
        "{}: {} {} ({}){}: {}; gloo closed this group's connections, so it cannot be used again",
        group_.where(), describe(c),
        timed_out ? fmt::format("timed out after {} ms", timeout)
                  : fmt::format("failed after {} ms (timeout {} ms)", elapsed, timeout),
        phase,
        pending.empty() ? std::string() : " waiting for rank(s) " + group_.name_ranks(pending),
        e.what());
    end_round();
    group_.fail(reason, timed_out);
  }
  end_round();
}

void GlooProcessGroup::probe_direct_access() {
  if (size() < 2) return;
  const Collective barrier{};
  const direct::Probe probe(rank(), size());
  const direct::ProbeWord mine = probe.mine();
  std::vector<direct::ProbeWord> all(static_cast<std::size_t>(size()));
  algorithms::gather_bytes(link_, barrier, "direct-access probe", &mine, all.data(), sizeof mine);
  // Every rank says whether it could read every other; all must (and nobody frees its word
  // before every peer has read it: this exchange comes after all the reads).
  const char ok = env::gloo_direct() && probe.can_read_all(all, rank()) ? 1 : 0;
  std::vector<char> oks(static_cast<std::size_t>(size()));
  algorithms::gather_bytes(link_, barrier, "direct-access probe", &ok, oks.data(), 1);
  if (std::all_of(oks.begin(), oks.end(), [](char v) { return v == 1; }))
    direct_ = direct::Path(std::move(all), probe.mailbox());
}

void GlooProcessGroup::execute(const Collective& c) {
  if (broken_)
    throw CommAbortedError(fmt::format("{}: {} refused: an earlier collective failed: {}", where(),
                                       describe(c), broken_reason_));
  if (size() == 1) return run_single_rank(c);
  if (direct_.eligible(c)) {  // checks signatures through its descriptors
    direct::Transport t;
    t.require_matching = [&](const CollectiveSignature& mine,
                             const std::vector<CollectiveSignature>& theirs) {
      algorithms::require_matching(where(), rank(), mine, theirs);
    };
    t.fail = [&](const std::string& reason, bool timed_out) { fail(reason, timed_out); };
    t.where = where();
    t.name_ranks = [&](const std::vector<int>& ranks) { return name_ranks(ranks); };
    t.timeout = options_.timeout;
    return direct_.run(c, rank(), t);
  }
  link_.begin_collective(std::chrono::steady_clock::now() + options_.timeout);
  // The signature exchange doubles as the barrier (every rank hears from every other).
  algorithms::check_signatures(link_, c, where());
  if (c.bytes() > 0) algorithms::run(link_, c, kSmallAllReduceBytes);
}

std::shared_ptr<ProcessGroup> GlooProcessGroup::make_subgroup(const std::vector<int>& ranks,
                                                              int new_rank, int call_index) {
  if (new_rank < 0) return nullptr;
  return std::make_shared<GlooProcessGroup>(new_rank, int(ranks.size()), options_, store_,
                                            fmt::format("{}/group{}", prefix_, call_index),
                                            device_);
}

// gloo receives on its own device thread. A process bound to one CPU (mpirun binds each rank to
// a core by default) runs that thread and the caller's by turns, which made every collective
// 15-30x slower in our measurements (bench/comm): say so once, with the fix.
void warn_if_bound_to_one_cpu(int rank, int size) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0 || CPU_COUNT(&set) != 1) return;
  if (std::thread::hardware_concurrency() < 2) return;
  std::fprintf(stderr,
               "gloo rank %d/%d: warning: this process is bound to one CPU, which gloo's "
               "network thread must share with the caller (each collective then waits for time "
               "slices); launch with `mpirun --bind-to none` or give each rank two or more "
               "cores\n",
               rank, size);
}

// A peer that dies leaves its sockets closed; gloo's next write to one must fail as an error
// (EPIPE, reported with the peer's rank), not kill this process with SIGPIPE. Installed only
// when the program left SIGPIPE at its default action.
void ignore_default_sigpipe() {
  struct sigaction current {};
  if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL)
    std::signal(SIGPIPE, SIG_IGN);
}

// Names of this host's network interfaces, for a message.
std::string interface_names() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return "unknown";
  std::vector<std::string> names;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next)
    if (std::find(names.begin(), names.end(), i->ifa_name) == names.end())
      names.emplace_back(i->ifa_name);
  ::freeifaddrs(list);
  return join(names);
}

// The local IPv4 address of the route to `host` (a UDP socket's connect sends nothing): the
// address a peer that reaches `host` reaches this rank by.
std::string local_address_towards(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &found); rc != 0 || found == nullptr)
    throw CommError(
        fmt::format("gloo backend: cannot resolve MASTER_ADDR '{}': {}", host, ::gai_strerror(rc)));
  sockaddr_in peer{};
  std::memcpy(&peer, found->ai_addr, sizeof peer);
  ::freeaddrinfo(found);
  peer.sin_port = htons(std::uint16_t(port));
  const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in self{};
  socklen_t len = sizeof self;
  const bool ok = fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&peer), sizeof peer) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&self), &len) == 0;
  const int err = errno;
  if (fd >= 0) ::close(fd);
  if (!ok)
    throw CommError(fmt::format(
        "gloo backend: no route to MASTER_ADDR '{}' ({}): set FSDP_GLOO_IFNAME to the interface "
        "that reaches the other ranks",
        host, std::strerror(err)));
  char text[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &self.sin_addr, text, sizeof text);
  return text;
}

// What this rank's gloo pairs bind to (and advertise to the peers): FSDP_GLOO_HOSTNAME; else the
// interface FSDP_GLOO_IFNAME (or GLOO_SOCKET_IFNAME) names; else, with a TCP store, the local
// address of the route to MASTER_ADDR, so that ranks on other hosts can connect (issue 12: every
// rank advertised 127.0.0.1); else (a file store) loopback.
gloo::transport::tcp::attr device_attr(const InitOptions& o) {
  gloo::transport::tcp::attr attr;
  if (auto host = env::gloo_hostname()) {
    attr.hostname = *host;
  } else if (auto iface = env::gloo_ifname()) {
    if (::if_nametoindex(iface->c_str()) == 0)
      throw CommError(
          fmt::format("gloo backend: {}='{}' is not a network interface of this host (it has: {})",
                      env::gloo_ifname_variable(), *iface, interface_names()));
    attr.iface = *iface;
  } else if (o.file_store_path.empty()) {
    attr.hostname = local_address_towards(o.master_addr, o.master_port);
  } else {
    attr.hostname = "127.0.0.1";
  }
  return attr;
}

std::string describe_attr(const gloo::transport::tcp::attr& attr) {
  return attr.iface.empty() ? attr.hostname : "interface " + attr.iface;
}

std::shared_ptr<ProcessGroup> create_gloo_group(const InitOptions& options) {
  ignore_default_sigpipe();
  if (options.rank < 0 || options.world_size < 1 || options.rank >= options.world_size)
    throw ValueError(fmt::format(
        "gloo backend: needs rank and world_size (got rank {} of {}); set RANK/WORLD_SIZE, run "
        "under mpirun, or fill InitOptions",
        options.rank, options.world_size));
  if (options.timeout.count() <= 0)
    throw ValueError(fmt::format(
        "gloo backend: the timeout must be above 0 ms, got {} ms (InitOptions::timeout or "
        "FSDP_TIMEOUT_MS)",
        options.timeout.count()));
  gloo::transport::tcp::attr attr = device_attr(options);
  std::shared_ptr<gloo::transport::Device> device;
  try {
    device = gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    throw CommError(fmt::format("gloo backend rank {}: cannot create a TCP device on {}: {}",
                                options.rank, describe_attr(attr), plain_gloo_message(e.what())));
  }
  warn_if_bound_to_one_cpu(options.rank, options.world_size);
  auto store = make_store(options, options.rank);
  return std::make_shared<GlooProcessGroup>(options.rank, options.world_size, options,
                                            std::move(store), "world", device);
}

}  // namespace

void register_gloo_backend() {
  register_backend("gloo", create_gloo_group);
}

}  // namespace fsdp::comm
