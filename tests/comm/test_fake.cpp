// FakeProcessGroup: any rank/size, identity at size 1, a clear error at size > 1; the registry.
#define BOOST_TEST_MODULE comm_fake
#include <boost/test/unit_test.hpp>
#include <string>
#include <vector>

#include "comm/errors.h"
#include "comm/fake/fake_process_group.h"
#include "comm/registry.h"
#include "tests/support/error_message.h"

using namespace fsdp;
using namespace fsdp::comm;
using fsdp::testing::message_has;

BOOST_AUTO_TEST_CASE(rank_and_size_are_whatever_was_asked) {
  FakeProcessGroup pg(3, 8);
  BOOST_TEST(pg.rank() == 3);
  BOOST_TEST(pg.size() == 8);
  BOOST_TEST(pg.backend_name() == "fake");
  BOOST_CHECK_THROW(FakeProcessGroup(8, 8), fsdp::ValueError);
  BOOST_CHECK_THROW(FakeProcessGroup(0, 0), fsdp::ValueError);
}

BOOST_AUTO_TEST_CASE(size_one_collectives_are_identity) {
  FakeProcessGroup pg(0, 1);
  std::vector<float> in{1, 2, 3}, out(3, 0);
  pg.all_gather(in.data(), out.data(), 3, DType::Float32);
  BOOST_TEST(out == in);
  out.assign(3, 0);
  pg.reduce_scatter(in.data(), out.data(), 3, DType::Float32, ReduceOp::Avg);
  BOOST_TEST(out == in);
  pg.all_reduce(in.data(), 3, DType::Float32, ReduceOp::Max);
  pg.broadcast(in.data(), 3, DType::Float32, 0);
  BOOST_TEST(in == (std::vector<float>{1, 2, 3}));
  pg.barrier();
  auto work = pg.all_reduce_async(in.data(), 3, DType::Float32);
  BOOST_TEST(work->test());
  BOOST_TEST(work->wait_for(std::chrono::milliseconds(0)));
  work->wait();
  // Meta buffers carry no data: fine at size 1.
  pg.all_gather(nullptr, nullptr, 5, DType::Float32, kMeta);
}

BOOST_AUTO_TEST_CASE(size_two_collective_names_collective_rank_and_size) {
  FakeProcessGroup pg(1, 2);
  std::vector<float> in(2), out(4);
  try {
    pg.all_gather(in.data(), out.data(), 2, DType::Float32);
    BOOST_FAIL("expected an error");
  } catch (const UnsupportedCollectiveError& e) {
    BOOST_TEST(message_has(e, "fake process group cannot run all_gather with size 2 (rank 1)"));
  }
  BOOST_CHECK_THROW(pg.reduce_scatter_async(out.data(), in.data(), 2, DType::Float32),
                    fsdp::NotImplementedError);
  BOOST_CHECK_THROW(pg.barrier(), UnsupportedCollectiveError);
  // Construction-time work that never communicates still works.
  auto sub = pg.new_group({1});
  BOOST_REQUIRE(sub);
  BOOST_TEST(sub->size() == 1);
  BOOST_TEST(sub->rank() == 0);
  BOOST_TEST(!pg.new_group({0}));
}

BOOST_AUTO_TEST_CASE(invalid_arguments_are_rejected_with_context) {
  FakeProcessGroup pg(0, 1);
  float x = 0;
  try {
    pg.broadcast(&x, 1, DType::Float32, 3);
    BOOST_FAIL("expected an error");
  } catch (const fsdp::ValueError& e) {
    BOOST_TEST(message_has(e, "fake rank 0/1"));
    BOOST_TEST(message_has(e, "root 3"));
  }
  bool flag = true;
  BOOST_CHECK_THROW(pg.all_reduce(&flag, 1, DType::Bool, ReduceOp::Avg), fsdp::ValueError);
  BOOST_CHECK_THROW(pg.all_reduce(nullptr, 1, DType::Float32), fsdp::ValueError);
}

BOOST_AUTO_TEST_CASE(hybrid_split_of_a_fake_world) {
  FakeProcessGroup pg(5, 8);
  HybridGroups g = split_hybrid(pg, 4);
  BOOST_REQUIRE(g.shard && g.replicate);
  BOOST_TEST(g.shard->size() == 4);
  BOOST_TEST(g.shard->rank() == 1);  // ranks 4..7
  BOOST_TEST(g.replicate->size() == 2);
  BOOST_TEST(g.replicate->rank() == 1);  // ranks {1, 5}
  BOOST_CHECK_THROW(split_hybrid(pg, 3), fsdp::ValueError);
}

BOOST_AUTO_TEST_CASE(registry_creates_and_explains_missing_backends) {
  auto names = available_backends();
  BOOST_TEST((std::find(names.begin(), names.end(), "fake") != names.end()));
  BOOST_TEST((std::find(names.begin(), names.end(), "threads") != names.end()));
  InitOptions o;
  o.rank = 2;
  o.world_size = 4;
  auto pg = create_process_group("fake", o);
  BOOST_TEST(pg->rank() == 2);
  BOOST_TEST(pg->size() == 4);
  BOOST_CHECK_THROW(create_process_group("carrier-pigeon", o), fsdp::ValueError);
  for (std::string name : {"mpi", "gloo", "nccl"}) {
    if (backend_available(name)) continue;
    try {
      create_process_group(name, o);
      BOOST_FAIL("expected BackendNotBuiltError");
    } catch (const BackendNotBuiltError& e) {
      BOOST_TEST(message_has(e, "backend '" + name + "' was not built"));
      BOOST_TEST(message_has(e, "-D" + name + "=enabled"));
    }
  }
}
