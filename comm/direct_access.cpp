#include "comm/direct_access.h"

#include <fmt/format.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstddef>
#include <cstring>
#include <thread>

#include "comm/join.h"
#include "comm/reduce_kernels.h"

namespace fsdp::comm::direct {

// Messages alternate between two slots per sender. A rank can be at most one exchange ahead of
// a peer still reading (it needs the peer's message k + 1 to finish exchange k + 1, and the peer
// sends that only after reading message k), so message k + 2 never overwrites an unread k.
constexpr int kSlotsPerSender = 2;

struct alignas(64) Slot {
  std::uint64_t sequence;         // written last: the exchange whose payload is here
  unsigned char payload[64 - 8];  // written first
};

struct Mailbox {
  explicit Mailbox(int size) : slots(std::size_t(kSlotsPerSender) * std::size_t(size)) {}
  std::vector<Slot> slots;  // [sequence % 2][sender]
};

namespace {

// Bytes read from each peer per reduction step: the pieces of all peers fit in a 512 KiB L2.
std::size_t piece_bytes(int n) {
  const std::size_t per_peer = (std::size_t(512) << 10) / std::size_t(std::max(1, n - 1));
  return std::clamp<std::size_t>(per_peer, std::size_t(32) << 10, std::size_t(256) << 10) &
         ~std::size_t(63);
}

// What a rank tells its peers when it enters a direct collective.
struct Descriptor {
  CollectiveSignature signature;
  std::uint64_t address;  // the buffer peers read from: input (all_gather, reduce_scatter) or data
};
static_assert(sizeof(Descriptor) <= sizeof(Slot::payload));

// A whole small all_reduce in one message: the call's signature and this rank's data.
constexpr std::size_t kSmallBytes = sizeof(Slot::payload) - sizeof(CollectiveSignature);
struct SmallMessage {
  CollectiveSignature signature;
  unsigned char data[kSmallBytes];
};
static_assert(sizeof(SmallMessage) <= sizeof(Slot::payload));

// Reads `bytes` at `remote` of process `pid`; returns 0 or the errno of the failure.
int read_process(pid_t pid, std::uint64_t remote, void* local, std::size_t bytes) {
  char* to = static_cast<char*>(local);
  while (bytes > 0) {
    iovec l{to, bytes};
    iovec r{reinterpret_cast<void*>(remote), bytes};
    const ssize_t got = process_vm_readv(pid, &l, 1, &r, 1, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (got == 0) return EFAULT;
    to += got;
    remote += std::uint64_t(got);
    bytes -= std::size_t(got);
  }
  return 0;
}

// Writes `bytes` at `local` to `remote` of process `pid`; returns 0 or the errno of the failure.
int write_process(pid_t pid, std::uint64_t remote, const void* local, std::size_t bytes) {
  const char* from = static_cast<const char*>(local);
  while (bytes > 0) {
    iovec l{const_cast<char*>(from), bytes};
    iovec r{reinterpret_cast<void*>(remote), bytes};
    const ssize_t put = process_vm_writev(pid, &l, 1, &r, 1, 0);
    if (put < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (put == 0) return EFAULT;
    from += put;
    remote += std::uint64_t(put);
    bytes -= std::size_t(put);
  }
  return 0;
}

// Why reading or writing a peer's memory failed, from its errno.
std::string access_error(int err) {
  if (err == ESRCH) return "its process is gone";
  if (err == EPERM) return "permission denied (run with FSDP_MPI_DIRECT=0 or FSDP_GLOO_DIRECT=0)";
  if (err == EFAULT) return "its buffer is not there (freed, or smaller than the call says)";
  return std::strerror(err);
}

// The value a rank's probe word holds: tied to the rank and the word's address, so that reading
// some other process that happens to have the same pid (another host's or pid namespace's rank)
// cannot pass.
std::uint64_t probe_value(int rank, std::uint64_t address) {
  return 0x6673647064697265ULL ^ (std::uint64_t(rank) << 48) ^ address;
}

}  // namespace

Probe::Probe(int rank, int size)
    : rank_(rank),
      word_(std::make_unique<std::uint64_t>(0)),
      mailbox_(std::make_shared<Mailbox>(size)) {
  *word_ = probe_value(rank, reinterpret_cast<std::uint64_t>(word_.get()));
}

Probe::~Probe() = default;

ProbeWord Probe::mine() const {
  return {std::int64_t(getpid()), reinterpret_cast<std::uint64_t>(word_.get()),
          reinterpret_cast<std::uint64_t>(mailbox_->slots.data())};
}

bool Probe::can_read_all(const std::vector<ProbeWord>& all, int rank) const {
#if !defined(__x86_64__)
  return false;  // the mailboxes rely on x86-64's store order (Path::exchange)
#endif
  for (int r = 0; r < int(all.size()); ++r) {
    if (r == rank) continue;
    std::uint64_t value = 0;
    const ProbeWord& peer = all[std::size_t(r)];
    if (read_process(pid_t(peer.pid), peer.address, &value, sizeof value) != 0 ||
        value != probe_value(r, peer.address))
      return false;
  }
  return true;
}

std::string Path::describe(const std::string& backend, const std::string& below) {
  return fmt::format("{}: direct reads of peer memory (process_vm_readv) from {} KiB per rank, {}",
                     backend, kMinBytes >> 10, below);
}

Path::Path(std::vector<ProbeWord> all, std::shared_ptr<Mailbox> mailbox)
    : peers_(std::move(all)), mailbox_(std::move(mailbox)) {}

bool Path::eligible(const Collective& c) const {
  if (peers_.empty()) return false;
  // A barrier or a small all_reduce (a loss, a norm) is one message through the mailboxes.
  if (c.kind == CollectiveKind::Barrier) return true;
  if (c.kind == CollectiveKind::AllReduce && c.bytes() <= kSmallBytes) return true;
  if (c.bytes() < kMinBytes) return false;
  return c.kind == CollectiveKind::AllGather || c.kind == CollectiveKind::ReduceScatter ||
         c.kind == CollectiveKind::AllReduce;
}

void Path::run_small(const Collective& c, int me, const Transport& t) {
  const int n = int(peers_.size());
  SmallMessage mine{};
  mine.signature = CollectiveSignature::of(c);
  if (c.kind == CollectiveKind::AllReduce && c.bytes() > 0)
    std::memcpy(mine.data, c.output, c.bytes());
  std::vector<SmallMessage> theirs(static_cast<std::size_t>(n));
  exchange(&mine, theirs.data(), sizeof mine, "small message exchange", me, c, t);
  theirs[std::size_t(me)] = mine;
  std::vector<CollectiveSignature> signatures;
  for (const auto& m : theirs) signatures.push_back(m.signature);
  t.require_matching(mine.signature, signatures);
  if (c.kind == CollectiveKind::Barrier || c.bytes() == 0) return;
  // Every rank reduces all n contributions in rank order, the same result as the two phases.
  std::vector<const void*> inputs;
  for (const auto& m : theirs) inputs.push_back(m.data);
  reduce_buffers(c.op, c.dtype, c.output, inputs.data(), n, c.count, n);
}

void Path::exchange(const void* mine, void* theirs, std::size_t bytes, const char* phase, int me,
                    const Collective& c, const Transport& t) {
  const int n = int(peers_.size());
  const std::uint64_t sequence = ++sequence_;
  const auto start = std::chrono::steady_clock::now();
  // "failed after 12 ms (timeout 60000 ms) (completion)", as the backends say it.
  auto failed = [&] {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::steady_clock::now() - start)
                        .count();
    return fmt::format("{}: {} failed after {} ms (timeout {} ms) ({})", t.where, comm::describe(c),
                       ms, t.timeout.count(), phase);
  };
  const std::size_t row = std::size_t(sequence % kSlotsPerSender) * std::size_t(n);
  const std::size_t slot = row + std::size_t(me);
  for (int k = 1; k < n; ++k) {
    const int to = (me + k) % n;
    const ProbeWord& peer = peers_[std::size_t(to)];
    const std::uint64_t at = peer.mailbox + slot * sizeof(Slot);
    // Payload first, sequence number second, in two calls: the peer sees the number only
    // after the payload is in place (x86-64 keeps stores in order; another architecture would
    // need a fence between the two writes' stores, which user space cannot add to the kernel's).
    int err = write_process(pid_t(peer.pid), at + offsetof(Slot, payload), mine, bytes);
    if (err == 0) err = write_process(pid_t(peer.pid), at, &sequence, sizeof sequence);
    if (err != 0)
      t.fail(fmt::format("{}: writing to rank {} (pid {}): {}", failed(), to, peer.pid,
                         access_error(err)),
             false);
  }
  std::vector<int> waiting;
  for (int k = 1; k < n; ++k) waiting.push_back((me - k + n) % n);
  const auto spin_until = start + std::chrono::microseconds(200);
  const auto deadline = start + t.timeout;
  auto arrived = [&](int from) {
    Slot& s = mailbox_->slots[row + std::size_t(from)];
    return std::atomic_ref<std::uint64_t>(s.sequence).load(std::memory_order_acquire) == sequence;
  };
  for (unsigned polls = 0;; ++polls) {
    for (std::size_t i = 0; i < waiting.size();) {
      const int from = waiting[i];
      if (arrived(from)) {
        const Slot& s = mailbox_->slots[row + std::size_t(from)];
        std::memcpy(static_cast<char*>(theirs) + std::size_t(from) * bytes, s.payload, bytes);
        waiting.erase(waiting.begin() + std::ptrdiff_t(i));
      } else {
        ++i;
      }
    }
    if (waiting.empty()) return;
    // Spin, then give the core away between polls (ranks may outnumber cores), as MPI does.
    if (polls > 64 && std::chrono::steady_clock::now() > spin_until) std::this_thread::yield();
    if ((polls & 255) != 0) continue;
    // A peer that is gone fails the call, unless its message came in before it left.
    for (int from : waiting)
      if (::kill(pid_t(peers_[std::size_t(from)].pid), 0) != 0 && errno == ESRCH && !arrived(from))
        t.fail(fmt::format("{} waiting for rank(s) {}: rank {}'s process (pid {}) is gone",
                           failed(), t.name_ranks(waiting), from, peers_[std::size_t(from)].pid),
               false);
    if (std::chrono::steady_clock::now() > deadline)
      t.fail(
          fmt::format("{}: {} timed out after {} ms ({}) waiting for rank(s) {}; this group "
                      "cannot be used again",
                      t.where, comm::describe(c), t.timeout.count(), phase, t.name_ranks(waiting)),
          true);
  }
}

void Path::read_peer(int peer, std::uint64_t remote, void* local, std::size_t bytes,
                     const Collective& c, const Transport& t) {
  const pid_t pid = pid_t(peers_[std::size_t(peer)].pid);
  const int err = read_process(pid, remote, local, bytes);
  if (err == 0) return;
  t.fail(fmt::format("{}: {}: reading {} bytes at {:#x} of rank {} (pid {}) failed: {}", t.where,
                     comm::describe(c), bytes, remote, peer, pid, access_error(err)),
         false);
}

void Path::run(const Collective& c, int me, const Transport& t) {
  if (c.kind == CollectiveKind::Barrier || c.bytes() <= kSmallBytes) return run_small(c, me, t);
  const int n = int(peers_.size());
  const std::size_t elem = dtype_size(c.dtype);

  // 1. Descriptors: every peer has entered this call, with the same signature.
  const void* shared = c.kind == CollectiveKind::AllReduce ? c.output : c.input;
  const Descriptor mine{CollectiveSignature::of(c), reinterpret_cast<std::uint64_t>(shared)};
  std::vector<Descriptor> theirs(static_cast<std::size_t>(n));
  exchange(&mine, theirs.data(), sizeof(Descriptor), "descriptor exchange", me, c, t);
  std::vector<CollectiveSignature> signatures;
  for (const auto& d : theirs) signatures.push_back(d.signature);
  t.require_matching(mine.signature, signatures);

  // Reduces elements [0, count) of the ranks' buffers (at byte offset `base` in each) into
  // `out`, piece by piece; this rank's own elements are at `local`.
  auto reduce_range = [&](std::size_t base, const char* local, char* out, std::size_t count) {
    const std::size_t piece = std::max<std::size_t>(1, piece_bytes(n) / elem);
    if (pieces_.size() < piece * elem * std::size_t(n))
      pieces_.assign(piece * elem * std::size_t(n), 0);
    std::vector<const void*> inputs(static_cast<std::size_t>(n));
    for (std::size_t first = 0; first < count; first += piece) {
      const std::size_t len = std::min(piece, count - first);
      for (int r = 0; r < n; ++r) {
        if (r == me) {
          inputs[std::size_t(r)] = local + first * elem;
          continue;
        }
        char* landing = pieces_.data() + std::size_t(r) * piece * elem;
        read_peer(r, theirs[std::size_t(r)].address + base + first * elem, landing, len * elem, c,
                  t);
        inputs[std::size_t(r)] = landing;
      }
      reduce_buffers(c.op, c.dtype, out + first * elem, inputs.data(), n, len, n);
    }
  };

  // 2. The data.
  char token = 1;
  std::vector<char> tokens(static_cast<std::size_t>(n));
  switch (c.kind) {
    case CollectiveKind::AllGather: {
      const std::size_t bytes = c.bytes();
      char* out = static_cast<char*>(c.output);
      for (int k = 1; k < n; ++k) {
        const int from = (me + k) % n;
        read_peer(from, theirs[std::size_t(from)].address, out + std::size_t(from) * bytes, bytes,
                  c, t);
      }
      if (c.input != out + std::size_t(me) * bytes)
        std::memcpy(out + std::size_t(me) * bytes, c.input, bytes);
      break;
    }
    case CollectiveKind::ReduceScatter: {
      const std::size_t offset = std::size_t(me) * c.bytes();
      reduce_range(offset, static_cast<const char*>(c.input) + offset, static_cast<char*>(c.output),
                   c.count);
      break;
    }
    case CollectiveKind::AllReduce: {
      char* data = static_cast<char*>(c.output);
      const auto [begin, end] = share_of(c.count, n, me);
      reduce_range(begin * elem, data + begin * elem, data + begin * elem, end - begin);
      // Peers may read this rank's share once it is reduced, and vice versa.
      exchange(&token, tokens.data(), 1, "reduced shares", me, c, t);
      for (int k = 1; k < n; ++k) {
        const int from = (me + k) % n;
        const auto [b, e] = share_of(c.count, n, from);
        read_peer(from, theirs[std::size_t(from)].address + b * elem, data + b * elem,
                  (e - b) * elem, c, t);
      }
      break;
    }
    default:
      break;
  }

  // 3. Nobody returns (and reuses its buffer) while a peer may still be reading it.
  exchange(&token, tokens.data(), 1, "completion", me, c, t);
}

}  // namespace fsdp::comm::direct
