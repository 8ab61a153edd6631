#define BOOST_TEST_MODULE policies
#include <boost/test/unit_test.hpp>
