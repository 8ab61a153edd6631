// The pairwise algorithms of comm/algorithms alone, over an in-memory PeerLink (ranks as
// threads, messages through per-pair queues): the collective matrix at world sizes 1-5, with
// all_reduce forced into each of its two forms; the mismatch check's message; a missing rank's
// timeout naming the round. The MPI and Gloo suites run the same code over their transports.
#define BOOST_TEST_MODULE comm_pairwise
#include <fmt/format.h>

#include <boost/test/unit_test.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/algorithms/pairwise.h"
#include "comm/algorithms/signature_check.h"
#include "comm/errors.h"
#include "comm/join.h"
#include "comm/process_group.h"
#include "tests/comm/collective_checks.h"

using namespace fsdp;
using namespace fsdp::comm;
using namespace std::chrono_literals;

namespace {

// Every rank's outgoing messages, one FIFO queue per (sender, receiver) pair.
struct Mesh {
  explicit Mesh(int ranks) : n(ranks), queues(std::size_t(ranks * ranks)) {}
  std::deque<std::vector<char>>& queue(int from, int to) {
    return queues[std::size_t(from * n + to)];
  }
  int n;
  std::mutex mutex;
  std::condition_variable arrived;
  std::vector<std::deque<std::vector<char>>> queues;
};

// Sends are copied into the receiver's queue at once; wait() takes each posted receive's message
// in order, within the timeout.
class MemoryLink final : public algorithms::PeerLink {
 public:
  MemoryLink(Mesh& mesh, int rank, std::chrono::milliseconds timeout)
      : mesh_(mesh), rank_(rank), timeout_(timeout) {}

  int rank() const override { return rank_; }
  int size() const override { return mesh_.n; }
  void post_send(const void* data, std::size_t bytes, int peer) override {
    const char* at = static_cast<const char*>(data);
    std::lock_guard lock(mesh_.mutex);
    mesh_.queue(rank_, peer).emplace_back(at, at + bytes);
    mesh_.arrived.notify_all();
  }
  void post_recv(void* data, std::size_t bytes, int peer) override {
    recvs_.push_back({static_cast<char*>(data), bytes, peer});
  }
  void wait(const Collective& c, const char* phase) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    std::vector<Recv> recvs;
    recvs.swap(recvs_);
    std::unique_lock lock(mesh_.mutex);
    for (std::size_t i = 0; i < recvs.size(); ++i) {
      const Recv& r = recvs[i];
      auto& queue = mesh_.queue(r.peer, rank_);
      if (!mesh_.arrived.wait_until(lock, deadline, [&] { return !queue.empty(); })) {
        std::vector<int> missing;
        for (std::size_t j = i; j < recvs.size(); ++j)
          if (mesh_.queue(recvs[j].peer, rank_).empty()) missing.push_back(recvs[j].peer);
        throw CommTimeoutError(
            fmt::format("memory rank {}: {} timed out ({}) waiting for rank(s) {}", rank_,
                        describe(c), phase, join(missing)));
      }
      std::vector<char> message = std::move(queue.front());
      queue.pop_front();
      if (message.size() != r.bytes)
        throw CommMismatchError(
            fmt::format("memory rank {}: {} ({}): rank {} sent {} bytes, {} expected", rank_,
                        describe(c), phase, r.peer, message.size(), r.bytes));
      if (r.bytes > 0) std::memcpy(r.data, message.data(), r.bytes);
    }
  }
  char* scratch(std::size_t bytes) override {
    if (scratch_.size() < bytes) scratch_.resize(bytes);
    return scratch_.data();
  }

 private:
  struct Recv {
    char* data;
    std::size_t bytes;
    int peer;
  };
  Mesh& mesh_;
  int rank_;
  std::chrono::milliseconds timeout_;
  std::vector<Recv> recvs_;
  std::vector<char> scratch_;
};

// A process group that runs everything through the algorithms, as the Gloo backend's TCP path
// does.
class MemoryGroup final : public ProcessGroup {
 public:
  MemoryGroup(Mesh& mesh, int rank, std::chrono::milliseconds timeout,
              std::size_t single_exchange_max_bytes)
      : ProcessGroup(rank, mesh.n),
        link_(mesh, rank, timeout),
        single_exchange_max_bytes_(single_exchange_max_bytes) {}
  ~MemoryGroup() override { shutdown_executor(); }
  std::string backend_name() const override { return "memory"; }

 protected:
  void execute(const Collective& c) override {
    if (size() == 1) return run_single_rank(c);
    algorithms::check_signatures(link_, c, where());
    algorithms::run(link_, c, single_exchange_max_bytes_);
  }
  std::shared_ptr<ProcessGroup> make_subgroup(const std::vector<int>&, int, int) override {
    throw UnsupportedCollectiveError("memory groups have no subgroups");
  }

 private:
  MemoryLink link_;
  std::size_t single_exchange_max_bytes_;
};

// Runs body(group) on `world` rank threads; returns what they report, errors included.
std::vector<std::string> run_ranks(
    int world, std::size_t single_exchange_max_bytes, std::chrono::milliseconds timeout,
    const std::function<std::vector<std::string>(ProcessGroup&)>& body) {
  Mesh mesh(world);
  std::mutex mutex;
  std::vector<std::string> reports;
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      std::vector<std::string> mine;
      try {
        MemoryGroup group(mesh, r, timeout, single_exchange_max_bytes);
        mine = body(group);
      } catch (const std::exception& e) {
        mine.push_back(fmt::format("rank {} threw: {}", r, e.what()));
      }
      std::lock_guard lock(mutex);
      reports.insert(reports.end(), mine.begin(), mine.end());
    });
  for (auto& t : threads) t.join();
  return reports;
}

void report(const std::vector<std::string>& failures) {
  for (std::size_t i = 0; i < failures.size() && i < 20; ++i) BOOST_ERROR(failures[i]);
  BOOST_TEST(failures.empty());
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

// all_reduce below and above its single-exchange size: 0 forces the two phases for every count
// (shares of 0 elements included), the maximum forces one exchange of whole buffers.
BOOST_AUTO_TEST_CASE(collective_matrix_in_both_all_reduce_forms) {
  for (std::size_t single_max : {std::size_t(0), std::numeric_limits<std::size_t>::max()})
    for (int world : {1, 2, 3, 4, 5}) {
      BOOST_TEST_CONTEXT("world " << world << ", single exchange up to " << single_max) {
        auto m = testing::default_matrix(world);
        m.large_count = 100003;  // odd, several pages per rank
        report(run_ranks(world, single_max, 10s,
                         [&](ProcessGroup& pg) { return testing::run_collective_matrix(pg, m); }));
      }
    }
}

BOOST_AUTO_TEST_CASE(mismatched_calls_name_both_calls_and_the_peer) {
  report(run_ranks(3, 64, 10s, [](ProcessGroup& pg) -> std::vector<std::string> {
    std::vector<std::uint8_t> buf(64);
    const DType t = pg.rank() == 0 ? DType::Float32 : DType::Int32;
    try {
      pg.all_reduce(buf.data(), 4, t);
      return {"no error"};
    } catch (const CommMismatchError& e) {
      const std::string expected = testing::expected_dtype_mismatch(pg, 4);
      if (e.what() == expected) return {};
      return {fmt::format("got '{}', expected '{}'", e.what(), expected)};
    }
  }));
}

BOOST_AUTO_TEST_CASE(a_missing_rank_times_out_in_the_signature_exchange_naming_it) {
  const auto reports = run_ranks(3, 64, 200ms, [](ProcessGroup& pg) {
    if (pg.rank() == 2) return std::vector<std::string>{};
    float x = 1;
    try {
      pg.all_reduce(&x, 1, DType::Float32);
      return std::vector<std::string>{"no error"};
    } catch (const CommTimeoutError& e) {
      return std::vector<std::string>{e.what()};
    }
  });
  BOOST_REQUIRE(reports.size() == 2);
  for (const auto& what : reports) {
    BOOST_TEST_MESSAGE(what);
    BOOST_TEST(has(what, "all_reduce(count=1, dtype=float32"));
    BOOST_TEST(has(what, "(signature exchange) waiting for rank(s) 2"));
  }
}
