// The environment the comm layer reads (comm/env.h: RANK, WORLD_SIZE, MASTER_PORT, ...):
// each value is range-checked and refused with its name, never truncated (issue 12: WORLD_SIZE=
// 4294967298 became 2); bad gloo settings are said in our words; CommError is an fsdp::Error.
#define BOOST_TEST_MODULE comm_env
#include <boost/test/unit_test.hpp>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "comm/env.h"
#include "comm/errors.h"
#include "comm/launch.h"
#include "comm/registry.h"

using namespace fsdp::comm;

namespace {

const char* const kAllVariables[] = {"RANK",
                                     "WORLD_SIZE",
                                     "OMPI_COMM_WORLD_RANK",
                                     "OMPI_COMM_WORLD_SIZE",
                                     "MASTER_ADDR",
                                     "MASTER_PORT",
                                     "FSDP_STORE_PATH",
                                     "FSDP_TIMEOUT_MS",
                                     "FSDP_BACKEND",
                                     "FSDP_GLOO_HOSTNAME",
                                     "FSDP_GLOO_IFNAME",
                                     "GLOO_SOCKET_IFNAME",
                                     "FSDP_MPI_DIRECT",
                                     "FSDP_GLOO_DIRECT",
                                     "PMIX_NAMESPACE"};

using Vars = std::vector<std::pair<const char*, const char*>>;

// Sets the variables for one scope (every other comm variable unset) and clears them after.
struct Env {
  explicit Env(const Vars& vars) {
    for (const char* n : kAllVariables) unsetenv(n);
    for (auto [n, v] : vars) setenv(n, v, 1);
  }
  ~Env() {
    for (const char* n : kAllVariables) unsetenv(n);
  }
};

// The message of the EnvError that `read` throws with `vars` set; "" when it throws none.
template <class Read>
std::string env_error(const Vars& vars, Read read) {
  Env env(vars);
  try {
    read();
  } catch (const EnvError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

// One row per bad value: the variables set, what reads them, the exact message.
BOOST_AUTO_TEST_CASE(every_bad_value_is_refused_with_its_name) {
  struct Case {
    Vars vars;
    std::function<void()> read;
    std::string message;
  };
  auto options = [] { options_from_env(); };
  const std::string long_value(300, 'a');
  const Case cases[] = {
      {{{"RANK", "0"}, {"WORLD_SIZE", "4294967298"}},
       options,
       "environment variable WORLD_SIZE='4294967298' is out of range: expected 1 to 2147483647"},
      {{{"WORLD_SIZE", "0"}},
       options,
       "environment variable WORLD_SIZE='0' is out of range: expected 1 to 2147483647"},
      {{{"WORLD_SIZE", "2x"}}, options, "environment variable WORLD_SIZE='2x' is not an integer"},
      {{{"WORLD_SIZE", " 2"}}, options, "environment variable WORLD_SIZE=' 2' is not an integer"},
      {{{"RANK", "-1"}},
       options,
       "environment variable RANK='-1' is out of range: expected 0 to 2147483646"},
      {{{"RANK", "99999999999999999999"}},
       options,
       "environment variable RANK='99999999999999999999' is out of range: expected 0 to "
       "2147483646"},
      {{{"RANK", "one"}}, options, "environment variable RANK='one' is not an integer"},
      {{{"RANK", "2"}, {"WORLD_SIZE", "2"}},
       options,
       "RANK=2 is not below WORLD_SIZE=2: ranks are 0 to 1"},
      {{{"RANK", "3"}},
       options,
       "RANK is set but WORLD_SIZE is not: a launcher sets both (or neither)"},
      {{{"WORLD_SIZE", "4"}},
       options,
       "WORLD_SIZE is set but RANK is not: a launcher sets both (or neither)"},
      {{{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "4294967297"}},
       options,
       "environment variable OMPI_COMM_WORLD_SIZE='4294967297' is out of range: expected 1 to "
       "2147483647"},
      {{{"OMPI_COMM_WORLD_RANK", "4"}, {"OMPI_COMM_WORLD_SIZE", "4"}},
       options,
       "OMPI_COMM_WORLD_RANK=4 is not below OMPI_COMM_WORLD_SIZE=4: ranks are 0 to 3"},
      {{{"MASTER_PORT", "70000"}},
       options,
       "environment variable MASTER_PORT='70000' is out of range: expected 1 to 65535"},
      {{{"MASTER_PORT", "0"}},
       options,
       "environment variable MASTER_PORT='0' is out of range: expected 1 to 65535"},
      {{{"MASTER_PORT", "http"}},
       options,
       "environment variable MASTER_PORT='http' is not an integer"},
      {{{"MASTER_ADDR", "10.0.0.1:29500"}},
       options,
       "environment variable MASTER_ADDR='10.0.0.1:29500' is not a host name or IPv4 address "
       "(letters, digits, '.', '-', '_')"},
      {{{"MASTER_ADDR", "host name"}},
       options,
       "environment variable MASTER_ADDR='host name' is not a host name or IPv4 address "
       "(letters, digits, '.', '-', '_')"},
      {{{"MASTER_ADDR", long_value.c_str()}},
       options,
       "environment variable MASTER_ADDR='" + long_value.substr(0, 200) +
           "... (300 characters)' is not a host name or IPv4 address (letters, digits, '.', "
           "'-', '_')"},
      {{{"FSDP_TIMEOUT_MS", "-5"}},
       options,
       "environment variable FSDP_TIMEOUT_MS='-5' is out of range: expected 1 to 86400000"},
      {{{"FSDP_TIMEOUT_MS", "0"}},
       options,
       "environment variable FSDP_TIMEOUT_MS='0' is out of range: expected 1 to 86400000"},
      {{{"FSDP_TIMEOUT_MS", "86400001"}},
       options,
       "environment variable FSDP_TIMEOUT_MS='86400001' is out of range: expected 1 to 86400000"},
      {{{"FSDP_TIMEOUT_MS", "10s"}},
       options,
       "environment variable FSDP_TIMEOUT_MS='10s' is not an integer"},
      {{{"FSDP_BACKEND", "Gloo!"}},
       [] { init_from_env(); },
       "environment variable FSDP_BACKEND='Gloo!' is not a backend name (fake, threads, mpi, "
       "gloo, nccl)"},
      {{{"FSDP_GLOO_HOSTNAME", "a b"}},
       [] { env::gloo_hostname(); },
       "environment variable FSDP_GLOO_HOSTNAME='a b' is not a host name or IPv4 address "
       "(letters, digits, '.', '-', '_')"},
      {{{"FSDP_GLOO_IFNAME", "averyveryverylongname0"}},
       [] { env::gloo_ifname(); },
       "environment variable FSDP_GLOO_IFNAME='averyveryverylongname0' is not one network "
       "interface name (1 to 15 characters, no '/', ':', ',' or blanks)"},
      {{{"GLOO_SOCKET_IFNAME", "eth0,eth1"}},
       [] { env::gloo_ifname(); },
       "environment variable GLOO_SOCKET_IFNAME='eth0,eth1' is not one network interface name "
       "(1 to 15 characters, no '/', ':', ',' or blanks)"},
      {{{"FSDP_MPI_DIRECT", "yes"}},
       [] { env::mpi_direct(); },
       "environment variable FSDP_MPI_DIRECT='yes' is neither 0 nor 1"},
      {{{"FSDP_GLOO_DIRECT", "off"}},
       [] { env::gloo_direct(); },
       "environment variable FSDP_GLOO_DIRECT='off' is neither 0 nor 1"},
  };
  for (const auto& c : cases) {
    BOOST_TEST_CONTEXT(c.message) {
      BOOST_TEST(env_error(c.vars, c.read) == c.message);
    }
  }
}

BOOST_AUTO_TEST_CASE(an_unknown_backend_names_the_variable_and_the_built_ones) {
  const std::string message = env_error({{"FSDP_BACKEND", "nope"}}, [] { init_from_env(); });
  BOOST_TEST(message.rfind("environment variable FSDP_BACKEND='nope' is not a backend (built: "
                           "fake, threads",
                           0) == 0);
}

BOOST_AUTO_TEST_CASE(good_values_are_read) {
  Env env(Vars{{"RANK", "3"},
               {"WORLD_SIZE", "8"},
               {"MASTER_ADDR", "10.77.0.1"},
               {"MASTER_PORT", "29511"},
               {"FSDP_TIMEOUT_MS", "2500"},
               {"FSDP_STORE_PATH", "/tmp/store"},
               {"GLOO_SOCKET_IFNAME", "veth0"},
               {"FSDP_MPI_DIRECT", "0"},
               {"FSDP_GLOO_DIRECT", "0"}});
  InitOptions o = options_from_env();
  BOOST_TEST(o.rank == 3);
  BOOST_TEST(o.world_size == 8);
  BOOST_TEST(o.master_addr == "10.77.0.1");
  BOOST_TEST(o.master_port == 29511);
  BOOST_TEST(o.timeout.count() == 2500);
  BOOST_TEST(o.file_store_path == "/tmp/store");
  BOOST_TEST(*env::gloo_ifname() == "veth0");
  BOOST_TEST(env::gloo_ifname_variable() == std::string("GLOO_SOCKET_IFNAME"));
  BOOST_TEST(!env::mpi_direct());
  BOOST_TEST(!env::gloo_direct());
}

BOOST_AUTO_TEST_CASE(unset_and_empty_values_keep_the_defaults) {
  Env env(Vars{{"RANK", ""}, {"MASTER_PORT", ""}});
  InitOptions o = options_from_env();
  BOOST_TEST(o.rank == -1);
  BOOST_TEST(o.world_size == -1);
  BOOST_TEST(o.master_addr == "127.0.0.1");
  BOOST_TEST(o.master_port == 29500);
  BOOST_TEST(o.timeout.count() == 300000);
  BOOST_TEST(env::mpi_direct());
  BOOST_TEST(env::gloo_direct());
}

BOOST_AUTO_TEST_CASE(every_knob_is_listed_once) {
  std::set<std::string> names;
  for (const auto& k : env::knobs()) BOOST_TEST(names.insert(k.name).second, k.name);
  for (const char* n : {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "FSDP_STORE_PATH",
                        "FSDP_TIMEOUT_MS", "FSDP_BACKEND", "FSDP_GLOO_HOSTNAME", "FSDP_GLOO_IFNAME",
                        "FSDP_MPI_DIRECT", "FSDP_GLOO_DIRECT", "PMIX_NAMESPACE"})
    BOOST_TEST(names.count(n) == 1u, n);
}

BOOST_AUTO_TEST_CASE(env_errors_are_fsdp_errors) {
  Env env(Vars{{"WORLD_SIZE", "0"}});
  BOOST_CHECK_THROW(options_from_env(), fsdp::Error);
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
  } catch (const fsdp::ValueError& e) {  // an fsdp::Error, like every error of the library
    BOOST_TEST(std::string(e.what()) ==
               "gloo backend: the timeout must be above 0 ms, got -1 ms (InitOptions::timeout "
               "or FSDP_TIMEOUT_MS)");
  }
}

// launch: without a launcher's variables the body runs on the asked number of thread ranks; with
// them, once, on init_from_env()'s group (here a one-rank threads group named by FSDP_BACKEND).
BOOST_AUTO_TEST_CASE(launch_runs_thread_ranks_or_the_launchers_rank) {
  auto ranks_seen = [](const Vars& vars, int thread_ranks) {
    Env env(vars);
    std::mutex m;
    std::multiset<std::pair<int, int>> seen;  // (rank, size)
    BOOST_TEST(started_by_launcher() == !vars.empty());
    launch(thread_ranks, [&](std::shared_ptr<ProcessGroup> pg) {
      std::lock_guard lock(m);
      seen.insert({pg->rank(), pg->size()});
    });
    return seen;
  };
  using Seen = std::multiset<std::pair<int, int>>;
  BOOST_TEST((ranks_seen({}, 3) == Seen{{0, 3}, {1, 3}, {2, 3}}));
  BOOST_TEST((ranks_seen({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"FSDP_BACKEND", "threads"}}, 3) ==
              Seen{{0, 1}}));
  Env none({});
  BOOST_CHECK_THROW(launch(0, [](std::shared_ptr<ProcessGroup>) {}), fsdp::ValueError);
}
