// core/gemm_recorder.h: every product the op kernels hand to BLAS is recorded with its shape and
// transposes while a recorder is active (pool threads' included), nothing otherwise, and a second
// recorder at once is refused.
#include <boost/test/unit_test.hpp>

#include "core/error.h"
#include "core/gemm_recorder.h"
#include "core/ops.h"
#include "core/parallel.h"

namespace fsdp::testing {

BOOST_AUTO_TEST_SUITE(gemm_recorder)

BOOST_AUTO_TEST_CASE(records_shapes_and_transposes_of_mm_and_bmm) {
  const Tensor a = randn({6, 4}), b = randn({5, 4});
  std::vector<GemmCall> calls;
  {
    GemmRecorder rec;
    mm(a, transpose(b, 0, 1));  // (6, 4) x (4, 5), the second operand transposed in place
    calls = rec.calls();
  }
  BOOST_REQUIRE_EQUAL(calls.size(), 1u);
  BOOST_TEST(calls[0].m == 6);
  BOOST_TEST(calls[0].n == 5);
  BOOST_TEST(calls[0].k == 4);
  BOOST_TEST(!calls[0].trans_a);
  BOOST_TEST(calls[0].trans_b);
  BOOST_TEST(!calls[0].is_double);
  BOOST_TEST(calls[0].flops() == 2.0 * 6 * 5 * 4);

  mm(a, transpose(b, 0, 1));  // no recorder: nothing to see, nothing kept
  set_num_threads(2);
  {
    GemmRecorder rec;
    bmm(randn({9, 3, 2}, DType::Float64), randn({9, 2, 7}, DType::Float64));
    calls = rec.calls();
  }
  set_num_threads(1);
  BOOST_REQUIRE_EQUAL(calls.size(), 9u);  // split across the pool: every product recorded
  for (const auto& c : calls) {
    BOOST_TEST(c.is_double);
    BOOST_TEST((c.m == 3 && c.n == 7 && c.k == 2));
  }
}

BOOST_AUTO_TEST_CASE(one_recorder_at_a_time) {
  GemmRecorder first;
  BOOST_CHECK_EXCEPTION(GemmRecorder second, RuntimeError, [](const RuntimeError& e) {
    return std::string(e.what()).find("another recorder is already active") != std::string::npos;
  });
  mm(randn({2, 2}), randn({2, 2}));
  BOOST_TEST(first.calls().size() == 1u);
  first.clear();
  BOOST_TEST(first.calls().empty());
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace fsdp::testing
