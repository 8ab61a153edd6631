// The environment the comm layer reads (RANK, WORLD_SIZE, MASTER_PORT, FSDP_TIMEOUT_MS, ...):
// each value is range-checked and refused with its name, never truncated (issue 12: WORLD_SIZE=
// 4294967298 became 2); bad gloo settings are said in our words; CommError is an fsdp::Error.
#define BOOST_TEST_MODULE comm_env
#include <boost/test/unit_test.hpp>
#include <cstdlib>
#include <string>

#include "comm/errors.h"
#include "comm/registry.h"

using namespace fsdp::comm;

namespace {

// Sets the variables for one scope and clears them after.
struct Env {
  std::vector<std::string> names;
  Env(std::initializer_list<std::pair<const char*, const char*>> vars) {
    for (const char* n : {"RANK", "WORLD_SIZE", "MASTER_PORT", "FSDP_TIMEOUT_MS",
                          "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"})
      unsetenv(n);
    for (auto [n, v] : vars) {
      setenv(n, v, 1);
      names.emplace_back(n);
    }
  }
  ~Env() {
    for (const auto& n : names) unsetenv(n.c_str());
  }
};

std::string env_error(std::initializer_list<std::pair<const char*, const char*>> vars) {
  Env env(vars);
  try {
    options_from_env();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

}  // namespace

BOOST_AUTO_TEST_CASE(values_are_range_checked) {
  BOOST_TEST(env_error({{"RANK", "0"}, {"WORLD_SIZE", "4294967298"}}) ==
             "environment variable WORLD_SIZE='4294967298' is out of range: expected 1 to "
             "2147483647");
  BOOST_TEST(env_error({{"WORLD_SIZE", "0"}}) ==
             "environment variable WORLD_SIZE='0' is out of range: expected 1 to 2147483647");
  BOOST_TEST(env_error({{"RANK", "-1"}}) ==
             "environment variable RANK='-1' is out of range: expected 0 to 2147483646");
  BOOST_TEST(env_error({{"RANK", "99999999999999999999"}}) ==
             "environment variable RANK='99999999999999999999' is out of range: expected 0 to "
             "2147483646");
  BOOST_TEST(env_error({{"RANK", "2"}, {"WORLD_SIZE", "2"}}) ==
             "RANK=2 is not below WORLD_SIZE=2: ranks are 0 to 1");
  BOOST_TEST(env_error({{"MASTER_PORT", "70000"}}) ==
             "environment variable MASTER_PORT='70000' is out of range: expected 1 to 65535");
  BOOST_TEST(env_error({{"FSDP_TIMEOUT_MS", "-5"}}) ==
             "environment variable FSDP_TIMEOUT_MS='-5' is out of range: expected 1 to 86400000");
  BOOST_TEST(env_error({{"FSDP_TIMEOUT_MS", "10s"}}) ==
             "environment variable FSDP_TIMEOUT_MS='10s' is not an integer");
  BOOST_TEST(env_error({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "4294967297"}}) ==
             "environment variable OMPI_COMM_WORLD_SIZE='4294967297' is out of range: expected "
             "1 to 2147483647");
}

BOOST_AUTO_TEST_CASE(good_values_are_read) {
  Env env(
      {{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"MASTER_PORT", "29511"}, {"FSDP_TIMEOUT_MS", "2500"}});
  InitOptions o = options_from_env();
  BOOST_TEST(o.rank == 3);
  BOOST_TEST(o.world_size == 8);
  BOOST_TEST(o.master_port == 29511);
  BOOST_TEST(o.timeout.count() == 2500);
}

BOOST_AUTO_TEST_CASE(comm_errors_are_fsdp_errors) {
  try {
    throw CommTimeoutError("x");
  } catch (const fsdp::Error& e) {
    BOOST_TEST(std::string(e.what()) == "x");
  }
}

BOOST_AUTO_TEST_CASE(gloo_refuses_a_negative_timeout_in_its_words) {
  if (!backend_available("gloo")) return;
  InitOptions o;
  o.rank = 0;
  o.world_size = 1;
  o.timeout = std::chrono::milliseconds(-1);
  try {
    create_process_group("gloo", o);
    BOOST_FAIL("no error");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()) ==
               "gloo backend: the timeout must be above 0 ms, got -1 ms (InitOptions::timeout "
               "or FSDP_TIMEOUT_MS)");
  }
}
