#define BOOST_TEST_MODULE core_memory
#include <boost/test/unit_test.hpp>
