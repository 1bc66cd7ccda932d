// The expert row tiles of a grouped product (find_tile), shared by the bf16 GEMM (linear_bf16.cuh)
// and the any-format product (linear.cu).
#pragma once

#include "kernels/cuda/cuda_common.cuh"

namespace deepinfer::kernels::cuda::detail {

// Which expert and row tile block row `t` computes: the experts' tiles of BM rows, numbered in
// expert order. Warp 0 scans the offsets 32 experts at a time. Returns false past the last tile.
template <int BM>
__device__ bool find_tile(const int32_t* off, int E, int t, int* s_e, int* s_row0, int* s_rows) {
  __shared__ int found;
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    int seen = 0;  // tiles of the experts before this group of 32
    if (lane == 0) found = 0;
    __syncwarp();
    for (int e0 = 0; e0 < E; e0 += 32) {
      const int e = e0 + lane;
      const int lo = e < E ? off[e] : 0, cnt = e < E ? off[e + 1] - lo : 0;
      const int tiles = (cnt + BM - 1) / BM;
      int incl = tiles;
      for (int d = 1; d < 32; d <<= 1) {
        const int v = __shfl_up_sync(0xffffffffu, incl, d);
        if (lane >= d) incl += v;
      }
      const int excl = seen + incl - tiles;
      const bool mine = tiles > 0 && t >= excl && t < excl + tiles;
      if (mine) {
        *s_e = e;
        *s_row0 = lo + (t - excl) * BM;
        *s_rows = min(BM, lo + cnt - *s_row0);
        found = 1;
      }
      if (__any_sync(0xffffffffu, mine)) break;
      seen += __shfl_sync(0xffffffffu, incl, 31);
    }
  }
  __syncthreads();
  return found != 0;
}

// y[r, n0 + c] for the rows of one row tile (of an expert, or of the dense product) and BN
// columns; grid z is the group of a grouped (strided-batch) product, times the k segments when
// they are split across blocks (z = group * segments + segment). Warps WARPS_M x WARPS_N,
// each a (BM/WARPS_M) x (BN/WARPS_N) tile of 16 x 8 mma tiles; STAGES-deep cp.async pipeline
// of BK-wide k slices (BK changes nothing in the sums: k16 steps ascend either way; segments

}  // namespace deepinfer::kernels::cuda::detail
