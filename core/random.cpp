// The random number generators: one default Generator per thread, and its normal draw.
#include "core/random.h"

#include <cmath>

namespace fsdp {

Generator& default_generator() {
  thread_local Generator gen;
  return gen;
}
void manual_seed(std::uint64_t seed) {
  default_generator().manual_seed(seed);
}

double Generator::normal() {
  double u1 = uniform();
  double u2 = uniform();
  if (u1 < 1e-300) u1 = 1e-300;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}
}  // namespace fsdp
