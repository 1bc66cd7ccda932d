// The bf16 GEMM's launches (linear_bf16.cu has the design): the tiling by the product's shape
// and the launch of gemm_bf16_k (linear_bf16.cuh), one instantiation per stored weight format
// (bf16: linear_bf16.cu, FP8: linear_fp8.cu, MXFP4: linear_mxfp4.cu).
#pragma once

#include <algorithm>
#include <cstdlib>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/gemm_split.h"
#include "kernels/cuda/linear_bf16.cuh"

namespace deepinfer::kernels::cuda::detail {

// The parts' k segments, first units (column tiles of BN x segments), tile counters (row tiles
// of BM) and partial-sum offsets; returns the workspace's floats, -1 past the tile counters.
// Only dense parts split, always in the decode tiling (BM 16, BN 64).
int64_t lay_out_parts(Bf16Gemm& p, int64_t BM = 16, int64_t BN = 64);

// Split products of at most kSplitRowsMax rows per tile take the split launch (measured
// faster at 256 rows than folding: the partial sums stay mostly in L2), larger ones fold in
// registers.
constexpr int64_t kSplitRowsMax = 512;
inline int64_t rows_per_tile(const Bf16Gemm& p) {
  return p.offsets ? ceil_div(p.m, std::max<int64_t>(p.experts, 1)) : p.m;
}

// Whether a product split into S segments adds them up inside clusters of S blocks (the split
// decode tiling; sm_90): S from 2 to 16 (above 8 by the kernel's non-portable opt-in), unless
// the backend's Settings.clusters is off. Otherwise through the workspace and tile counters (same bits).
template <class... KArgs>
bool gemm_clusters(void (*kern)(KArgs...), int S, Stream s) {
  if (!s.settings->clusters || S < 2 || S > 16) return false;
  if (S > 8) func_attr_at_least(reinterpret_cast<const void*>(kern), cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  return true;
}

template <int BM, int BN, int BK, int WARPS_M, int WARPS_N, int STAGES, bool XF = false, bool WG = false, int WQ = 0>
void launch_gemm(Bf16Gemm p, Stream s) {
  // Grouped: at most ceil(rows / BM) + min(experts, rows) tiles (every expert with rows may end
  // on a partial tile, and at most `rows` experts have any): at one token 7 row tiles, not 65,
  // so the launch is not mostly blocks that find no tile.
  const int64_t tiles = ceil_div(p.m, BM) + (p.offsets ? std::min<int64_t>(p.experts, p.m) : 0);
  // (WG: unpadded rows in the swizzle, and room to align the tiles to 1024 bytes.)
  constexpr int smem = GemmSmem<BM, BN, BK, STAGES, WG, WQ>::bytes;
  if (p.parts > 0) {  // grid x covers every part's units; no folding
    lay_out_parts(p, BM, BN);
    const Bf16Part& last = p.part_list[p.parts - 1];
    const int64_t units = last.unit0 + ceil_div(last.n, BN) * ceil_div(p.k, last.ks);
    auto kernel = gemm_bf16_k<BM, BN, BK, WARPS_M, WARPS_N, STAGES, false, XF, WG, WQ>;
    opt_in_smem(kernel, smem);
    const dim3 grid(static_cast<unsigned>(units), static_cast<unsigned>(tiles), 1);
    // Clusters along x when every part has the same segments and there is one row tile (grid
    // x then runs tile by tile, each tile's segments in order: a part's first unit is a
    // multiple of the segments, and the raster order is the identity).
    int S = static_cast<int>(ceil_div(p.k, p.part_list[0].ks));
    for (int i = 1; i < p.parts; ++i) S = ceil_div(p.k, p.part_list[i].ks) == S ? S : 0;
    p.cluster = BM == 16 && tiles == 1 && gemm_clusters(kernel, S, s) ? S : 0;
    const dim3 cluster(static_cast<unsigned>(S), 1, 1);
    launch_k_with(kernel, grid, WARPS_M * WARPS_N * 32, smem, s, p.cluster ? &cluster : nullptr, p, static_cast<int>(p.k));
    DI_CUDA_LAUNCHED();
    return;
  }
  const int ks = gemm_bf16_split(p), S = static_cast<int>(ceil_div(p.k, ks));
  const int64_t cols = ceil_div(p.n, BN);
  // No workspace (folding in registers instead) for one segment, too many tiles, or tiles wider
  // than 64 x 128 (the kernel adds partial sums only for narrower ones).
  if (S == 1 || tiles * cols * p.groups > kGemmCounters || !p.counters || BM * BN > 64 * 128) p.part = nullptr;
  auto kernel = gemm_bf16_k<BM, BN, BK, WARPS_M, WARPS_N, STAGES, false, XF, WG, WQ>;
  if constexpr (WG && (BN > 128 || WQ != 0)) {
    if (S > 1 && !p.part) {  // the dispatch sends products whose k segments fold to other tilings
      std::fprintf(stderr, "deepinfer: gemm_bf16: k segments folding on a warpgroup tiling without folding\n");
      std::abort();
    }
  } else if (S > 1 && !p.part) {
    kernel = gemm_bf16_k<BM, BN, BK, WARPS_M, WARPS_N, STAGES, true, XF, WG, WQ>;
  }
  opt_in_smem(kernel, smem);
  const dim3 grid(static_cast<unsigned>(cols), static_cast<unsigned>(tiles), static_cast<unsigned>(p.groups * (p.part ? S : 1)));
  // A split in the decode tiling: a tile's segments are consecutive in grid z, one cluster.
  p.cluster = BM == 16 && p.part && gemm_clusters(kernel, S, s) ? S : 0;
  const dim3 cluster(1, 1, static_cast<unsigned>(S));
  launch_k_with(kernel, grid, WARPS_M * WARPS_N * 32, smem, s, p.cluster ? &cluster : nullptr, p, ks);
  DI_CUDA_LAUNCHED();
}

// The tiling of a checked product (gemm_bf16) whose weights are stored as WQ (see gemm_bf16_k).
template <int WQ>
void gemm_bf16_as(Bf16Gemm p, Stream s) {
  // By the rows per tile (the rows per expert, or the product's rows): up to 16 (decode), 16-row
  // tiles over 64 columns and wide k slices, to keep enough weight bytes in flight; up to 128,
  // 64 x 128 tiles; more, warpgroup products on 128 x 256 tiles, 128 x 128 where k segments fold
  // (the second set of accumulators). Products split through
  // the workspace take 64 x 128 (below). Every configuration gives the same bits (see the top).
  const int64_t per_tile = rows_per_tile(p);
  // Split over k into blocks of their own (a workspace, up to kSplitRowsMax rows): 64 x 128
  // tiles, whose last blocks add the partial sums with every load in flight (measured at 256
  // rows: 128 x 128 tiles took 50-90 us for products of a few MB, the sums' loads one by one).
  // Otherwise the segments fold in registers: a workspace given to a product of more rows goes
  // unused (it may be smaller than the split would need).
  const bool split = gemm_bf16_split(p) < p.k && p.part && per_tile <= kSplitRowsMax;
  if (!split && p.parts == 0) p.part = nullptr;
  [[maybe_unused]] const bool fold = gemm_bf16_split(p) < p.k && !p.part;
  if constexpr (WQ != 0) {
    // Stored-format weights (k a multiple of 128: gemm_bf16_reads): slices of 128 on every
    // tiling, the decode ones as bf16's, 64 x 128 tiles up to 128 rows. No L2 hint
    // on these copies (with it, beside the 4-byte scale copies, the H200 raised an illegal
    // instruction).
    if (per_tile <= 16) {
      // 3 stages dense, 4 for the experts: 4 blocks per SM (by registers). Measured at one token:
      // the layer's FP8 dense products 110 us at 3 or 4 stages; the MXFP4 experts' gate + up
      // 64 us at 4 stages, 74-77 us at 6-10 (2 blocks per SM by shared memory).
      if (!p.offsets)
        return p.x_f32 ? launch_gemm<16, 64, 128, 1, 4, 3, true, false, WQ>(p, s) : launch_gemm<16, 64, 128, 1, 4, 3, false, false, WQ>(p, s);
      return launch_gemm<16, 64, 128, 1, 4, 4, false, false, WQ>(p, s);
    }
    if (per_tile <= 128 || split) return launch_gemm<64, 128, 128, 2, 4, 3, false, false, WQ>(p, s);
    // Warpgroup products on 128 x 128 tiles, each slice decoded once into bf16 shared memory;
    // products whose k segments fold (dense ones above kSplitRowsMax rows without a workspace:
    // the backend sends dense ones above 256 rows through bf16 temporaries) on mma.sync tiles.
    if (fold) return launch_gemm<128, 128, 128, 2, 4, 3, false, false, WQ>(p, s);
    return launch_gemm<128, 128, 128, 8, 1, 3, false, true, WQ>(p, s);
  } else if (per_tile <= 16) {
    // Launches of at most 16 rows read each weight once: an L2 evict_first policy keeps them
    // from displacing what is reused (activations, partial sums, the KV rows, the next products'
    // inputs). Measured 6.13 -> 5.98 ms a batch-1 step; the experts' products at
    // batch 64 (448 rows over 64 experts) were 0.6 ms a step slower with it.
    p.stream_w = p.m <= 16;
    if (p.k % 128 != 0) return launch_gemm<16, 64, 32, 1, 4, 8>(p, s);
    // Dense: 2 stages (44 KB of shared memory; four blocks per SM, by registers) measured 1%
    // faster over a batch-1 step than 3, which had been 11% faster than 4 (two per SM).
    if (!p.offsets) return p.x_f32 ? launch_gemm<16, 64, 128, 1, 4, 2, true>(p, s) : launch_gemm<16, 64, 128, 1, 4, 2>(p, s);
    // Grouped, by k: long ones (the experts' up projection, k = hidden = 5120) keep 4 stages
    // (3 were 8% slower); short ones (their down projection, k = the expert width = 2304) take 3,
    // three blocks per SM instead of two: at one token its 640 blocks are 1.6 waves instead of
    // 2.4 (batch 1 -0.06 ms, batch 64 -0.6 ms).
    if (p.k < 4096) return launch_gemm<16, 64, 128, 1, 4, 3>(p, s);
    return launch_gemm<16, 64, 128, 1, 4, 4>(p, s);
  } else if (p.k % 64 != 0) {
    launch_gemm<128, 128, 32, 2, 4, 4>(p, s);
  } else if (per_tile <= 128 || split) {
    launch_gemm<64, 128, 64, 2, 4, 4>(p, s);
  } else {
    // Warpgroup products, 4 stages, one block per SM: 128 x 256 (193 KB of shared memory), or
    // 128 x 128 (129 KB) where the k segments fold.
    if (fold) launch_gemm<128, 128, 64, 8, 1, 4, false, true>(p, s);
    else launch_gemm<128, 256, 64, 8, 1, 4, false, true>(p, s);
  }
}

}  // namespace deepinfer::kernels::cuda::detail
