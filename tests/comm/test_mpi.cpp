// MPI backend under mpirun -np 2..4: the collective matrix against the reference, subgroups,
// mismatch detection and the timeout of a rank that never joins.
#define BOOST_TEST_MODULE comm_mpi
#include <boost/test/unit_test.hpp>
#include <cstdlib>
#include <thread>

#include "comm/errors.h"
#include "comm/registry.h"
#include "tests/comm/collective_checks.h"

using namespace fsdp;
using namespace fsdp::comm;
using namespace std::chrono_literals;

namespace {

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::shared_ptr<ProcessGroup> world(InitOptions o = {}) {
  if (std::getenv("OMPI_COMM_WORLD_RANK") == nullptr) {
    std::puts("not started by mpirun: skipping");
    std::exit(77);
  }
  return init_process_group("mpi", o);
}

void report(const std::vector<std::string>& failures) {
  for (std::size_t i = 0; i < failures.size() && i < 20; ++i) BOOST_ERROR(failures[i]);
  BOOST_TEST(failures.empty());
}

}  // namespace

BOOST_AUTO_TEST_CASE(init_from_env_picks_mpi) {
  auto pg = world();
  BOOST_TEST(pg->backend_name() == "mpi");
  auto env_pg = init_from_env();
  BOOST_TEST(env_pg->backend_name() == "mpi");
  BOOST_TEST(env_pg->size() == pg->size());
}

BOOST_AUTO_TEST_CASE(collective_matrix) {
  auto pg = world();
  auto m = testing::default_matrix(pg->size());
  // Above the direct path's threshold, over several of its pieces, for every dtype and op (the
  // FSDP_MPI_DIRECT=0 runs send the same counts as messages).
  m.counts.push_back(70001);
  m.large_count = 3 << 20;  // several MB per rank
  report(testing::run_collective_matrix(*pg, m));
}

BOOST_AUTO_TEST_CASE(collective_matrix_with_signature_checks) {
  InitOptions o;
  o.check_signatures = true;
  auto pg = world(o);
  auto m = testing::default_matrix(pg->size());
  m.dtypes = {DType::Float32, DType::BFloat16, DType::Int64};
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
  auto first = pg->new_group({0});
  BOOST_TEST(bool(first) == (me == 0));
  if (n % 2 == 0) {
    HybridGroups h = split_hybrid(*pg, 2);
    BOOST_REQUIRE(h.shard && h.replicate);
    std::int64_t v = me;
    h.shard->all_reduce(&v, 1, DType::Int64);
    BOOST_TEST(v == (me / 2) * 4 + 1);  // {0,1} -> 1, {2,3} -> 5
    BOOST_TEST(h.replicate->size() == n / 2);
  }
}

BOOST_AUTO_TEST_CASE(mismatched_counts_fail_instead_of_corrupting) {
  auto pg = world();
  std::vector<float> in(16, 1.f), out(16 * std::size_t(pg->size()));
  std::size_t count = pg->rank() == 1 ? 15 : 16;
  BOOST_CHECK_THROW(pg->all_gather(in.data(), out.data(), count, DType::Float32), CommError);
}

BOOST_AUTO_TEST_CASE(mismatched_dtypes_are_caught_by_signature_checks) {
  InitOptions o;
  o.check_signatures = true;
  auto pg = world(o);
  std::vector<std::uint8_t> buf(64);
  DType t = pg->rank() == 0 ? DType::Float32 : DType::Int32;  // same bytes, different dtype
  try {
    pg->all_reduce(buf.data(), 4, t);
    BOOST_ERROR("expected CommMismatchError");
  } catch (const CommMismatchError& e) {
    BOOST_TEST(e.what() == testing::expected_dtype_mismatch(*pg, 4));
  }
}

BOOST_AUTO_TEST_CASE(large_mismatched_calls_are_always_caught) {
  // Same bytes, different dtypes, without check_signatures: the direct path's descriptors carry
  // the signature (the message path sees matching byte counts: that needs check_signatures).
  auto pg = world();
  BOOST_TEST_MESSAGE(pg->transport());
  const char* direct_env = std::getenv("FSDP_MPI_DIRECT");
  if (direct_env && std::string(direct_env) == "0") BOOST_TEST(pg->transport() == "mpi: messages");
  std::vector<std::uint8_t> buf(std::size_t(1) << 20);
  DType t = pg->rank() == 0 ? DType::Float32 : DType::Int32;
  if (has(pg->transport(), "direct")) {
    try {
      pg->all_reduce(buf.data(), buf.size() / 4, t);
      BOOST_ERROR("expected CommMismatchError");
    } catch (const CommMismatchError& e) {
      BOOST_TEST(e.what() == testing::expected_dtype_mismatch(*pg, buf.size() / 4));
    }
  }
  // Different counts fail on every path.
  std::vector<float> in(1 << 16, 1.f), out((1 << 16) * std::size_t(pg->size()));
  const std::size_t count = pg->rank() == 1 ? (1 << 16) - 1 : 1 << 16;
  BOOST_CHECK_THROW(pg->all_gather(in.data(), out.data(), count, DType::Float32), CommError);
}

BOOST_AUTO_TEST_CASE(a_rank_that_never_joins_times_out_naming_it) {
  // A small call (messages) and a large one (the direct path, when it is on).
  for (std::size_t count : {std::size_t(1), std::size_t(1) << 16}) {
    InitOptions o;
    o.timeout = 400ms;
    auto pg = world(o);
    const int n = pg->size();
    std::vector<float> x(count, 1.f);
    if (pg->rank() != n - 1) {
      auto start = std::chrono::steady_clock::now();
      try {
        pg->all_reduce(x.data(), count, DType::Float32);
        BOOST_ERROR("expected a timeout");
      } catch (const CommTimeoutError& e) {
        BOOST_TEST_MESSAGE(e.what());
        BOOST_TEST(has(e.what(), "mpi rank"));
        BOOST_TEST(has(e.what(), "all_reduce"));
        BOOST_TEST(has(e.what(), "timed out after 400 ms"));
        BOOST_TEST(has(e.what(), std::to_string(n - 1)));
      }
      BOOST_TEST((std::chrono::steady_clock::now() - start < 10s));
      BOOST_CHECK_THROW(pg->barrier(), CommAbortedError);  // the group is marked broken
    }
    world()->barrier();  // everyone, including the absent rank, meets again on a fresh group
  }
}
