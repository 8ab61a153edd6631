#include "tests/comm/collective_checks.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>

namespace fsdp::comm::testing {

namespace {

void store(DType t, void* base, std::size_t i, double v) {
  switch (t) {
    case DType::Float32:
      static_cast<float*>(base)[i] = float(v);
      return;
    case DType::Float64:
      static_cast<double*>(base)[i] = v;
      return;
    case DType::Float16:
      static_cast<std::uint16_t*>(base)[i] = float_to_half(float(v));
      return;
    case DType::BFloat16:
      static_cast<std::uint16_t*>(base)[i] = float_to_bf16(float(v));
      return;
    case DType::Int64:
      static_cast<std::int64_t*>(base)[i] = std::int64_t(v);
      return;
    case DType::Int32:
      static_cast<std::int32_t*>(base)[i] = std::int32_t(v);
      return;
    case DType::UInt8:
      static_cast<std::uint8_t*>(base)[i] = std::uint8_t(v);
      return;
    case DType::Bool:
      static_cast<std::uint8_t*>(base)[i] = v != 0 ? 1 : 0;
      return;
  }
}

double load(DType t, const void* base, std::size_t i) {
  switch (t) {
    case DType::Float32:
      return static_cast<const float*>(base)[i];
    case DType::Float64:
      return static_cast<const double*>(base)[i];
    case DType::Float16:
      return half_to_float(static_cast<const std::uint16_t*>(base)[i]);
    case DType::BFloat16:
      return bf16_to_float(static_cast<const std::uint16_t*>(base)[i]);
    case DType::Int64:
      return double(static_cast<const std::int64_t*>(base)[i]);
    case DType::Int32:
      return static_cast<const std::int32_t*>(base)[i];
    case DType::UInt8:
      return static_cast<const std::uint8_t*>(base)[i];
    case DType::Bool:
      return static_cast<const std::uint8_t*>(base)[i];
  }
  return 0;
}

}  // namespace

double input_value(DType dtype, int rank, std::size_t i, int salt) {
  if (dtype == DType::Bool) return double(((i + std::size_t(salt)) >> std::size_t(rank % 8)) & 1u);
  auto v = double((std::size_t(rank) * 7 + i * 3 + std::size_t(salt) * 5) % 29);
  bool is_signed = dtype != DType::UInt8;
  if (is_signed) v -= 11;
  if (is_floating(dtype)) v += 0.5;
  return v;
}

Bytes make_input(DType dtype, std::size_t count, int rank, int salt) {
  Bytes b(count * dtype_size(dtype));
  for (std::size_t i = 0; i < count; ++i)
    store(dtype, b.data(), i, input_value(dtype, rank, i, salt));
  return b;
}

Bytes expected_reduction(DType dtype, ReduceOp op, std::size_t count, int world, int salt) {
  Bytes b(count * dtype_size(dtype));
  for (std::size_t i = 0; i < count; ++i) {
    double sum = 0, hi = -INFINITY, lo = INFINITY;
    for (int r = 0; r < world; ++r) {
      double v = input_value(dtype, r, i, salt);  // exact: small integers (+0.5)
      sum += v;
      hi = std::max(hi, v);
      lo = std::min(lo, v);
    }
    double result = 0;
    switch (op) {
      case ReduceOp::Sum:
        result = dtype == DType::Bool ? hi : sum;
        break;
      case ReduceOp::Max:
        result = hi;
        break;
      case ReduceOp::Min:
        result = lo;
        break;
      case ReduceOp::Avg:
        if (dtype == DType::Float64)
          result = sum / world;
        else if (is_floating(dtype))
          result = double(float(sum) / float(world));
        else
          result = std::trunc(sum / world);  // integer sum then division toward zero
        break;
    }
    store(dtype, b.data(), i, result);
  }
  return b;
}

std::string compare(const Bytes& actual, const Bytes& expected, DType dtype,
                    std::size_t offset_elems) {
  if (actual.size() != expected.size())
    return fmt::format("size {} bytes, expected {}", actual.size(), expected.size());
  // Empty buffers may have null data(), which memcmp must not get (UBSan: nonnull argument).
  if (actual.empty() || std::memcmp(actual.data(), expected.data(), actual.size()) == 0) return "";
  const std::size_t n = actual.size() / dtype_size(dtype);
  for (std::size_t i = 0; i < n; ++i) {
    double a = load(dtype, actual.data(), i), e = load(dtype, expected.data(), i);
    if (std::memcmp(actual.data() + i * dtype_size(dtype), expected.data() + i * dtype_size(dtype),
                    dtype_size(dtype)) != 0)
      return fmt::format("element {} is {}, expected {}", i + offset_elems, a, e);
  }
  return "bytes differ";
}

MatrixOptions default_matrix(int world_size) {
  MatrixOptions m;
  m.counts = {0, 1, 7, std::size_t(world_size) * 3 + 1, 1000};
  m.dtypes.assign(std::begin(kAllDTypes), std::end(kAllDTypes));
  return m;
}

std::vector<std::string> run_collective_matrix(ProcessGroup& pg, const MatrixOptions& m) {
  std::vector<std::string> failures;
  const int n = pg.size(), me = pg.rank();
  int salt = 0;
  auto fail = [&](const std::string& what, const std::string& why) {
    if (!why.empty())
      failures.push_back(fmt::format("{} rank {}/{}: {}: {}", pg.backend_name(), me, n, what, why));
  };
  auto run_case = [&](DType t, std::size_t count, ReduceOp op, bool with_op, bool async) {
    ++salt;
    const std::size_t elem = dtype_size(t);
    std::string tag = fmt::format("dtype={} count={} op={}{}", dtype_name(t), count,
                                  with_op ? reduce_op_name(op) : "-", async ? " async" : "");
    bool avg_bool = t == DType::Bool && op == ReduceOp::Avg;
    if (!with_op) {
      // all_gather: rank-major concatenation of every rank's input.
      Bytes in = make_input(t, count, me, salt), out(count * n * elem, 0xAB), expected;
      for (int r = 0; r < n; ++r) {
        Bytes part = make_input(t, count, r, salt);
        expected.insert(expected.end(), part.begin(), part.end());
      }
      if (async)
        pg.all_gather_async(in.data(), out.data(), count, t)->wait();
      else
        pg.all_gather(in.data(), out.data(), count, t);
      fail("all_gather " + tag, compare(out, expected, t));
      // in place: this rank's input already sits at its place in the output.
      Bytes in_place(count * n * elem, 0xAB);
      std::copy(in.begin(), in.end(), in_place.begin() + std::ptrdiff_t(me * count * elem));
      pg.all_gather(in_place.data() + me * count * elem, in_place.data(), count, t);
      fail("in-place all_gather " + tag, compare(in_place, expected, t));
      // broadcast from the last rank.
      ++salt;
      Bytes data = make_input(t, count, me, salt);
      Bytes expected_b = make_input(t, count, n - 1, salt);
      if (async)
        pg.broadcast_async(data.data(), count, t, n - 1)->wait();
      else
        pg.broadcast(data.data(), count, t, n - 1);
      fail("broadcast " + tag, compare(data, expected_b, t));
      return;
    }
    if (avg_bool) return;
    // reduce_scatter: chunk `me` of the elementwise reduction of size*count inputs.
    Bytes in = make_input(t, count * n, me, salt), out(count * elem, 0xCD);
    Bytes full = expected_reduction(t, op, count * n, n, salt);
    Bytes expected(full.begin() + std::ptrdiff_t(me * count * elem),
                   full.begin() + std::ptrdiff_t((me + 1) * count * elem));
    if (async)
      pg.reduce_scatter_async(in.data(), out.data(), count, t, op)->wait();
    else
      pg.reduce_scatter(in.data(), out.data(), count, t, op);
    fail("reduce_scatter " + tag, compare(out, expected, t, me * count));
    // all_reduce over a count not tied to the world size.
    ++salt;
    Bytes data = make_input(t, count, me, salt);
    Bytes expected_ar = expected_reduction(t, op, count, n, salt);
    if (async)
      pg.all_reduce_async(data.data(), count, t, op)->wait();
    else
      pg.all_reduce(data.data(), count, t, op);
    fail("all_reduce " + tag, compare(data, expected_ar, t));
  };
  for (DType t : m.dtypes)
    for (std::size_t count : m.counts) {
      for (bool async : {false, true}) {
        if (async && !m.async) continue;
        run_case(t, count, ReduceOp::Sum, false, async);
        for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min})
          run_case(t, count, op, true, async);
      }
    }
  if (m.large_count > 0) {
    for (DType t : {DType::Float32, DType::BFloat16}) {
      run_case(t, m.large_count / std::size_t(n) + 1, ReduceOp::Sum, false, false);
      run_case(t, m.large_count / std::size_t(n) + 1, ReduceOp::Sum, true, false);
      run_case(t, m.large_count / std::size_t(n) + 1, ReduceOp::Avg, true, true);
    }
  }
  pg.barrier();
  return failures;
}

std::string expected_dtype_mismatch(const ProcessGroup& pg, std::size_t count) {
  auto call = [&](const char* dtype) {
    return fmt::format("all_reduce(count={}, dtype={}, op=sum, device=cpu)", count, dtype);
  };
  return pg.rank() == 0 ? fmt::format(
                              "{}: mismatched collectives: this rank called {}, rank 1 "
                              "called {}",
                              pg.where(), call("float32"), call("int32"))
                        : fmt::format(
                              "{}: mismatched collectives: this rank called {}, rank 0 "
                              "called {}",
                              pg.where(), call("int32"), call("float32"));
}

}  // namespace fsdp::comm::testing
