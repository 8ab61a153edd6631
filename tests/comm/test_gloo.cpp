// Gloo backend, ranks as processes (mpirun or a shell loop), rendezvous through a file store or
// the TCP store: the collective matrix against the reference, subgroups, mismatch detection,
// timeouts, and store errors.
#define BOOST_TEST_MODULE comm_gloo
#include <boost/test/unit_test.hpp>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/errors.h"
#include "comm/registry.h"
#include "comm/store/tcp_store.h"
#include "tests/comm/collective_checks.h"

using namespace fsdp;
using namespace fsdp::comm;
using namespace std::chrono_literals;

namespace {

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

int next_group = 0;

// A fresh world group per call (new store prefix), so tests do not share connections.
std::shared_ptr<ProcessGroup> world(InitOptions o = {}) {
  o = options_from_env(o);
  if (o.rank < 0) {
    std::puts("no RANK/WORLD_SIZE or mpirun environment: skipping");
    std::exit(77);
  }
  o.group_name = "test" + std::to_string(next_group++);
  if (!o.file_store_path.empty()) return create_process_group("gloo", o);
  o.master_port += next_group;  // a TCP store per group: each one's rank 0 hosts a server
  return create_process_group("gloo", o);
}

void report(const std::vector<std::string>& failures) {
  for (std::size_t i = 0; i < failures.size() && i < 20; ++i) BOOST_ERROR(failures[i]);
  BOOST_TEST(failures.empty());
}

}  // namespace

BOOST_AUTO_TEST_CASE(collective_matrix) {
  auto pg = world();
  BOOST_TEST(pg->backend_name() == "gloo");
  auto m = testing::default_matrix(pg->size());
  m.large_count = 3 << 20;  // several MB per rank
  report(testing::run_collective_matrix(*pg, m));
}

BOOST_AUTO_TEST_CASE(subgroups_and_hybrid_split) {
  auto pg = world();
  const int n = pg->size(), me = pg->rank();
  std::vector<int> reversed;
  for (int r = n - 1; r >= 0; --r) reversed.push_back(r);
  auto rev = pg->new_group(reversed);
  BOOST_REQUIRE(rev);
  BOOST_TEST(rev->rank() == n - 1 - me);
  std::int32_t v = me, all[8];
  rev->all_gather(&v, all, 1, DType::Int32);
  BOOST_TEST(all[0] == n - 1);
  if (n % 2 == 0) {
    HybridGroups h = split_hybrid(*pg, 2);
    BOOST_REQUIRE(h.shard && h.replicate);
    std::int64_t x = me;
    h.shard->all_reduce(&x, 1, DType::Int64);
    BOOST_TEST(x == (me / 2) * 4 + 1);
  }
}

BOOST_AUTO_TEST_CASE(mismatched_dtypes_are_reported) {
  auto pg = world();
  std::vector<std::uint8_t> buf(64);
  DType t = pg->rank() == 0 ? DType::Float32 : DType::Int32;
  try {
    pg->all_reduce(buf.data(), 4, t);
    BOOST_ERROR("expected CommMismatchError");
  } catch (const CommMismatchError& e) {
    BOOST_TEST(e.what() == testing::expected_dtype_mismatch(*pg, 4));
  }
  float x = 1;
  pg->all_reduce(&x, 1, DType::Float32);  // still usable afterwards
  BOOST_TEST(x == float(pg->size()));
}

// Ranks on one host read each other's memory unless FSDP_GLOO_DIRECT=0 (comm/direct_access.h);
// either way a large call with another dtype is a mismatch, and the group stays usable.
BOOST_AUTO_TEST_CASE(transport_follows_FSDP_GLOO_DIRECT_and_large_mismatches_are_caught) {
  auto pg = world();
  const char* direct = std::getenv("FSDP_GLOO_DIRECT");
  BOOST_TEST_MESSAGE(pg->transport());
  // Where the ranks may not read each other (no ptrace rights) the probe falls back to TCP.
  if (direct && std::string(direct) == "0")
    BOOST_TEST(pg->transport() == "gloo: tcp");
  else
    BOOST_TEST((pg->transport() == "gloo: tcp" ||
                pg->transport() ==
                    "gloo: direct reads of peer memory (process_vm_readv) from 16 KiB per rank, "
                    "tcp below"));
  std::vector<std::uint8_t> buf(std::size_t(1) << 20);
  const DType t = pg->rank() == 0 ? DType::Float32 : DType::Int32;
  try {
    pg->all_reduce(buf.data(), buf.size() / 4, t);
    BOOST_ERROR("expected CommMismatchError");
  } catch (const CommMismatchError& e) {
    BOOST_TEST(e.what() == testing::expected_dtype_mismatch(*pg, buf.size() / 4));
  }
  // A subgroup probes again: the reversed world all-gathers 64 KiB per rank.
  std::vector<int> reversed;
  for (int r = pg->size() - 1; r >= 0; --r) reversed.push_back(r);
  auto rev = pg->new_group(reversed);
  BOOST_REQUIRE(rev);
  BOOST_TEST(rev->transport() == pg->transport());
  const std::size_t count = 16384;
  std::vector<float> mine(count, float(pg->rank())), all(count * std::size_t(pg->size()));
  rev->all_gather(mine.data(), all.data(), count, DType::Float32);
  for (int r = 0; r < pg->size(); ++r)
    BOOST_TEST(all[std::size_t(r) * count + count - 1] == float(pg->size() - 1 - r));
}

BOOST_AUTO_TEST_CASE(a_rank_that_never_joins_times_out_naming_it) {
  InitOptions o;
  o.timeout = 500ms;
  auto pg = world(o);
  const int n = pg->size();
  if (pg->rank() != n - 1) {
    float x = 1;
    auto start = std::chrono::steady_clock::now();
    try {
      pg->all_reduce(&x, 1, DType::Float32);
      BOOST_ERROR("expected a timeout");
    } catch (const CommTimeoutError& e) {
      BOOST_TEST_MESSAGE(e.what());
      BOOST_TEST(has(e.what(), "gloo rank"));
      BOOST_TEST(has(e.what(), "all_reduce"));
      // Under heavy oversubscription a slow but present rank may be listed too.
      std::string what = e.what();
      auto listed = what.find("rank(s) ");
      BOOST_REQUIRE(listed != std::string::npos);
      BOOST_TEST(has(what.substr(listed, what.find(':', listed) - listed), std::to_string(n - 1)));
    }
    BOOST_TEST((std::chrono::steady_clock::now() - start < 10s));
  } else {
    std::this_thread::sleep_for(1500ms);  // absent for the others' whole timeout
  }
  world()->barrier();
}

BOOST_AUTO_TEST_CASE(tcp_store_port_in_use_is_a_clear_error) {
  auto pg = world();
  if (pg->rank() != 0) return;
  InitOptions o = options_from_env();
  // The first store takes a port that is free now (a fixed guess may collide with an ephemeral
  // port of another connection); the second must then fail on it.
  int port = 40000 + int(::getpid() % 20000);
  std::unique_ptr<TcpStore> first;
  for (int attempt = 0; attempt < 50; ++attempt) {
    try {
      first = std::make_unique<TcpStore>("127.0.0.1", port, true, "a", 2s);
      break;
    } catch (const CommError&) {
      port = 40000 + (port + 7919) % 20000;
    }
  }
  BOOST_REQUIRE(first != nullptr);
  try {
    TcpStore second("127.0.0.1", port, true, "b", 2s);
    BOOST_ERROR("expected an error");
  } catch (const CommError& e) {
    BOOST_TEST(has(e.what(), "already in use"));
    BOOST_TEST(has(e.what(), std::to_string(port)));
  }
}

// Last in the file: the last rank ends its process. A peer that dies is reported as a failure
// with the time it took to notice, not as the timeout (issue 12: "failed after 10000 ms").
BOOST_AUTO_TEST_CASE(a_rank_that_dies_is_reported_as_failed_not_timed_out) {
  InitOptions o;
  o.timeout = 60s;
  auto pg = world(o);
  const int n = pg->size();
  pg->barrier();  // every pair connected
  if (pg->rank() == n - 1) {
    std::fflush(nullptr);
    std::_Exit(0);  // dies at once, closing its connections
  }
  float x = 1;
  try {
    pg->all_reduce(&x, 1, DType::Float32);
    BOOST_ERROR("expected an error");
  } catch (const CommTimeoutError& e) {
    BOOST_ERROR("a dead peer reported as a timeout: " << e.what());
  } catch (const CommError& e) {
    BOOST_TEST_MESSAGE(e.what());
    BOOST_TEST(has(e.what(), "all_reduce"));
    BOOST_TEST(has(e.what(), " failed after "));
    BOOST_TEST(has(e.what(), " ms (timeout 60000 ms)"));
    BOOST_TEST(!has(e.what(), "after 60000 ms"));
  }
}
