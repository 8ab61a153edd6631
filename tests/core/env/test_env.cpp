// core/env.h: every knob of every layer declared once, with its default, range and meaning; each
// kind of bad value refused with the variable's name and what it accepts; docs/environment.md
// lists exactly the table.
#define BOOST_TEST_MODULE core_env
#include <stdlib.h>

#include <boost/test/unit_test.hpp>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <string>

#include "core/env.h"

using namespace fsdp;

namespace {

// The EnvError message of `read` with `name`=`value` set; "" when it throws none.
std::string refusal(const char* name, const char* value, const std::function<void()>& read) {
  setenv(name, value, 1);
  std::string message;
  try {
    read();
  } catch (const EnvError& e) {
    message = e.what();
  }
  unsetenv(name);
  return message;
}

// The documentation's row of a knob.
std::string row(const env::Knob& k) {
  return fmt::format("| `{}` | {} | {} | {} |", k.name, k.fallback, env::accepted(k), k.meaning);
}

}  // namespace

BOOST_AUTO_TEST_CASE(every_knob_is_declared_once_and_whole) {
  std::set<std::string> names;
  for (const env::Knob& k : env::knobs()) {
    BOOST_TEST_CONTEXT(k.name) {
      BOOST_TEST(names.insert(k.name).second);
      BOOST_TEST(std::string(k.meaning).size() > 10u);
      BOOST_TEST(!env::accepted(k).empty());
      if (k.kind == env::KnobKind::Integer) BOOST_TEST(k.lo <= k.hi);
    }
  }
  // Each layer's variables, the comm layer's among them.
  for (const char* n : {"FSDP_CPU_ALLOCATOR", "FSDP_BLAS_AUTOSELECT", "OPENBLAS_CORETYPE",
                        "FSDP_USE_FULL_PREC_IN_EVAL", "FSDP_PLAN_TIMING", "RANK", "WORLD_SIZE",
                        "MASTER_PORT", "FSDP_TIMEOUT_MS"})
    BOOST_TEST(names.count(n) == 1u, n);
}

BOOST_AUTO_TEST_CASE(each_kind_of_bad_value_names_the_variable_and_the_accepted_values) {
  BOOST_TEST(refusal("FSDP_CPU_ALLOCATOR", "jemalloc", [] { env::choice("FSDP_CPU_ALLOCATOR"); }) ==
             "environment variable FSDP_CPU_ALLOCATOR='jemalloc' is not caching or malloc");
  BOOST_TEST(refusal("FSDP_BLAS_AUTOSELECT", "off", [] { env::enabled("FSDP_BLAS_AUTOSELECT"); }) ==
             "environment variable FSDP_BLAS_AUTOSELECT='off' is neither 0 nor 1");
  BOOST_TEST(refusal("FSDP_USE_FULL_PREC_IN_EVAL", "true", [] {
               env::enabled("FSDP_USE_FULL_PREC_IN_EVAL");
             }) == "environment variable FSDP_USE_FULL_PREC_IN_EVAL='true' is neither 0 nor 1");
  BOOST_TEST(refusal("FSDP_PLAN_TIMING", "yes", [] { env::enabled("FSDP_PLAN_TIMING"); }) ==
             "environment variable FSDP_PLAN_TIMING='yes' is neither 0 nor 1");
  BOOST_TEST(refusal("MASTER_PORT", "65536", [] { env::integer("MASTER_PORT"); }) ==
             "environment variable MASTER_PORT='65536' is out of range: expected 1 to 65535");
  BOOST_TEST(refusal("FSDP_TIMEOUT_MS", "1e3", [] { env::integer("FSDP_TIMEOUT_MS"); }) ==
             "environment variable FSDP_TIMEOUT_MS='1e3' is not an integer");
}

BOOST_AUTO_TEST_CASE(good_unset_and_empty_values) {
  unsetenv("FSDP_BLAS_AUTOSELECT");
  BOOST_TEST(env::enabled("FSDP_BLAS_AUTOSELECT"));  // default 1
  setenv("FSDP_USE_FULL_PREC_IN_EVAL", "", 1);       // empty: the default
  BOOST_TEST(!env::enabled("FSDP_USE_FULL_PREC_IN_EVAL"));
  setenv("FSDP_USE_FULL_PREC_IN_EVAL", "1", 1);
  BOOST_TEST(env::enabled("FSDP_USE_FULL_PREC_IN_EVAL"));
  unsetenv("FSDP_USE_FULL_PREC_IN_EVAL");
  setenv("FSDP_CPU_ALLOCATOR", "malloc", 1);
  BOOST_TEST(*env::choice("FSDP_CPU_ALLOCATOR") == "malloc");
  unsetenv("FSDP_CPU_ALLOCATOR");
  BOOST_TEST(!env::choice("FSDP_CPU_ALLOCATOR"));
}

BOOST_AUTO_TEST_CASE(an_undeclared_variable_cannot_be_read) {
  BOOST_CHECK_THROW(env::raw("FSDP_NOT_A_KNOB"), AssertionError);
  BOOST_CHECK_THROW(env::enabled("MASTER_PORT"), AssertionError);  // declared as an integer
}

BOOST_AUTO_TEST_CASE(the_documentation_lists_exactly_the_table) {
  std::ifstream in(FSDP_ENVIRONMENT_DOC);
  BOOST_REQUIRE(in.good());
  std::set<std::string> documented;
  for (std::string line; std::getline(in, line);)
    if (line.rfind("| `", 0) == 0) documented.insert(line);
  std::ostringstream table;
  bool same = documented.size() == env::knobs().size();
  for (const env::Knob& k : env::knobs()) {
    same = same && documented.count(row(k)) == 1;
    table << row(k) << "\n";
  }
  BOOST_TEST(same, "docs/environment.md's rows differ from core/env.cpp's table; they are:\n"
                       << table.str());
}
