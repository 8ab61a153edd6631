// Threads backend: every collective × world size 1,2,3,4,5,8 × dtype × count against the
// reference; async handles; subgroups; mismatches, failures and timeouts never hang.
#define BOOST_TEST_MODULE comm_threads
#include <fmt/format.h>

#include <atomic>
#include <boost/test/unit_test.hpp>
#include <mutex>
#include <thread>

#include "comm/errors.h"
#include "comm/registry.h"
#include "comm/threads/run_ranks.h"
#include "core/memory.h"
#include "tests/comm/collective_checks.h"

using namespace fsdp;
using namespace fsdp::comm;
using namespace std::chrono_literals;

namespace {

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Runs body on every rank, gathering the failure strings it returns.
void run_and_report(
    int world, const std::function<std::vector<std::string>(std::shared_ptr<ProcessGroup>)>& body,
    ThreadsOptions options = {}) {
  std::mutex mutex;
  std::vector<std::string> failures;
  run_ranks(
      world,
      [&](std::shared_ptr<ProcessGroup> pg) {
        auto mine = body(pg);
        std::lock_guard lock(mutex);
        failures.insert(failures.end(), mine.begin(), mine.end());
      },
      options);
  for (std::size_t i = 0; i < failures.size() && i < 20; ++i) BOOST_ERROR(failures[i]);
  BOOST_TEST(failures.empty());
}

// Forwards to another group and, like a backend that stages data, allocates a buffer on whichever
// thread runs the collective: the group's worker thread for asynchronous calls.
class StagingGroup final : public ProcessGroup {
 public:
  StagingGroup(ProcessGroup& inner, std::size_t staging_bytes)
      : ProcessGroup(inner.rank(), inner.size()), inner_(inner), bytes_(staging_bytes) {}
  ~StagingGroup() override { shutdown_executor(); }
  std::string backend_name() const override { return "staging"; }

  std::shared_ptr<Storage> staging;  // kept until the test has read the charges
  std::thread::id ran_on;

 protected:
  void execute(const Collective& c) override {
    ran_on = std::this_thread::get_id();
    staging = std::make_shared<Storage>(bytes_, kCPU);
    inner_.run(c);
  }
  std::shared_ptr<ProcessGroup> make_subgroup(const std::vector<int>&, int, int) override {
    return nullptr;
  }

 private:
  ProcessGroup& inner_;
  std::size_t bytes_;
};

}  // namespace

BOOST_AUTO_TEST_CASE(async_collectives_charge_the_queuing_ranks_memory_scopes) {
  auto job = std::make_shared<MemoryStats>();  // encloses both ranks' scopes
  std::vector<std::shared_ptr<MemoryStats>> per_rank{std::make_shared<MemoryStats>(),
                                                     std::make_shared<MemoryStats>()};
  run_and_report(2, [&](std::shared_ptr<ProcessGroup> pg) {
    std::vector<std::string> failures;
    MemoryStatsScope job_scope(job);
    MemoryStatsScope rank_scope(per_rank[std::size_t(pg->rank())]);
    MemoryStats& mine = *per_rank[std::size_t(pg->rank())];
    const std::int64_t bytes = 1000 * (pg->rank() + 1);
    StagingGroup group(*pg, std::size_t(bytes));
    float x = 1.f;
    group.all_reduce_async(&x, 1, DType::Float32)->wait();
    if (x != 2.f) failures.push_back("all_reduce through the staging group");
    if (group.ran_on == std::this_thread::get_id())
      failures.push_back("the asynchronous collective ran on the rank's own thread");
    if (mine.current_bytes.load() != bytes)
      failures.push_back(
          fmt::format("rank {}: {} bytes charged to its scope while the worker's "
                      "buffer lives, expected {}",
                      pg->rank(), mine.current_bytes.load(), bytes));
    group.staging.reset();
    if (mine.current_bytes.load() != 0 || mine.peak_bytes.load() != bytes || mine.num_allocs != 1)
      failures.push_back(fmt::format("rank {}: current {} peak {} allocs {} after the free",
                                     pg->rank(), mine.current_bytes.load(), mine.peak_bytes.load(),
                                     mine.num_allocs.load()));
    return failures;
  });
  BOOST_TEST(job->num_allocs.load() == 2);
  BOOST_TEST(job->num_frees.load() == 2);
  BOOST_TEST(job->current_bytes.load() == 0);
  BOOST_TEST(job->peak_bytes.load() >= 2000);
}

BOOST_AUTO_TEST_CASE(matrix_every_world_size) {
  for (int world : {1, 2, 3, 4, 5, 8}) {
    BOOST_TEST_MESSAGE("world size " << world);
    run_and_report(world, [](std::shared_ptr<ProcessGroup> pg) {
      auto m = testing::default_matrix(pg->size());
      if (pg->size() == 2 || pg->size() == 5) m.large_count = 3 << 20;  // several MB
      auto failures = testing::run_collective_matrix(*pg, m);
      if (pg->backend_name() != "threads") failures.push_back("backend " + pg->backend_name());
      return failures;
    });
  }
}

BOOST_AUTO_TEST_CASE(in_place_all_gather) {
  run_and_report(3, [](std::shared_ptr<ProcessGroup> pg) {
    std::vector<std::string> failures;
    std::vector<std::int32_t> flat(3 * 5, -1);
    for (int i = 0; i < 5; ++i) flat[std::size_t(pg->rank() * 5 + i)] = pg->rank() * 100 + i;
    pg->all_gather(flat.data() + pg->rank() * 5, flat.data(), 5, DType::Int32);
    for (int r = 0; r < 3; ++r)
      for (int i = 0; i < 5; ++i)
        if (flat[std::size_t(r * 5 + i)] != r * 100 + i) failures.push_back("in-place all_gather");
    return failures;
  });
}

BOOST_AUTO_TEST_CASE(async_works_complete_in_issue_order) {
  run_and_report(4, [](std::shared_ptr<ProcessGroup> pg) {
    std::vector<std::string> failures;
    std::vector<std::vector<float>> data(6, std::vector<float>(1000, float(pg->rank() + 1)));
    std::vector<std::shared_ptr<Work>> works;
    for (auto& d : data) works.push_back(pg->all_reduce_async(d.data(), d.size(), DType::Float32));
    float sync_value = 1;
    pg->all_reduce(&sync_value, 1, DType::Float32);  // waits behind the queued ones
    for (auto& w : works) {
      if (!w->wait_for(10s)) failures.push_back("async all_reduce did not finish");
      if (!w->test()) failures.push_back("test() false after wait_for");
    }
    for (auto& d : data)
      if (d[0] != 10.f || d[999] != 10.f) failures.push_back("async all_reduce value");
    if (sync_value != 4.f) failures.push_back("sync all_reduce after async");
    return failures;
  });
}

// A subgroup's messages name world ranks as well as positions in the group (issue 12: a failure
// in HYBRID_SHARD's replicate group named "rank 1" for world rank 3), through nested groups too.
BOOST_AUTO_TEST_CASE(subgroup_messages_name_world_ranks) {
  run_and_report(8, [](std::shared_ptr<ProcessGroup> pg) {
    std::vector<std::string> failures;
    if (pg->where() != fmt::format("threads rank {}/8", pg->rank()) || pg->name_ranks({2}) != "2")
      failures.push_back("world group: " + pg->where() + ", " + pg->name_ranks({2}));
    // Ranks numbered as in the world (FSDP's group of every rank, a first block): nothing more.
    auto all = pg->new_group({0, 1, 2, 3, 4, 5, 6, 7});
    auto first = pg->new_group({0, 1, 2, 3});
    if (all->where() != pg->where() || (first && first->name_ranks({1, 2}) != "1, 2"))
      failures.push_back("identity groups: " + all->where());
    auto odd = pg->new_group({7, 5, 3, 1});
    auto inner = odd ? odd->new_group({3, 1}) : nullptr;  // world ranks 1 and 5
    if (pg->rank() == 5) {
      const std::string want = "threads rank 1/4 (world rank 5; group of world ranks 7, 5, 3, 1)";
      if (odd->where() != want) failures.push_back("odd group: " + odd->where());
      if (odd->name_ranks({3}) != "3 (world rank 1)" ||
          odd->name_ranks({0, 2}) != "0, 2 (world ranks 7, 3)")
        failures.push_back("odd group ranks: " + odd->name_ranks({0, 2}));
      if (!inner ||
          inner->where() != "threads rank 1/2 (world rank 5; group of world ranks 1, 5)" ||
          inner->name_ranks({0}) != "0 (world rank 1)")
        failures.push_back("nested group: " + (inner ? inner->where() : std::string("none")));
    }
    return failures;
  });
}

BOOST_AUTO_TEST_CASE(subgroups_and_hybrid_split) {
  run_and_report(8, [](std::shared_ptr<ProcessGroup> pg) {
    std::vector<std::string> failures;
    auto odd = pg->new_group({7, 5, 3, 1});  // rank order follows the list
    if ((pg->rank() % 2 == 1) != bool(odd)) failures.push_back("membership of new_group");
    if (odd) {
      int expected_rank = (7 - pg->rank()) / 2;
      if (odd->rank() != expected_rank) failures.push_back("rank in new_group");
      std::int64_t v = pg->rank(), gathered[4];
      odd->all_gather(&v, gathered, 1, DType::Int64);
      if (gathered[0] != 7 || gathered[3] != 1) failures.push_back("new_group all_gather");
    }
    HybridGroups h = split_hybrid(*pg, 4);
    if (h.shard->size() != 4 || h.replicate->size() != 2) failures.push_back("hybrid sizes");
    double x = pg->rank();
    h.shard->all_reduce(&x, 1, DType::Float64);  // 0+1+2+3 or 4+5+6+7
    if (x != (pg->rank() < 4 ? 6.0 : 22.0)) failures.push_back("shard group all_reduce");
    double y = pg->rank();
    h.replicate->all_reduce(&y, 1, DType::Float64, ReduceOp::Avg);  // r and r±4
    if (y != (pg->rank() % 4) + 2.0) failures.push_back("replicate group all_reduce");
    return failures;
  });
}

BOOST_AUTO_TEST_CASE(mismatched_counts_are_detected_on_every_rank) {
  std::atomic<int> detected{0};
  run_ranks(3, [&](std::shared_ptr<ProcessGroup> pg) {
    std::vector<float> buf(10, 1.f);
    std::size_t count = pg->rank() == 1 ? 9 : 10;
    try {
      pg->all_reduce(buf.data(), count, DType::Float32);
    } catch (const CommMismatchError& e) {
      if (has(e.what(), "mismatched collectives")) ++detected;
    }
    // The group stays usable after a detected mismatch.
    pg->all_reduce(buf.data(), 10, DType::Float32);
  });
  BOOST_TEST(detected.load() == 3);
}

BOOST_AUTO_TEST_CASE(mismatched_dtypes_are_detected) {
  BOOST_CHECK_THROW(run_ranks(2,
                              [](std::shared_ptr<ProcessGroup> pg) {
                                std::vector<std::uint8_t> buf(16);
                                pg->broadcast(buf.data(), 4,
                                              pg->rank() == 0 ? DType::Float32 : DType::Int32, 0);
                              }),
                    RankFailedError);
}

BOOST_AUTO_TEST_CASE(a_rank_that_never_joins_times_out_naming_it) {
  std::mutex mutex;
  std::vector<std::string> messages;
  auto start = std::chrono::steady_clock::now();
  try {
    run_ranks(
        3,
        [&](std::shared_ptr<ProcessGroup> pg) {
          if (pg->rank() == 2) {
            std::this_thread::sleep_for(1500ms);  // "hangs" well past the timeout, then gives up
            return;
          }
          float x = 1;
          try {
            pg->all_reduce(&x, 1, DType::Float32);
          } catch (const CommError& e) {
            std::lock_guard lock(mutex);
            messages.push_back(e.what());
            throw;
          }
        },
        ThreadsOptions{300ms});
    BOOST_FAIL("expected a failure");
  } catch (const RankFailedError& e) {
    BOOST_TEST(has(e.what(), "timed out after 300 ms"));
  }
  BOOST_TEST((std::chrono::steady_clock::now() - start < 5s));
  BOOST_REQUIRE(!messages.empty());
  bool named = false;
  for (auto& m : messages)
    named = named || (has(m, "threads rank") && has(m, "all_reduce") && has(m, "rank(s) 2"));
  BOOST_TEST(named);
}

BOOST_AUTO_TEST_CASE(an_exception_in_one_rank_does_not_hang_the_others) {
  auto start = std::chrono::steady_clock::now();
  try {
    run_ranks(
        4,
        [](std::shared_ptr<ProcessGroup> pg) {
          std::vector<float> buf(100, 1.f);
          pg->all_reduce(buf.data(), buf.size(), DType::Float32);
          if (pg->rank() == 3) throw std::runtime_error("model exploded");
          pg->all_reduce(buf.data(), buf.size(), DType::Float32);  // others wait for rank 3 here
        },
        ThreadsOptions{60s});
    BOOST_FAIL("expected a failure");
  } catch (const RankFailedError& e) {
    BOOST_TEST(e.rank() == 3);
    BOOST_TEST(has(e.what(), "rank 3 of 4 failed: model exploded"));
  }
  BOOST_TEST((std::chrono::steady_clock::now() - start < 10s));  // far below the 60 s timeout
}

BOOST_AUTO_TEST_CASE(a_rank_that_returns_early_fails_the_others_at_once) {
  auto start = std::chrono::steady_clock::now();
  BOOST_CHECK_THROW(run_ranks(
                        2,
                        [](std::shared_ptr<ProcessGroup> pg) {
                          if (pg->rank() == 0) return;
                          pg->barrier();
                        },
                        ThreadsOptions{60s}),
                    RankFailedError);
  BOOST_TEST((std::chrono::steady_clock::now() - start < 10s));
}

BOOST_AUTO_TEST_CASE(a_rank_that_returns_early_fails_its_subgroups_at_once) {
  // A subgroup made before the rank returned, and one made after.
  for (bool made_before : {true, false}) {
    auto start = std::chrono::steady_clock::now();
    std::atomic<int> aborted{0};
    BOOST_CHECK_THROW(
        run_ranks(
            3,
            [&](std::shared_ptr<ProcessGroup> pg) {
              std::shared_ptr<ProcessGroup> sub;
              if (made_before) sub = pg->new_group({2, 0, 1});
              if (pg->rank() == 2) return;  // its subgroup rank is 0
              if (!made_before) sub = pg->new_group({2, 0, 1});
              std::int32_t v = 1;
              try {
                sub->all_reduce(&v, 1, DType::Int32);
              } catch (const CommAbortedError& e) {
                if (std::string(e.what()).find("rank 0 returned") != std::string::npos) ++aborted;
                throw;
              }
            },
            ThreadsOptions{60s}),
        RankFailedError);
    BOOST_TEST(aborted.load() >= 1);
    BOOST_TEST((std::chrono::steady_clock::now() - start < 10s));
  }
}

BOOST_AUTO_TEST_CASE(registry_threads_world_joined_by_user_threads) {
  constexpr int kWorld = 3;
  std::vector<std::thread> threads;
  std::atomic<int> good{0};
  for (int r = 0; r < kWorld; ++r)
    threads.emplace_back([&, r] {
      InitOptions o;
      o.rank = r;
      o.world_size = kWorld;
      o.group_name = "registry-test";
      auto pg = create_process_group("threads", o);
      std::int32_t v = r + 1;
      pg->all_reduce(&v, 1, DType::Int32, ReduceOp::Max);
      if (v == kWorld) ++good;
    });
  for (auto& t : threads) t.join();
  BOOST_TEST(good.load() == kWorld);
}

BOOST_AUTO_TEST_CASE(init_from_env_without_launcher_is_a_single_rank) {
  auto pg = init_from_env();
  BOOST_TEST(pg->size() >= 1);
}

// The body gets a shared group: one it keeps stays valid after run_ranks returned.
BOOST_AUTO_TEST_CASE(a_kept_group_outlives_run_ranks) {
  std::vector<std::shared_ptr<ProcessGroup>> kept(3);
  run_ranks(3, [&](std::shared_ptr<ProcessGroup> pg) {
    pg->barrier();
    kept[std::size_t(pg->rank())] = std::move(pg);
  });
  for (int r = 0; r < 3; ++r) {
    BOOST_TEST(kept[std::size_t(r)]->rank() == r);
    BOOST_TEST(kept[std::size_t(r)]->size() == 3);
    BOOST_TEST(kept[std::size_t(r)].use_count() == 1);
  }
}
