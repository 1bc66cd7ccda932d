// The float4 RMSNorm of a row held in registers (rms_inv, rms_scaled, rms_norm_held), shared by
// rms_norm_v4_k and norm_rope_quant_k (norm.cu) and hc_collapse_norm_k / hc_project_k (mhc.cu),
// so their norms have the same bits.
#pragma once

#include "kernels/cuda/cuda_common.cuh"

namespace deepinfer::kernels::cuda {

// Rows of up to kNormCache float4 per thread (dim <= 8192 at 256 threads), 16-byte aligned:
// every load of the row in flight at once, kept in registers for the scaling pass. Its sums
// differ in order from rms_norm_k's; which one runs depends on dim and on the buffers'
// alignment (the allocator's blocks are 256-byte aligned and the model's row offsets are
// multiples of dim), never on the number of rows.
constexpr int kNormCache = 8, kNormThreads = 256;
// The norm of a row held this way (v: its chunks, zero past its end; g: the weights', used when
// has_w) into yr: the sum of squares, the block reduction and the scaling that every float4
// RMSNorm shares (rms_norm_v4_k, hc_collapse_norm_k), so their bits agree.
// (rms_inv: the reciprocal RMS, the whole block; rms_scaled: one chunk normalised.)
__device__ __forceinline__ float rms_inv(const float4 (&v)[kNormCache], int64_t dim, float eps) {
  float ss = 0.0f;
#pragma unroll
  for (int j = 0; j < kNormCache; ++j) ss += v[j].x * v[j].x + v[j].y * v[j].y + v[j].z * v[j].z + v[j].w * v[j].w;
  ss = block_sum(ss);
  return 1.0f / sqrtf(ss / static_cast<float>(dim) + eps);
}
__device__ __forceinline__ float4 rms_scaled(float4 v, float4 g, bool has_w, float inv) {
  float4 o = make_float4(v.x * inv, v.y * inv, v.z * inv, v.w * inv);
  if (has_w) o = make_float4(g.x * o.x, g.y * o.y, g.z * o.z, g.w * o.w);
  return o;
}
__device__ __forceinline__ void rms_norm_held(const float4 (&v)[kNormCache], const float4 (&g)[kNormCache], bool has_w, int64_t dim,
                                              float eps, float4* yr) {
  const int64_t n4 = dim / 4;
  const float inv = rms_inv(v, dim, eps);
#pragma unroll
  for (int j = 0; j < kNormCache; ++j) {
    const int64_t i = threadIdx.x + j * kNormThreads;
    if (i >= n4) break;
    yr[i] = rms_scaled(v[j], g[j], has_w, inv);
  }
}

}  // namespace deepinfer::kernels::cuda
