#define BOOST_TEST_MODULE core_nn
#include <boost/test/unit_test.hpp>
