#define BOOST_TEST_MODULE ops
#include <boost/test/unit_test.hpp>
