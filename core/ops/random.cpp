// Random tensors and in-place random fills, drawn in row-major order from a Generator (this
// thread's default unless one is given), so a saved generator state replays the same values.
#include "core/dispatch/intercept.h"
#include "core/ops/op_utils.h"

namespace fsdp {
using namespace ops_detail;

namespace {

Generator& gen_or_default(Generator* g) {
  return g ? *g : default_generator();
}

// Fills t from g on its device (random's kernels draw in row-major order).
void fill_random(Tensor& t, const char* op, const RandomSpec& spec, Generator& g) {
  const Device dev = common_device(op, {&t});
  if (dev.is_meta()) return;
  t.storage()->bump_version();
  kernels(dev).random(spec, t, g);
}

void check_float(const Tensor& t, const char* op) {
  FSDP_CHECK(is_floating(t.dtype()), TypeError,
             "{}: expected a floating point tensor, got dtype {} (shape {})", op,
             dtype_name(t.dtype()), shape_str(t.shape()));
}

}  // namespace

Tensor& uniform_(Tensor& t, double low, double high, Generator* generator) {
  FSDP_DISPATCH_INPLACE("uniform_", uniform_, t, low, high, generator);
  check_float(t, "uniform_");
  FSDP_CHECK(low <= high, RuntimeError,
             "uniform_ expects to return a [from, to) range, but found from={} > to={}", low, high);
  Generator& g = gen_or_default(generator);
  fill_random(t, "uniform_", {RandomKind::Uniform, low, high}, g);
  return t;
}

Tensor& normal_(Tensor& t, double mean, double std, Generator* generator) {
  FSDP_DISPATCH_INPLACE("normal_", normal_, t, mean, std, generator);
  check_float(t, "normal_");
  FSDP_CHECK(std >= 0.0, RuntimeError, "normal expects std >= 0.0, but found std {}", std);
  Generator& g = gen_or_default(generator);
  fill_random(t, "normal_", {RandomKind::Normal, mean, std}, g);
  return t;
}

Tensor rand(const Shape& shape, TensorOptions options, Generator* generator) {
  FSDP_DISPATCH("rand", rand, shape, options, generator);
  bool rg = options.requires_grad;
  Tensor t = empty(shape, options.with_requires_grad(false));
  check_float(t, "rand");
  uniform_(t, 0.0, 1.0, generator);
  if (rg) t.requires_grad_(true);
  return t;
}

Tensor randn(const Shape& shape, TensorOptions options, Generator* generator) {
  FSDP_DISPATCH("randn", randn, shape, options, generator);
  bool rg = options.requires_grad;
  Tensor t = empty(shape, options.with_requires_grad(false));
  check_float(t, "randn");
  normal_(t, 0.0, 1.0, generator);
  if (rg) t.requires_grad_(true);
  return t;
}

Tensor randint(std::int64_t low, std::int64_t high, const Shape& shape, TensorOptions options,
               Generator* generator) {
  FSDP_DISPATCH("randint", randint, low, high, shape, options, generator);
  FSDP_CHECK(low < high, RuntimeError,
             "random_ expects 'from' to be less than 'to', but got from={} >= to={}", low, high);
  Tensor t = empty(shape, options.with_requires_grad(false));
  Generator& g = gen_or_default(generator);
  const auto range = static_cast<std::uint64_t>(high - low);
  fill_random(t, "randint", {RandomKind::Integer, 0.0, 0.0, low, range}, g);
  return t;
}

}  // namespace fsdp
