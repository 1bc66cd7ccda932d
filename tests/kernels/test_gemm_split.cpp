// The k segments of the CUDA bf16 product (src/kernels/cuda/gemm_split.h, host-only): the
// kernel relies on every segment being whole k slices of any tile configuration (multiples of
// 128), at least 512 long, covering k exactly once; the released model's products split as the
// README says; grouped and wide products are not split.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "kernels/cuda/gemm_split.h"

using namespace deepinfer::kernels::cuda;

TEST(GemmSplit, SegmentsAreWholeSlicesCoveringK) {
  int split = 0;
  for (int64_t n : {2, 64, 320, 512, 1280, 2304, 5120, 16384, 32768, 129280})
    for (int64_t k = 32; k <= 16384; k += 32)
      for (int64_t groups : {1, 2, 8}) {
        const int64_t len = gemm_split_len(n, k, groups, false), S = gemm_split_segments(n, k, groups, false);
        ASSERT_GT(len, 0);
        ASSERT_GE(S * len, k) << n << " " << k;
        ASSERT_LT((S - 1) * len, k) << n << " " << k;
        if (S == 1) {
          EXPECT_EQ(len, k);
          continue;
        }
        ++split;
        EXPECT_EQ(len % kSplitAlign, 0) << n << " " << k;
        EXPECT_EQ(k % kSplitAlign, 0) << n << " " << k;
        EXPECT_GE(len, kSplitMinK) << n << " " << k;
        EXPECT_LT((n + 63) / 64 * groups, kSplitBelow) << "a wide product split: " << n << " x " << groups;
        // Grouped-by-expert products never split.
        EXPECT_EQ(gemm_split_len(n, k, groups, true), k);
      }
  EXPECT_GT(split, 1000);
}

TEST(GemmSplit, ReleasedShapes) {
  struct Case {
    int64_t n, k, groups, segments;
  };
  const Case cases[] = {
      {1280, 5120, 1, 10},   // wq_a
      {512, 5120, 1, 10},    // wkv
      {64, 5120, 1, 10},     // the router's gate
      {1024, 4096, 8, 3},    // wo_a, 8 groups
      {5120, 8192, 1, 4},    // wo_b
      {2304, 5120, 1, 8},    // the shared expert's gate and up
      {5120, 2304, 1, 4},    // its down projection
      {4096, 1280, 1, 2},    // the indexer's query projection
      {32768, 1280, 1, 1},   // wq_b: wide
      {129280, 5120, 1, 1},  // the head: wide
  };
  for (const Case& c : cases) EXPECT_EQ(gemm_split_segments(c.n, c.k, c.groups, false), c.segments) << c.n << " x " << c.k;
  EXPECT_EQ(gemm_split_segments(2304, 5120, 1, true), 1);  // experts
}

// The raster order visits every tile of the grid exactly once, row tiles in groups of
// kRasterRows with the row fastest inside a group.
TEST(GemmSplit, RasterOrderIsABijectionOfTheGrid) {
  for (int64_t nx : {1, 3, 64, 257})
    for (int64_t ny : {1, 2, 7, 8, 9, 33}) {
      std::vector<int> seen(static_cast<size_t>(nx * ny), 0);
      for (int64_t y = 0; y < ny; ++y)
        for (int64_t x = 0; x < nx; ++x) {
          int col = -1, row = -1;
          raster_tile(x, y, nx, ny, &col, &row);
          ASSERT_TRUE(col >= 0 && col < nx && row >= 0 && row < ny) << nx << " x " << ny << ": " << x << ", " << y;
          ++seen[static_cast<size_t>(row * nx + col)];
        }
      for (int v : seen) EXPECT_EQ(v, 1) << nx << " x " << ny;
    }
  int col = -1, row = -1;
  raster_tile(1, 0, 64, 32, &col, &row);  // the second block: the next row tile, same columns
  EXPECT_EQ(col, 0);
  EXPECT_EQ(row, 1);
  raster_tile(8, 0, 64, 32, &col, &row);  // after the group's 8 row tiles, the next column
  EXPECT_EQ(col, 1);
  EXPECT_EQ(row, 0);
}
