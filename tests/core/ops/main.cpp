#define BOOST_TEST_MODULE core_ops
#include <boost/test/unit_test.hpp>
