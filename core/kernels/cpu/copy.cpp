// The CPU copy and fill kernels: strided and converting copies (moved from core/ops/shape.cpp and
// Tensor::copy_), fills (Tensor::fill_) and index_select's row gather and its backward's
// scatter-add (core/ops/join.cpp).
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/dtype_convert.h"
#include "core/kernels/cpu/cpu_kernels.h"
#include "core/kernels/cpu/elementwise_kernels.h"

namespace fsdp::cpu {
using namespace ops_detail;

namespace {

// One element of a converting copy, as torch casts: nonzero (NaN too) is true; the rest a
// static_cast into D's compute type (integers truncate toward zero; an int64 rounds once, to
// float, on its way to a 16-bit type). x is a loaded value (16-bit types as float).
template <typename D, typename C>
compute_t<D> cast_value(C x) {
  if constexpr (std::is_same_v<D, bool>)
    return x != C(0);
  else
    return static_cast<compute_t<D>>(x);
}

// Copies a transposed layout (src reads with a large innermost stride while some other dim has
// stride 1) into a contiguous dst in 32x32 tiles, so both sides stay in cache. False if the
// layouts do not fit that pattern.
template <typename T>
bool copy_tiled(const Tensor& dst, const Tensor& src) {
  const Shape& sz = dst.shape();
  const Shape& ss = src.strides();
  const std::size_t nd = sz.size();
  if (nd < 2 || !dst.is_contiguous() || ss[nd - 1] == 1 || sz[nd - 1] < 16) return false;
  std::size_t k = nd;
  for (std::size_t d = 0; d + 1 < nd; ++d)
    if (ss[d] == 1 && sz[d] >= 16) k = d;
  if (k == nd) return false;
  Shape outer = sz;
  outer[k] = 1;
  outer[nd - 1] = 1;
  const Shape& ds = dst.strides();
  const std::int64_t R = sz[k], C = sz[nd - 1], dR = ds[k], sC = ss[nd - 1];
  T* pd = dst.data<T>();
  const T* ps = src.data<T>();
  constexpr std::int64_t kTile = 8;
  for_each_offset2(outer, ds, ss, [&](std::int64_t od, std::int64_t os) {
    for (std::int64_t r0 = 0; r0 < R; r0 += kTile)
      for (std::int64_t c0 = 0; c0 < C; c0 += kTile) {
        const std::int64_t r1 = std::min(R, r0 + kTile), c1 = std::min(C, c0 + kTile);
        for (std::int64_t r = r0; r < r1; ++r)
          for (std::int64_t c = c0; c < c1; ++c) pd[od + r * dR + c] = ps[os + r + c * sC];
      }
  });
  return true;
}

}  // namespace

void copy(const Tensor& dst, const Tensor& src) {
  if (dst.numel() == 0) return;
  dispatch_all(dst.dtype(), [&]<typename TO>() {
    dispatch_all(src.dtype(), [&]<typename TI>() {
      if constexpr (std::is_same_v<TO, TI>) {
        if (!copy_tiled<TO>(dst, src)) map1<TO, TI>(dst, src, [](auto x) { return x; });
      } else {
        map1<TO, TI>(dst, src, [](auto x) { return cast_value<TO>(x); });
      }
    });
  });
}

void copy_broadcast(const Tensor& dst, const Tensor& src) {
  if (src.dtype() == dst.dtype() && src.shape() == dst.shape() && dst.is_contiguous() &&
      src.is_contiguous()) {
    if (dst.nbytes() && dst.data_ptr() != src.data_ptr())
      std::memmove(dst.data_ptr(), src.data_ptr(), dst.nbytes());
    return;
  }
  Tensor s = src;
  // Reading from a buffer we are writing to: copy the source first.
  if (src.storage() == dst.storage()) s = src.clone();
  const std::int64_t numel = dst.numel();
  if (s.shape() == dst.shape() && dst.is_contiguous() && s.is_contiguous() &&
      convert_contiguous(dst.data_ptr(), dst.dtype(), s.data_ptr(), s.dtype(), numel))
    return;
  const Shape& sizes = dst.shape();
  const Shape& strides = dst.strides();
  Shape sstr = broadcast_strides(s, sizes);
  void* d = dst.data_ptr();
  const void* sp = s.data_ptr();
  DType dd = dst.dtype(), sd = s.dtype();
  // Rows contiguous on both sides (a narrowed or row-strided view): the bulk converter per row.
  const std::size_t nd = sizes.size();
  if (nd >= 1 && dd != sd && strides[nd - 1] == 1 && sstr[nd - 1] == 1 && numel > 0) {
    const std::int64_t row = sizes[nd - 1];
    Shape outer(sizes.begin(), sizes.end() - 1);
    Shape dso(strides.begin(), strides.end() - 1), sso(sstr.begin(), sstr.end() - 1);
    auto* db = static_cast<char*>(d);
    const auto* sb = static_cast<const char*>(sp);
    const std::size_t de = dtype_size(dd), se = dtype_size(sd);
    bool converted = true;
    for_each_offset2(outer, dso, sso, [&](std::int64_t od, std::int64_t os) {
      converted = converted && convert_contiguous(db + std::size_t(od) * de, dd,
                                                  sb + std::size_t(os) * se, sd, row);
    });
    if (converted) return;
  }
  dispatch_all(dd, [&]<typename D>() {
    dispatch_all(sd, [&]<typename S>() {
      D* dp = static_cast<D*>(d);
      const S* spp = static_cast<const S*>(sp);
      for_each_offset2(sizes, strides, sstr, [&](std::int64_t od, std::int64_t os) {
        if constexpr (std::is_same_v<D, S>)
          dp[od] = spp[os];
        else
          dp[od] = store<D>(cast_value<D>(load(spp[os])));
      });
    });
  });
}

void fill(const Tensor& t, double value) {
  void* p = t.data_ptr();
  dispatch_all(t.dtype(), [&]<typename T>() {
    T v = from_double<T>(value);
    T* tp = static_cast<T*>(p);
    if (t.is_contiguous()) {
      std::int64_t n = t.numel();
      for (std::int64_t i = 0; i < n; ++i) tp[i] = v;
    } else {
      for_each_offset(t.shape(), t.strides(), [&](std::int64_t o) { tp[o] = v; });
    }
  });
}

void store_values(const Tensor& t, const std::vector<double>& values) {
  const auto n = static_cast<std::int64_t>(values.size());
  dispatch_all(t.dtype(), [&]<typename T>() {
    T* d = t.data<T>();
    for (std::int64_t i = 0; i < n; ++i) d[i] = from_double<T>(values[static_cast<std::size_t>(i)]);
  });
}

namespace {

// The rows `index` (int64 or int32) points at, every index checked before any row moves.
std::vector<std::int64_t> checked_rows(const Tensor& index, const IndexBounds& bounds) {
  std::vector<std::int64_t> rows(static_cast<std::size_t>(index.numel()));
  auto read = [&]<typename I>() {
    const I* p = index.data<I>();
    for (std::size_t i = 0; i < rows.size(); ++i) {
      check_index(bounds, p[i], static_cast<std::int64_t>(i));
      rows[i] = bounds.row(p[i]);
    }
  };
  if (index.dtype() == DType::Int32)
    read.template operator()<std::int32_t>();
  else
    read.template operator()<std::int64_t>();
  return rows;
}

}  // namespace

void index_select(const Tensor& out, const Tensor& src, const Tensor& index,
                  const IndexBounds& bounds, std::int64_t outer, std::int64_t inner) {
  const std::vector<std::int64_t> idx = checked_rows(index, bounds);
  const std::int64_t n = static_cast<std::int64_t>(idx.size()), size = bounds.size;
  const std::size_t es = dtype_size(src.dtype());
  const char* ps = static_cast<const char*>(src.data_ptr());
  char* po = static_cast<char*>(out.data_ptr());
  const auto row = static_cast<std::size_t>(inner) * es;
  for (std::int64_t o = 0; o < outer && row > 0; ++o)
    for (std::int64_t i = 0; i < n; ++i)
      std::memcpy(
          po + static_cast<std::size_t>((o * n + i) * inner) * es,
          ps + static_cast<std::size_t>((o * size + idx[static_cast<std::size_t>(i)]) * inner) * es,
          row);
}

void index_add(const Tensor& grad, const Tensor& gc, const Tensor& index, const IndexBounds& bounds,
               std::int64_t outer, std::int64_t inner) {
  const std::vector<std::int64_t> idx = checked_rows(index, bounds);
  const std::int64_t n = static_cast<std::int64_t>(idx.size()), size = bounds.size;
  dispatch_all(grad.dtype(), [&]<typename T>() {
    T* pg = grad.data<T>();
    const T* pc = gc.data<T>();
    for (std::int64_t o = 0; o < outer; ++o)
      for (std::int64_t i = 0; i < n; ++i) {
        T* dst = pg + (o * size + idx[static_cast<std::size_t>(i)]) * inner;
        const T* src = pc + (o * n + i) * inner;
        for (std::int64_t k = 0; k < inner; ++k) dst[k] = store<T>(load(dst[k]) + load(src[k]));
      }
  });
}

}  // namespace fsdp::cpu
