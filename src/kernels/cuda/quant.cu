// CUDA: the fake quantisers (FakeQuant: FP8 with a pow2 scale, FP4 with a pow2 or an e4m3 scale):
// a thread per block, or a thread per element with the block on 16 or 32 lanes (the same bits);
// the weight quantiser to the release formats (quantize_weight): a warp per scale block.

#include <cstdio>
#include <cstdlib>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/quant.cuh"

namespace deepinfer::kernels::cuda {

namespace {

// One thread per block of `block` values (<= 32).
__global__ void fake_quant_k(float* x, int64_t blocks, int64_t block, int kind, uint8_t* codes, uint8_t* scales) {
  DI_PDL_ENTRY();
  const int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (b >= blocks) return;
  float* v = x + b * block;
  float amax = 0.0f;
  for (int64_t i = 0; i < block; ++i) amax = fmaxf(amax, fabsf(v[i]));
  if (kind == 0) {  // FP8, pow2 scale
    const float s = d_pow2_ceil(fmaxf(amax, 1e-4f) * (1.0f / 448.0f));
    if (scales) scales[b] = static_cast<uint8_t>(ilogbf(s) + 127);
    for (int64_t i = 0; i < block; ++i) {
      const uint8_t c = d_f32_to_e4m3(fminf(fmaxf(v[i] / s, -448.0f), 448.0f));
      v[i] = d_e4m3_to_f32(c) * s;
      if (codes) codes[b * block + i] = c;
    }
    return;
  }
  float s;
  if (kind == 1) {  // FP4, pow2 scale
    s = d_pow2_ceil(fmaxf(amax, 6.0f * 0x1p-126f) * (1.0f / 6.0f));
    if (scales) scales[b] = static_cast<uint8_t>(ilogbf(s) + 127);
  } else {  // FP4, e4m3 scale
    const uint8_t sc = d_f32_to_e4m3(fmaxf(amax, 6.0f * 0x1p-9f) / 6.0f);
    s = d_e4m3_to_f32(sc);
    if (scales) scales[b] = sc;
  }
  for (int64_t i = 0; i < block; ++i) {
    const uint8_t c = d_f32_to_e2m1(fminf(fmaxf(v[i] / s, -6.0f), 6.0f));
    v[i] = d_e2m1_to_f32(c) * s;
    if (codes) {
      uint8_t* byte = codes + (b * block + i) / 2;
      *byte = (i % 2 == 0) ? c : static_cast<uint8_t>(*byte | (c << 4));
    }
  }
}

// The same quantisers with a thread per element, a quantisation block on `block` consecutive
// lanes (16 or 32: whole blocks per warp); the block's absolute maximum by a shuffle tree (max
// is exact in any order; NaN ignored as the serial loop from 0 does), so the values, codes
// and scales are fake_quant_k's bit for bit.
__global__ void fake_quant_lanes_k(float* x, int64_t n, int block, int kind, uint8_t* codes, uint8_t* scales) {
  DI_PDL_ENTRY();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const bool in = i < n;
  const float v = in ? x[i] : 0.0f;
  float amax = fmaxf(0.0f, fabsf(v));
  for (int o = block / 2; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  uint8_t sc, c;
  const float s = fq_scale(kind, amax, &sc), q = fq_value(kind, v, s, &c);
  // FP4: the odd neighbour's code, packed with the even one's.
  const unsigned hi = kind == 0 ? 0u : __shfl_down_sync(0xffffffffu, static_cast<unsigned>(c), 1);
  if (!in) return;
  if (scales && i % block == 0) scales[i / block] = sc;
  x[i] = q;
  if (codes && kind == 0) codes[i] = c;
  if (codes && kind != 0 && i % 2 == 0) codes[i / 2] = static_cast<uint8_t>(c | (hi << 4));
}

// kernels::quantize_weight_rows's scale: the ue8m0 code of 2^ceil(log2(amax / max_code)) from
// the quotient's fields (IEEE division), clamped to [0, 254]; 0 without a nonzero value.
__device__ __forceinline__ uint8_t weight_scale_code(float amax, float max_code) {
  if (!(amax > 0.0f)) return 0;
  const uint32_t b = __float_as_uint(__fdiv_rn(amax, max_code));
  const int k = static_cast<int>((b >> 23) & 0xFF) - 127 + ((b & 0x7FFFFF) != 0 ? 1 : 0);
  return static_cast<uint8_t>(min(max(k + 127, 0), 254));
}
// std::clamp's order of comparisons: a NaN passes through.
__device__ __forceinline__ float clamp_nan(float v, float lo, float hi) { return v < lo ? lo : (hi < v ? hi : v); }

// One warp per scale block: lane j owns column c0 + j of the block's rows (32 rows for
// kFP8Block32, one row otherwise). amax by a shuffle tree (max is exact in any order; each lane
// starts from 0 and fmaxf drops NaN, as the CPU's std::max loop does); the codes from the
// quotient x / s (IEEE division), e2m1 pairs packed by the even lane with its odd neighbour's.
__global__ void quantize_weight_k(QuantizeWeightArgs a, int64_t blocks, int64_t sc_cols) {
  DI_PDL_ENTRY();
  const int64_t wb = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  if (wb >= blocks) return;  // whole warps
  const int lane = threadIdx.x & 31;
  const bool block32 = a.format == WeightFormat::kFP8Block32, fp4 = a.format == WeightFormat::kMXFP4;
  const int64_t br = wb / sc_cols, bc = wb % sc_cols, C = a.cols;
  const int64_t r0 = block32 ? br * 32 : br, r1 = block32 ? min(a.rows, r0 + 32) : br + 1;
  const int64_t c = bc * 32 + lane;
  const bool in = c < C;
  float amax = 0.0f;
  for (int64_t r = r0; r < r1; ++r)
    if (in) amax = fmaxf(amax, fabsf(a.x[r * C + c]));
  amax = warp_max(amax);
  const uint8_t code = weight_scale_code(amax, fp4 ? 6.0f : 448.0f);
  if (lane == 0) a.scales[(block32 ? a.row0 / 32 + br : a.row0 + br) * sc_cols + bc] = code;
  const float s = d_e8m0_to_f32(code);
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t g = a.row0 + r;
    const float x = in ? a.x[r * C + c] : 0.0f;
    const float q = isnan(x) ? x : __fdiv_rn(x, s);  // a NaN keeps its sign (the host's division does)
    if (!fp4) {
      if (in) a.codes[g * C + c] = d_f32_to_e4m3(clamp_nan(q, -448.0f, 448.0f));
      continue;
    }
    const unsigned e = in ? d_f32_to_e2m1(clamp_nan(q, -6.0f, 6.0f)) : 0u;
    const unsigned hi = __shfl_down_sync(0xffffffffu, e, 1);
    if (in && lane % 2 == 0) a.codes[g * ((C + 1) / 2) + c / 2] = static_cast<uint8_t>(e | (hi << 4));
  }
}

constexpr int kThreads = 256;
unsigned grid(int64_t n) { return static_cast<unsigned>(ceil_div(n, kThreads)); }

}  // namespace

void fake_quant(const FakeQuantArgs& a, Stream s) {
  if (a.block <= 0 || a.dim % a.block != 0 || a.rows == 0) return;
  const int64_t blocks = a.rows * (a.dim / a.block);
  if (a.block == 16 || a.block == 32)
    launch_k(fake_quant_lanes_k, grid(blocks * a.block), kThreads, 0, s, a.x, blocks * a.block, static_cast<int>(a.block),
                                                                   static_cast<int>(a.kind), a.codes, a.scales);
  else
    launch_k(fake_quant_k, grid(blocks), kThreads, 0, s, a.x, blocks, a.block, static_cast<int>(a.kind), a.codes, a.scales);
  DI_CUDA_LAUNCHED();
}

void quantize_weight(const QuantizeWeightArgs& a, Stream s) {
  const bool block32 = a.format == WeightFormat::kFP8Block32;
  if (!block32 && a.format != WeightFormat::kFP8Row32 && a.format != WeightFormat::kMXFP4) {
    std::fprintf(stderr, "deepinfer: quantize_weight stores kFP8Block32, kFP8Row32 or kMXFP4\n");
    std::abort();
  }
  if (block32 && a.row0 % 32 != 0) {
    std::fprintf(stderr, "deepinfer: quantize_weight: a kFP8Block32 chunk starts at a multiple of 32 rows (row0 %lld)\n",
                 static_cast<long long>(a.row0));
    std::abort();
  }
  if (a.rows <= 0 || a.cols <= 0) return;
  const int64_t sc_cols = ceil_div(a.cols, 32), blocks = (block32 ? ceil_div(a.rows, 32) : a.rows) * sc_cols;
  launch_k(quantize_weight_k, grid(blocks * 32), kThreads, 0, s, a, blocks, sc_cols);
  DI_CUDA_LAUNCHED();
}

}  // namespace deepinfer::kernels::cuda
