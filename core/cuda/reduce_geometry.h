// How column reductions (sum over rows: bias and layer-norm weight gradients) split their work:
// strips of 32 threads (a column each, or a 16-byte pack's columns each), each strip's rows cut
// into chunks so that the grid has enough blocks to fill the device (768 columns are only 24
// strips of 32). Host-only, checked by a CPU test.
#pragma once

#include <algorithm>
#include <cstdint>

namespace fsdp::cuda {

constexpr int kColumnWidth = 32, kColumnRows = 8;
struct ColumnReduceGrid {
  unsigned column_blocks = 0, row_chunks = 0;
  std::int64_t rows_per_chunk = 0;  // a multiple of kColumnRows; chunks cover every row once
};
// columns_per_thread: 1, or a 16-byte pack's (vec_access.cuh) when the kernel reads packs.
constexpr ColumnReduceGrid column_reduce_grid(std::int64_t rows, std::int64_t cols,
                                              int columns_per_thread = 1) {
  ColumnReduceGrid g;
  const std::int64_t strip = std::int64_t(kColumnWidth) * columns_per_thread;
  g.column_blocks = static_cast<unsigned>((cols + strip - 1) / strip);
  // About 1024 blocks in all, each with at least 64 rows; grid.y stays under 65535.
  const std::int64_t want_chunks =
      std::clamp<std::int64_t>(1024 / std::max<std::int64_t>(g.column_blocks, 1), 1, 65535);
  std::int64_t per = std::max<std::int64_t>((rows + want_chunks - 1) / want_chunks, 64);
  per = (per + kColumnRows - 1) / kColumnRows * kColumnRows;
  g.rows_per_chunk = per;
  g.row_chunks = static_cast<unsigned>(std::max<std::int64_t>((rows + per - 1) / per, 1));
  return g;
}

// The column reduction's launch: launch.template operator()<V>(grid) with V = kPack columns a
// thread when the rows can be read in packs (`in_packs`), 1 otherwise.
template <int kPack, typename F>
void launch_column_strips(bool in_packs, std::int64_t rows, std::int64_t cols, F&& launch) {
  if (in_packs)
    launch.template operator()<kPack>(column_reduce_grid(rows, cols, kPack));
  else
    launch.template operator()<1>(column_reduce_grid(rows, cols));
}

}  // namespace fsdp::cuda
