#define BOOST_TEST_MODULE core_functional
#include <boost/test/unit_test.hpp>
