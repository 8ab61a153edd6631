#define BOOST_TEST_MODULE cuda_emulated_kernels
#include <boost/test/unit_test.hpp>
