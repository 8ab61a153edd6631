#define BOOST_TEST_MODULE core_tensor
#include <boost/test/unit_test.hpp>
