#define BOOST_TEST_MODULE core_streams
#include <boost/test/unit_test.hpp>
