#include <boost/test/unit_test.hpp>
#include <cmath>
#include <thread>

#include "core/autograd.h"
#include "core/blas_kernels.h"
#include "core/dtype_convert.h"
#include "core/ops.h"
#include "core/tensor.h"

using namespace fsdp;

BOOST_AUTO_TEST_SUITE(tensor)

BOOST_AUTO_TEST_CASE(factories_shape_dtype_values) {
  Tensor z = zeros({2, 3});
  BOOST_TEST(z.shape() == (Shape{2, 3}));
  BOOST_TEST(z.strides() == (Shape{3, 1}));
  BOOST_TEST(z.numel() == 6);
  BOOST_TEST(z.dtype() == DType::Float32);
  BOOST_TEST(z.nbytes() == 24u);
  Tensor f = full({4}, 2.5, DType::Float64);
  BOOST_TEST(f.to_vector() == (std::vector<double>{2.5, 2.5, 2.5, 2.5}));
  Tensor a = arange(5);
  BOOST_TEST(a.dtype() == DType::Int64);
  BOOST_TEST(a.to_int_vector() == (std::vector<std::int64_t>{0, 1, 2, 3, 4}));
  Tensor s = scalar_tensor(3.0);
  BOOST_TEST(s.dim() == 0);
  BOOST_TEST(s.item() == 3.0);
}

BOOST_AUTO_TEST_CASE(half_and_bfloat16_storage) {
  Tensor h = from_vector({1.0, -2.5, 65504.0, 1e-4}, {4}, DType::Float16);
  BOOST_TEST(h.nbytes() == 8u);
  auto v = h.to_vector();
  BOOST_TEST(v[0] == 1.0);
  BOOST_TEST(v[1] == -2.5);
  BOOST_TEST(v[2] == 65504.0);
  BOOST_TEST(std::abs(v[3] - 1e-4) < 1e-7);
  Tensor b = from_vector({3.14159265}, {1}, DType::BFloat16);
  BOOST_TEST(b.item() == 3.140625);  // bfloat16 keeps 8 significant bits
}

BOOST_AUTO_TEST_CASE(meta_tensors_have_no_storage) {
  auto before = global_memory_stats(DeviceType::CPU).current_bytes.load();
  Tensor m = empty({1000000, 1000}, TensorOptions(DType::Float32, kMeta));
  BOOST_TEST(m.numel() == 1000000000);
  BOOST_TEST(m.is_meta());
  BOOST_TEST(global_memory_stats(DeviceType::CPU).current_bytes.load() == before);
  BOOST_CHECK_EXCEPTION(m.data_ptr(), RuntimeError, [](const RuntimeError& e) {
    return std::string(e.what()).find("meta tensor") != std::string::npos;
  });
}

BOOST_AUTO_TEST_CASE(shapes_past_int64_are_refused) {
  // 2^62 x 8 elements wrapped to 0 (and 1e18 x 32 to a negative count) before.
  const auto meta = TensorOptions(DType::Float32, kMeta);
  for (const Shape& shape : {Shape{std::int64_t{1} << 62, 8}, Shape{1000000000000000000, 32},
                             Shape{std::int64_t{1} << 62, 8, 0}}) {
    BOOST_CHECK_EXCEPTION(empty(shape, meta), RuntimeError, [&](const RuntimeError& e) {
      return std::string(e.what()) ==
             "Storage size calculation overflowed with sizes=" + shape_str(shape);
    });
  }
  BOOST_TEST(empty({std::int64_t{1} << 62, 1}, meta).numel() == std::int64_t{1} << 62);
  BOOST_TEST(empty({0, std::int64_t{1} << 62}, meta).numel() == 0);
}

BOOST_AUTO_TEST_CASE(memory_stats_current_and_peak) {
  auto& g = global_memory_stats(DeviceType::CPU);
  auto stats = std::make_shared<MemoryStats>();
  {
    MemoryStatsScope scope(stats);
    auto before = g.current_bytes.load();
    {
      Tensor a = empty({1024}, DType::Float32);  // 4096 bytes
      Tensor b = empty({256}, DType::Float64);   // 2048 bytes
      BOOST_TEST(stats->current_bytes.load() == 6144);
      BOOST_TEST(g.current_bytes.load() - before == 6144);
    }
    BOOST_TEST(stats->current_bytes.load() == 0);
    BOOST_TEST(stats->peak_bytes.load() == 6144);
    BOOST_TEST(stats->num_allocs.load() == 2);
    BOOST_TEST(stats->num_frees.load() == 2);
  }
  // Outside the scope, allocations are not charged to it.
  Tensor c = empty({100});
  BOOST_TEST(stats->current_bytes.load() == 0);
}

BOOST_AUTO_TEST_CASE(memory_stats_are_per_scope_across_threads) {
  auto s1 = std::make_shared<MemoryStats>();
  auto s2 = std::make_shared<MemoryStats>();
  std::thread t1([&] {
    MemoryStatsScope scope(s1);
    Tensor a = empty({1000});
  });
  std::thread t2([&] {
    MemoryStatsScope scope(s2);
    Tensor a = empty({500});
    Tensor b = empty({500});
  });
  t1.join();
  t2.join();
  BOOST_TEST(s1->peak_bytes.load() == 4000);
  BOOST_TEST(s2->peak_bytes.load() == 4000);
  BOOST_TEST(s1->num_allocs.load() == 1);
  BOOST_TEST(s2->num_allocs.load() == 2);
}

BOOST_AUTO_TEST_CASE(memory_stats_scopes_nest) {
  auto outer = std::make_shared<MemoryStats>();
  auto inner = std::make_shared<MemoryStats>();
  MemoryStatsScope o(outer);
  Tensor a = empty({250});  // 1000 bytes, outer only
  {
    MemoryStatsScope i(inner);
    BOOST_TEST(MemoryStatsScope::current() == inner);
    Tensor b = empty({500});  // 2000 bytes, inner and outer
    BOOST_TEST(inner->current_bytes.load() == 2000);
    BOOST_TEST(outer->current_bytes.load() == 3000);
    BOOST_TEST(outer->peak_bytes.load() == 3000);
    // Resizing charges the scopes current when the storage was made, here both.
    b.storage()->resize(4000);
    BOOST_TEST(inner->current_bytes.load() == 4000);
    BOOST_TEST(outer->current_bytes.load() == 5000);
  }
  BOOST_TEST(MemoryStatsScope::current() == outer);
  BOOST_TEST(inner->current_bytes.load() == 0);
  BOOST_TEST(inner->peak_bytes.load() == 6000);  // old and new buffer during the resize
  BOOST_TEST(outer->current_bytes.load() == 1000);
  BOOST_TEST(outer->peak_bytes.load() == 7000);
  BOOST_TEST(inner->num_allocs.load() == 2);
  BOOST_TEST(inner->num_frees.load() == 2);
  // The same stats entered twice are charged once.
  {
    MemoryStatsScope again(outer);
    Tensor c = empty({25});
    BOOST_TEST(outer->current_bytes.load() == 1100);
  }
}

BOOST_AUTO_TEST_CASE(memory_stats_frees_from_another_thread_charge_every_scope) {
  auto job = std::make_shared<MemoryStats>();
  auto rank = std::make_shared<MemoryStats>();
  auto other = std::make_shared<MemoryStats>();
  Tensor t;
  std::thread alloc([&] {
    MemoryStatsScope j(job);
    MemoryStatsScope r(rank);
    t = empty({1000});
  });
  alloc.join();
  BOOST_TEST(job->current_bytes.load() == 4000);
  BOOST_TEST(rank->current_bytes.load() == 4000);
  std::thread release([&] {
    MemoryStatsScope s(other);
    t = Tensor();
  });
  release.join();
  BOOST_TEST(job->current_bytes.load() == 0);
  BOOST_TEST(rank->current_bytes.load() == 0);
  BOOST_TEST(rank->num_frees.load() == 1);
  BOOST_TEST(other->current_bytes.load() == 0);
  BOOST_TEST(other->num_frees.load() == 0);
}

BOOST_AUTO_TEST_CASE(memory_scopes_captured_on_one_thread_charge_work_on_another) {
  auto job = std::make_shared<MemoryStats>();
  auto rank = std::make_shared<MemoryStats>();
  auto worker_own = std::make_shared<MemoryStats>();
  MemoryScopes captured;
  {
    MemoryStatsScope j(job);
    MemoryStatsScope r(rank);
    captured = MemoryScopes::current();
  }
  BOOST_TEST(MemoryScopes::current().empty());
  std::thread worker([&] {
    MemoryStatsScope own(worker_own);
    {
      MemoryScopesGuard guard(captured);
      BOOST_TEST(MemoryStatsScope::current() == rank);
      Tensor t = empty({100});
      BOOST_TEST(rank->peak_bytes.load() == 400);
      BOOST_TEST(job->peak_bytes.load() == 400);
    }
    BOOST_TEST(MemoryStatsScope::current() == worker_own);
    Tensor u = empty({10});
  });
  worker.join();
  BOOST_TEST(worker_own->peak_bytes.load() == 40);
  BOOST_TEST(rank->current_bytes.load() == 0);
  BOOST_TEST(rank->num_allocs.load() == 1);
}

BOOST_AUTO_TEST_CASE(storage_resize_frees_and_keeps_prefix) {
  Tensor t = from_vector({1, 2, 3, 4}, {4});
  auto st = t.storage();
  st->resize(0);
  BOOST_TEST(st->nbytes() == 0u);
  st->resize(16);
  t.fill_(7);
  BOOST_TEST(t.to_vector() == (std::vector<double>{7, 7, 7, 7}));
  st->resize(8);
  Tensor view = make_view(t, {2}, {1}, 0);
  BOOST_TEST(view.to_vector() == (std::vector<double>{7, 7}));
}

BOOST_AUTO_TEST_CASE(copy_broadcasts_and_converts) {
  Tensor dst = zeros({2, 3}, DType::Float64);
  Tensor src = from_vector({1, 2, 3}, {3}, DType::Float32);
  dst.copy_(src);
  BOOST_TEST(dst.to_vector() == (std::vector<double>{1, 2, 3, 1, 2, 3}));
  Tensor ints = zeros({3}, DType::Int32);
  ints.copy_(from_vector({1.9, -2.2, 3.5}, {3}));
  BOOST_TEST(ints.to_vector() == (std::vector<double>{1, -2, 3}));
  BOOST_CHECK_THROW(dst.copy_(zeros({4})), RuntimeError);
}

BOOST_AUTO_TEST_CASE(strided_views_read_through_storage) {
  Tensor t = from_vector({0, 1, 2, 3, 4, 5}, {2, 3});
  Tensor tt = make_view(t, {3, 2}, {1, 3}, 0);  // transpose
  BOOST_TEST(!tt.is_contiguous());
  BOOST_TEST(tt.to_vector() == (std::vector<double>{0, 3, 1, 4, 2, 5}));
  tt.fill_(1);
  BOOST_TEST(t.sum().item() == 6.0);
}

BOOST_AUTO_TEST_CASE(set_data_keeps_identity) {
  Tensor p = zeros({3}).requires_grad_();
  Tensor alias = p;
  p.set_data(from_vector({1, 2, 3, 4}, {2, 2}));
  BOOST_TEST(alias.shape() == (Shape{2, 2}));
  BOOST_TEST(alias.requires_grad());
  BOOST_TEST(alias.is_same(p));
}

BOOST_AUTO_TEST_CASE(errors_name_what_was_wrong) {
  BOOST_CHECK_EXCEPTION(zeros({2}).item(), ValueError, [](const ValueError& e) {
    return std::string(e.what()).find("shape [2]") != std::string::npos;
  });
  BOOST_CHECK_EXCEPTION(zeros({2}, DType::Int64).requires_grad_(), RuntimeError,
                        [](const RuntimeError& e) {
                          return std::string(e.what()).find("floating point") != std::string::npos;
                        });
  BOOST_CHECK_THROW(from_vector({1, 2, 3}, {2, 2}), ValueError);
  BOOST_CHECK_THROW(Device::parse("tpu"), ValueError);
  BOOST_CHECK_THROW(dtype_from_name("float8"), ValueError);
  BOOST_TEST(Device::parse("cuda:1").str() == "cuda:1");
}

BOOST_AUTO_TEST_CASE(generator_state_save_restore) {
  Generator g(123);
  auto state = g.get_state();
  std::vector<std::uint64_t> first;
  for (int i = 0; i < 5; ++i) first.push_back(g.next_u64());
  g.set_state(state);
  for (int i = 0; i < 5; ++i) BOOST_TEST(g.next_u64() == first[static_cast<std::size_t>(i)]);
  Generator h(124);
  BOOST_TEST(h.next_u64() != first[0]);
  double sum = 0, sq = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    double x = g.normal();
    sum += x;
    sq += x * x;
  }
  BOOST_TEST(std::abs(sum / n) < 0.05);
  BOOST_TEST(std::abs(sq / n - 1.0) < 0.05);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(blas_kernels)

BOOST_AUTO_TEST_CASE(generic_openblas_cores_are_replaced_on_avx_cpus) {
  BOOST_TEST(fsdp::better_openblas_coretype("Prescott", true, true).value_or("") == "SkylakeX");
  BOOST_TEST(fsdp::better_openblas_coretype("prescott", false, true).value_or("") == "Haswell");
  BOOST_TEST(fsdp::better_openblas_coretype("Nehalem", false, true).value_or("") == "Haswell");
  BOOST_TEST(!fsdp::better_openblas_coretype("Prescott", false, false).has_value());
  // A recognised CPU keeps OpenBLAS's choice.
  BOOST_TEST(!fsdp::better_openblas_coretype("Haswell", true, true).has_value());
  BOOST_TEST(!fsdp::better_openblas_coretype("Zen", false, true).has_value());
  BOOST_TEST(!fsdp::better_openblas_coretype("SkylakeX", true, true).has_value());
}

// The bulk converters (vectorised) agree with the scalar ones on every float16 and bfloat16
// value, round to nearest even on ties, and Tensor::to takes them.
BOOST_AUTO_TEST_CASE(bulk_dtype_conversion_matches_the_scalar_converters) {
  std::vector<std::uint16_t> all(65536);
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::uint16_t>(i);
  std::vector<float> f(all.size());
  std::vector<std::uint16_t> back(all.size());
  for (DType d : {DType::Float16, DType::BFloat16}) {
    const bool half = d == DType::Float16;
    BOOST_REQUIRE(fsdp::convert_contiguous(f.data(), DType::Float32, all.data(), d, 65536));
    BOOST_REQUIRE(fsdp::convert_contiguous(back.data(), d, f.data(), DType::Float32, 65536));
    int mismatches = 0;
    for (std::size_t i = 0; i < all.size(); ++i) {
      const float want = half ? fsdp::half_to_float(all[i]) : fsdp::bf16_to_float(all[i]);
      if (std::isnan(want)) {
        if (!std::isnan(f[i])) ++mismatches;
        continue;
      }
      if (f[i] != want || back[i] != all[i]) ++mismatches;
    }
    BOOST_TEST(mismatches == 0, dtype_name(d));
  }
  // Ties round to even: 1 + 2^-8 is halfway between two bfloat16 values (1 and 1 + 2^-7).
  const float ties[] = {1.0f + 1.0f / 256, 1.0f + 3.0f / 256, -(1.0f + 1.0f / 256)};
  std::uint16_t out[3];
  BOOST_REQUIRE(fsdp::convert_contiguous(out, DType::BFloat16, ties, DType::Float32, 3));
  for (int i = 0; i < 3; ++i) BOOST_TEST(out[i] == fsdp::float_to_bf16(ties[i]));
  BOOST_TEST(out[0] == 0x3f80);
  BOOST_TEST(out[1] == 0x3f82);
  Tensor x = from_vector(std::vector<double>{1.0, -2.5, 65504.0, 1e-8}, {4});
  BOOST_TEST(x.to(DType::Float16).to(DType::Float32).to_vector() ==
                 (std::vector<double>{1.0, -2.5, 65504.0, 0.0}),
             boost::test_tools::per_element());
  BOOST_TEST(!fsdp::convert_contiguous(out, DType::Int32, ties, DType::Float32, 0));
}

BOOST_AUTO_TEST_SUITE_END()

// Tensor's accessors wrap dims as every op does (core/wrap_dim.h) and say so in torch's words; a
// 0-d tensor has no size to index.
BOOST_AUTO_TEST_CASE(size_and_stride_wrap_dims_like_torch) {
  Tensor t = zeros({2, 3});
  BOOST_TEST(t.size(-1) == 3);
  BOOST_TEST(t.stride(-2) == 3);
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const IndexError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  BOOST_TEST(message([&] { t.size(2); }) ==
             "size: Dimension out of range (expected to be in range of [-2, 1], but got 2)");
  BOOST_TEST(message([&] { t.stride(-3); }) ==
             "stride: Dimension out of range (expected to be in range of [-2, 1], but got -3)");
  Tensor s = scalar_tensor(1.0);
  BOOST_TEST(message([&] { s.size(0); }) ==
             "size: Dimension specified as 0 but tensor has no dimensions");
}
