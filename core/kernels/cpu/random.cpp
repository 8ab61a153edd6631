// The CPU random fills: draws from a Generator written in row-major order (moved from
// core/ops/random.cpp), so a saved generator state replays the same values.
#include "core/random.h"

#include "core/kernels/cpu/cpu_kernels.h"
#include "core/ops/op_utils.h"

namespace fsdp::cpu {
using namespace ops_detail;

namespace {

// Writes f() into every element of t in row-major order.
template <typename F>
void fill_with(const Tensor& t, F&& f) {
  void* p = t.data_ptr();
  dispatch_all(t.dtype(), [&]<typename T>() {
    T* tp = static_cast<T*>(p);
    for_each_offset(t.shape(), t.strides(), [&](std::int64_t o) { tp[o] = from_double<T>(f()); });
  });
}

// Writes draws of uniform [low, high) into t, redrawing the rare value that rounds up to
// `high` in t's dtype (so the interval stays half-open, unbiased).
void fill_uniform(const Tensor& t, double low, double high, Generator& g) {
  dispatch_all(t.dtype(), [&]<typename T>() {
    T* tp = t.data<T>();
    for_each_offset(t.shape(), t.strides(), [&](std::int64_t o) {
      T v = from_double<T>(low + (high - low) * g.uniform());
      while (high > low && to_double(v) >= high)
        v = from_double<T>(low + (high - low) * g.uniform());
      tp[o] = v;
    });
  });
}

}  // namespace

void random(const RandomSpec& spec, const Tensor& t, Generator& g) {
  switch (spec.kind) {
    case RandomKind::Uniform:
      fill_uniform(t, spec.a, spec.b, g);
      return;
    case RandomKind::Normal:
      fill_with(t, [&, mean = spec.a, std = spec.b] { return mean + std * g.normal(); });
      return;
    case RandomKind::Keep:
      fill_with(t, [&, p = spec.a] { return g.uniform() >= p ? 1.0 : 0.0; });
      return;
    case RandomKind::Integer: {
      const std::int64_t low = spec.low;
      const std::uint64_t range = spec.range;
      fill_with(t, [&] {
        return static_cast<double>(low + static_cast<std::int64_t>(g.next_u64() % range));
      });
      return;
    }
  }
}

}  // namespace fsdp::cpu
