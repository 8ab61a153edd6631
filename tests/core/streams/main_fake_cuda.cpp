#define BOOST_TEST_MODULE fake_cuda
#include <boost/test/unit_test.hpp>
