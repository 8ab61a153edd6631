// core/cuda's launch arithmetic, checked on the CPU: grid sizes, broadcast strides (and the
// message when shapes do not broadcast), and how column reductions cut their rows.
#include <boost/test/unit_test.hpp>
#include <string>
#include <vector>

#include "core/cuda/launch.h"
#include "core/cuda/reduce_geometry.h"
#include "core/error.h"

using namespace fsdp;
using namespace fsdp::cuda;

BOOST_AUTO_TEST_SUITE(launch_geometry)

BOOST_AUTO_TEST_CASE(grid_covers_small_sizes_and_caps_large_ones) {
  BOOST_TEST(grid_for(0) == 0u);
  BOOST_TEST(grid_for(1) == 1u);
  BOOST_TEST(grid_for(256) == 1u);
  BOOST_TEST(grid_for(257) == 2u);
  BOOST_TEST(grid_for(kMaxBlocks * kThreads) == unsigned(kMaxBlocks));
  BOOST_TEST(grid_for(std::int64_t(1) << 40) == unsigned(kMaxBlocks));  // the loop strides
}

BOOST_AUTO_TEST_CASE(broadcast_strides_are_zero_on_broadcast_dims) {
  BroadcastGeometry g = broadcast_geometry({4, 768}, {768}, "add");
  BOOST_TEST(g.ndim == 2);
  BOOST_TEST(g.numel == 4 * 768);
  BOOST_TEST(g.size[0] == 4);
  BOOST_TEST(g.a_stride[0] == 768);
  BOOST_TEST(g.a_stride[1] == 1);
  BOOST_TEST(g.b_stride[0] == 0);
  BOOST_TEST(g.b_stride[1] == 1);

  g = broadcast_geometry({2, 1, 5}, {3, 1}, "mul");
  BOOST_TEST(g.ndim == 3);
  BOOST_TEST(g.numel == 30);
  BOOST_TEST((g.size[0] == 2 && g.size[1] == 3 && g.size[2] == 5));
  BOOST_TEST((g.a_stride[0] == 5 && g.a_stride[1] == 0 && g.a_stride[2] == 1));
  BOOST_TEST((g.b_stride[0] == 0 && g.b_stride[1] == 1 && g.b_stride[2] == 0));

  g = broadcast_geometry({0, 3}, {1, 3}, "add");  // size 0 against 1 gives 0, as in torch
  BOOST_TEST(g.numel == 0);
}

BOOST_AUTO_TEST_CASE(shapes_that_do_not_broadcast_are_named) {
  BOOST_CHECK_EXCEPTION(broadcast_geometry({2, 3}, {4}, "add"), ValueError,
                        [](const ValueError& e) {
                          return std::string(e.what()) ==
                                 "add: shapes [2, 3] and [4] do not broadcast (dim 1: 3 vs 4)";
                        });
  BOOST_CHECK_EXCEPTION(broadcast_geometry({1, 1, 1, 1, 1, 1, 1}, {1}, "mul"), ValueError,
                        [](const ValueError& e) {
                          return std::string(e.what()) ==
                                 "mul: shapes [1, 1, 1, 1, 1, 1, 1] and [1] have more than 6 "
                                 "dims";
                        });
}

BOOST_AUTO_TEST_CASE(column_reduction_chunks_cover_every_row_once) {
  for (std::int64_t rows : {std::int64_t(1), std::int64_t(7), std::int64_t(16384),
                            std::int64_t(100003), std::int64_t(1) << 33}) {
    for (std::int64_t cols : {1, 3, 768, 50304})
      for (int per_thread : {1, 4, 8}) {  // one column a thread, or a float or 16-bit pack's
        ColumnReduceGrid g = column_reduce_grid(rows, cols, per_thread);
        const std::int64_t strip = std::int64_t(kColumnWidth) * per_thread;
        BOOST_TEST(g.column_blocks * strip >= cols);
        BOOST_TEST((g.column_blocks - 1) * strip < cols);
        BOOST_TEST(g.rows_per_chunk % kColumnRows == 0);
        BOOST_TEST(g.rows_per_chunk >= 64);
        BOOST_TEST(g.row_chunks <= 65535u);  // grid.y's limit
        BOOST_TEST(g.row_chunks * g.rows_per_chunk >= rows);
        BOOST_TEST((g.row_chunks - 1) * g.rows_per_chunk < rows);  // no empty chunk
      }
  }
  // 768 columns are 24 strips: 16384 rows are cut into enough chunks to fill ~1000 blocks.
  ColumnReduceGrid g = column_reduce_grid(16384, 768);
  BOOST_TEST(g.column_blocks == 24u);
  BOOST_TEST(g.rows_per_chunk == 392);
  BOOST_TEST(g.row_chunks == 42u);
  // bf16 packs of 8 columns: 3 strips of 256 columns, chunks of the 64-row minimum.
  g = column_reduce_grid(16384, 768, 8);
  BOOST_TEST(g.column_blocks == 3u);
  BOOST_TEST(g.rows_per_chunk == 64);
  BOOST_TEST(g.row_chunks == 256u);
}

BOOST_AUTO_TEST_CASE(column_strips_take_packs_only_when_asked) {
  std::vector<int> taken;
  for (bool in_packs : {true, false})
    launch_column_strips<8>(in_packs, 16384, 768, [&]<int V>(const ColumnReduceGrid& g) {
      taken.push_back(V);
      BOOST_TEST(g.column_blocks == (V == 8 ? 3u : 24u));
    });
  BOOST_TEST(taken == (std::vector<int>{8, 1}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_SUITE_END()
