// One error hierarchy: every error the core vocabulary and the comm layer throw is an
// fsdp::Error, so a program's one `catch (const fsdp::Error&)` handles arguments, environment,
// unsupported collectives and comm failures alike. Each row is a representative bad input.
#define BOOST_TEST_MODULE error_root
#include <stdlib.h>

#include <boost/test/unit_test.hpp>
#include <chrono>
#include <functional>
#include <string>
#include <typeinfo>
#include <vector>

#include "comm/env.h"
#include "comm/errors.h"
#include "comm/fake/fake_process_group.h"
#include "comm/registry.h"
#include "comm/store/tcp_store.h"
#include "comm/store/tcp_store_protocol.h"
#include "comm/threads/run_ranks.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"

using namespace fsdp;
using namespace fsdp::comm;

namespace {

// A bad input, the category it must be reported as, and a part of its message.
struct Case {
  const char* name;
  std::function<void()> run;
  std::function<bool(const fsdp::Error&)> has_category;
  std::string message_part;
};

template <class E>
std::function<bool(const fsdp::Error&)> is() {
  return [](const fsdp::Error& e) { return dynamic_cast<const E*>(&e) != nullptr; };
}

void bad_broadcast_root() {
  FakeProcessGroup pg(0, 1);
  float x = 0;
  pg.broadcast(&x, 1, DType::Float32, 3);
}

void avg_of_bool() {
  FakeProcessGroup pg(0, 1);
  bool flag = true;
  pg.all_reduce(&flag, 1, DType::Bool, ReduceOp::Avg);
}

void collective_on_fake_pair() {
  FakeProcessGroup pg(1, 2);
  pg.barrier();
}

void new_group_twice() {
  FakeProcessGroup pg(0, 4);
  pg.new_group({1, 1});
}

void unknown_backend() {
  InitOptions o;
  o.rank = 0;
  o.world_size = 1;
  create_process_group("carrier-pigeon", o);
}

void counts_differ_between_ranks() {
  run_ranks(2, [](std::shared_ptr<ProcessGroup> pg) {
    std::vector<float> x(4);
    pg->all_reduce(x.data(), pg->rank() == 0 ? 4 : 3, DType::Float32);
  });
}

// Sets a variable for the duration of one call.
void with_env(const char* name, const char* value, const std::function<void()>& f) {
  setenv(name, value, 1);
  try {
    f();
  } catch (...) {
    unsetenv(name);
    throw;
  }
  unsetenv(name);
}

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {"unknown device", [] { Device::parse("tpu"); }, is<ValueError>(), "unknown device 'tpu'"},
      {"unknown dtype", [] { dtype_from_name("float8"); }, is<ValueError>(),
       "unknown dtype 'float8'"},
      {"rank outside the group", [] { FakeProcessGroup(8, 8); }, is<ValueError>(),
       "invalid rank 8 for world size 8"},
      {"broadcast root outside the group", bad_broadcast_root, is<ValueError>(), "root 3"},
      {"avg of bool", avg_of_bool, is<ValueError>(), "avg is not defined for bool"},
      {"new_group with a rank twice", new_group_twice, is<ValueError>(), "lists rank 1 twice"},
      {"split_hybrid that does not divide",
       [] {
         FakeProcessGroup pg(0, 8);
         split_hybrid(pg, 3);
       },
       is<ValueError>(), "shard size 3 must divide the world size 8"},
      {"collective on a multi-rank fake group", collective_on_fake_pair, is<NotImplementedError>(),
       "fake process group cannot run barrier with size 2"},
      {"unknown backend", unknown_backend, is<ValueError>(),
       "unknown communication backend 'carrier-pigeon'"},
      {"run_ranks of no ranks", [] { run_ranks(0, [](std::shared_ptr<ProcessGroup>) {}); },
       is<ValueError>(), "world size 0 < 1"},
      {"tcp store key above the limit",
       [] {
         tcp_store_protocol::encode_request(
             {tcp_store_protocol::kSet, std::string(70000, 'k'), ""});
       },
       is<ValueError>(), "is above the limit"},
      {"tcp store port 0",
       [] { TcpStore("127.0.0.1", 0, false, "", std::chrono::milliseconds(10)); }, is<ValueError>(),
       "invalid MASTER_PORT 0"},
      {"WORLD_SIZE above 2^31-1",
       [] { with_env("WORLD_SIZE", "4294967298", [] { comm::env::world_size(); }); },
       is<EnvError>(), "WORLD_SIZE='4294967298' is out of range"},
      {"FSDP_TIMEOUT_MS not a number",
       [] { with_env("FSDP_TIMEOUT_MS", "ten", [] { comm::env::timeout(); }); }, is<EnvError>(),
       "FSDP_TIMEOUT_MS='ten' is not an integer"},
      {"ranks disagree on a count", counts_differ_between_ranks, is<CommError>(), "rank"},
  };
  return all;
}

}  // namespace

BOOST_AUTO_TEST_CASE(every_bad_input_is_an_fsdp_error_of_its_category) {
  for (const Case& c : cases()) {
    BOOST_TEST_CONTEXT(c.name) {
      try {
        c.run();
        BOOST_ERROR("no error");
      } catch (const fsdp::Error& e) {
        BOOST_TEST(c.has_category(e), "category: got " << typeid(e).name());
        BOOST_TEST(std::string(e.what()).find(c.message_part) != std::string::npos,
                   "message: " << e.what());
      } catch (const std::exception& e) {
        BOOST_ERROR("not an fsdp::Error: " << typeid(e).name() << ": " << e.what());
      }
    }
  }
}
