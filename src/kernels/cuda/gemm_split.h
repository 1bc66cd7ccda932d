// The k segments of the CUDA bf16 product (linear_bf16.cu), host-only so tests can name them: a
// function of the product's shape alone, never of its rows, so a row's sum order does not
// depend on the batch (y = ((0 + p_0) + p_1) + ..., p_s the product over the s-th segment).
#pragma once

#include <algorithm>
#include <cstdint>

namespace deepinfer::kernels::cuda {

// A product of fewer than kSplitBelow 64-column tiles (the decode configuration's) is split
// into segments for about kSplitBlocks blocks (2 per SM of an H200; 8 per SM measured no
// faster: blocks of few k slices spend their time filling the pipeline), each at least
// kSplitMinK long and a multiple of kSplitAlign (every tile configuration's k slice
// divides them). Wider products already fill the GPU. Grouped-by-expert products are not
// split (their blocks come from the experts).
constexpr int64_t kSplitBelow = 264, kSplitBlocks = 264, kSplitMinK = 512, kSplitAlign = 128;

// The segment length: k when the product is not split.
inline int64_t gemm_split_len(int64_t n, int64_t k, int64_t groups, bool grouped_by_expert) {
  if (grouped_by_expert || k % kSplitAlign != 0 || n <= 0) return k;
  const int64_t blocks = (n + 63) / 64 * std::max<int64_t>(groups, 1);
  if (blocks >= kSplitBelow) return k;
  const int64_t S = std::min<int64_t>((kSplitBlocks + blocks - 1) / blocks, k / kSplitMinK);
  if (S <= 1) return k;
  return ((k + S - 1) / S + kSplitAlign - 1) / kSplitAlign * kSplitAlign;
}
inline int64_t gemm_split_segments(int64_t n, int64_t k, int64_t groups, bool grouped_by_expert) {
  const int64_t len = gemm_split_len(n, k, groups, grouped_by_expert);
  return len > 0 ? (k + len - 1) / len : 1;
}

#if defined(__CUDACC__)
#define DI_HOST_DEVICE __host__ __device__
#else
#define DI_HOST_DEVICE
#endif
// Raster order of a product's blocks: block (x, y) of an nx x ny launch (x fastest, the order
// blocks start in) computes column tile *col and row tile *row, taken in groups of
// kRasterRows row tiles with the row tile fastest inside a group. The blocks that read one
// weight tile then run at about the same time (DRAM once, L2 for the others) while the group's
// activation rows stay in L2; in x-fastest order every row tile swept all the weights again.
// A bijection of the grid (tested), so it moves work between blocks, never a bit of a result.
constexpr int64_t kRasterRows = 8;
DI_HOST_DEVICE inline void raster_tile(int64_t x, int64_t y, int64_t nx, int64_t ny, int* col, int* row) {
  const int64_t bid = y * nx + x, per_group = kRasterRows * nx, group = bid / per_group, first = group * kRasterRows;
  const int64_t rows = ny - first < kRasterRows ? ny - first : kRasterRows, in = bid - group * per_group;
  *row = static_cast<int>(first + in % rows);
  *col = static_cast<int>(in / rows);
}
#undef DI_HOST_DEVICE

}  // namespace deepinfer::kernels::cuda
