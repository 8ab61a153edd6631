// 16-byte accesses for the memory-bound kernels: a thread moves one 128-bit word (4 floats,
// 8 bf16/fp16, 2 doubles) per load or store instead of 2- or 4-byte scalars, which is what a
// warp needs to approach the memory's bandwidth. A 128-bit access must be 16-byte aligned, so
// every kernel decides per launch (flat arrays: every pointer aligned) or per row (a row's
// scalar head up to its first 16-byte boundary, whole packs, a scalar tail) which path it takes.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/cuda/kernel_math.cuh"

namespace fsdp::cuda {

// 16 bytes of T, moved by one 128-bit access.
template <typename T>
struct alignas(16) Pack {
  static_assert(16 % sizeof(T) == 0);
  static constexpr int kSize = 16 / sizeof(T);
  T v[kSize];
};

__host__ __device__ __forceinline__ bool aligned16(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
}

// Whether a flat launch over these arrays can take whole packs from their first element.
template <typename... P>
__host__ __device__ __forceinline__ bool all_aligned16(const P*... p) {
  return (aligned16(p) && ...);
}

// Loads through int4 and stores through a 128-bit integer: what nvcc 13 keeps as one 128-bit
// access wherever the pack's values come from (a pack or int4 stored to a row whose alignment
// was worked out at run time came out as four 32-bit stores; a 128-bit integer load of 16-bit
// values as two 64-bit loads).
template <typename T>
__device__ __forceinline__ Pack<T> load_pack(const T* p) {
  const int4 bits = *reinterpret_cast<const int4*>(p);
  Pack<T> v;
  memcpy(&v, &bits, sizeof(v));
  return v;
}
template <typename T>
__device__ __forceinline__ void store_pack(T* p, const Pack<T>& v) {
  unsigned __int128 bits;
  memcpy(&bits, &v, sizeof(bits));
  *reinterpret_cast<unsigned __int128*>(p) = bits;
}

// V consecutive values from p, widened: one 16-byte pack when V is T's pack size (p aligned),
// otherwise V scalar loads.
template <int V, typename T>
__device__ __forceinline__ void load_widened(const T* p, acc_t<T> (&v)[V]) {
  if constexpr (V == Pack<T>::kSize) {
    const Pack<T> pack = load_pack(p);
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = load(&pack.v[j]);
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = load(p + j);
  }
}

// The inverse: V values rounded to T and stored from p (one 16-byte pack when V is T's pack
// size).
template <int V, typename T>
__device__ __forceinline__ void store_narrowed(T* p, const acc_t<T> (&v)[V]) {
  if constexpr (V == Pack<T>::kSize) {
    Pack<T> pack;
#pragma unroll
    for (int j = 0; j < V; ++j) store(&pack.v[j], v[j]);
    store_pack(p, pack);
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) store(p + j, v[j]);
  }
}

// Whether a column reduction over (rows, cols) arrays can read each row as packs: every array
// aligned and cols a multiple of the pack, so that every row starts on a 16-byte boundary.
template <typename T, typename... P>
__host__ __device__ __forceinline__ bool columns_in_packs(std::int64_t cols, const T* p,
                                                          const P*... others) {
  return cols % Pack<T>::kSize == 0 && all_aligned16(p, others...);
}

// A row of n elements split for 16-byte accesses: elements [0, head) scalar (up to the row's
// first 16-byte boundary), `packs` whole packs from `head`, the rest scalar. Rows that do not
// all sit at the same offset from a 16-byte boundary (a misaligned output beside its input) are
// all scalar: head == n.
struct RowSplit {
  std::int64_t head, packs;
};

template <typename T, typename... Others>
__device__ __forceinline__ RowSplit row_split(std::int64_t n, const T* row,
                                              const Others*... others) {
  const auto phase = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16; };
  const std::uintptr_t offset = phase(row);
  if (((phase(others) != offset) || ...) || offset % sizeof(T) != 0) return {n, 0};
  const std::int64_t to_boundary = offset == 0 ? 0 : (16 - offset) / sizeof(T);
  const std::int64_t head = to_boundary < n ? to_boundary : n;
  return {head, (n - head) / Pack<T>::kSize};
}

// Thread `lane` of `lanes` visits its part of a split row: scalar(k) for its head and tail
// elements, pack(k0) for its whole packs (elements k0 .. k0 + kSize - 1, k0 16-byte aligned).
// Consecutive lanes take consecutive packs, so a warp's loads are coalesced.
template <typename T, typename Scalar, typename PackF>
__device__ __forceinline__ void visit_row(std::int64_t n, RowSplit s, std::int64_t lane,
                                          std::int64_t lanes, Scalar scalar, PackF pack) {
  constexpr int V = Pack<T>::kSize;
  for (std::int64_t k = lane; k < s.head; k += lanes) scalar(k);
  for (std::int64_t i = lane; i < s.packs; i += lanes) pack(s.head + i * V);
  for (std::int64_t k = s.head + s.packs * V + lane; k < n; k += lanes) scalar(k);
}

// f(k, row[k]) (the value widened: kernel_math.cuh's acc_t) for thread `lane`'s elements of a
// contiguous row, the body read in packs.
template <typename T, typename F>
__device__ __forceinline__ void for_each_in_row(const T* row, std::int64_t n, std::int64_t lane,
                                                std::int64_t lanes, F f) {
  constexpr int V = Pack<T>::kSize;
  visit_row<T>(
      n, row_split(n, row), lane, lanes, [&](std::int64_t k) { f(k, load(row + k)); },
      [&](std::int64_t k0) {
        acc_t<T> v[V];
        load_widened<V>(row + k0, v);
#pragma unroll
        for (int j = 0; j < V; ++j) f(k0 + j, v[j]);
      });
}

// out[k] = f(k, in[k]) (widened, and the result rounded to T) for thread `lane`'s elements of a
// contiguous row (in == out allowed), in packs where the two rows share their alignment.
template <typename T, typename F>
__device__ __forceinline__ void map_row(const T* in, T* out, std::int64_t n, std::int64_t lane,
                                        std::int64_t lanes, F f) {
  constexpr int V = Pack<T>::kSize;
  visit_row<T>(
      n, row_split(n, in, out), lane, lanes,
      [&](std::int64_t k) { store(out + k, f(k, load(in + k))); },
      [&](std::int64_t k0) {
        acc_t<T> v[V];
        load_widened<V>(in + k0, v);
#pragma unroll
        for (int j = 0; j < V; ++j) v[j] = f(k0 + j, v[j]);
        store_narrowed<V>(out + k0, v);
      });
}

}  // namespace fsdp::cuda
