#define BOOST_TEST_MODULE cuda_host
#include <boost/test/unit_test.hpp>
