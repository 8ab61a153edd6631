// core/cuda/cublaslt_library.h without a device: a program linking the CUDA device does not load
// libcublasLt until a product asks for it; loading resolves every entry point; a library that
// cannot be opened, or lacks a function, is one error naming each path and the reason.
#define BOOST_TEST_MODULE cuda_cublaslt_library
#include <boost/test/unit_test.hpp>
#include <fstream>
#include <string>

#include "core/cuda/cublaslt_library.h"
#include "core/error.h"
#include "tests/support/error_message.h"

using namespace fsdp;
using namespace fsdp::cuda;

namespace {

bool mapped(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);)
    if (line.find(name) != std::string::npos) return true;
  return false;
}

}  // namespace

BOOST_AUTO_TEST_CASE(loaded_at_the_first_use_with_every_function) {
  BOOST_TEST(!mapped("libcublasLt"));  // not at start-up
  const CublasLt& lt = cublaslt();
  BOOST_TEST(mapped("libcublasLt"));
  BOOST_TEST(&cublaslt() == &lt);  // once
#define FSDP_EXPECT_RESOLVED(name) BOOST_TEST((lt.name != nullptr), #name);
  FSDP_CUBLASLT_FUNCTIONS(FSDP_EXPECT_RESOLVED)
#undef FSDP_EXPECT_RESOLVED
  BOOST_TEST(std::string(lt.cublasLtGetStatusName(CUBLAS_STATUS_NOT_SUPPORTED)) ==
             "CUBLAS_STATUS_NOT_SUPPORTED");
}

BOOST_AUTO_TEST_CASE(a_status_fails_the_check_with_its_name_and_the_call) {
  BOOST_CHECK_NO_THROW(check_status(CUBLAS_STATUS_SUCCESS, "call()", "f.cpp", 3));
  const std::string message = testing::error_message<RuntimeError>(
      [] { check_status(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul(...)", "f.cpp", 7); });
  BOOST_TEST(message.find("CUBLAS_STATUS_INVALID_VALUE") != std::string::npos, message);
  BOOST_TEST(message.find("cublasLtMatmul(...)") != std::string::npos, message);
  BOOST_TEST(message.find("f.cpp:7") != std::string::npos, message);
}

BOOST_AUTO_TEST_CASE(a_library_that_cannot_be_opened_names_each_path_and_the_reason) {
  const std::string soname = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
  const std::string message = testing::error_message<RuntimeError>([] {
    load_cublaslt({"/nonexistent/a/libcublasLt.so", "/nonexistent/b/libcublasLt.so"});
  });
  BOOST_TEST(message.rfind("cuBLASLt: cannot load " + soname +
                               ", which the CUDA device's matrix products need: "
                               "/nonexistent/a/libcublasLt.so (",
                           0) == 0,
             message);
  BOOST_TEST(message.find("; /nonexistent/b/libcublasLt.so (") != std::string::npos, message);
  BOOST_TEST(message.find("No such file or directory") != std::string::npos, message);
  BOOST_TEST(message.find("LD_LIBRARY_PATH or configure with -Dcublas_home") != std::string::npos,
             message);
  BOOST_TEST(testing::error_message<RuntimeError>([] {
               load_cublaslt({});
             }).find("no path given") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_library_without_the_functions_names_the_first_missing_one) {
  BOOST_TEST(testing::error_message<RuntimeError>([] { load_cublaslt({"libm.so.6"}); }) ==
             "cuBLASLt: libm.so.6 has no function cublasLtCreate");
}
