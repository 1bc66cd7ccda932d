// CUDA: the fake quantisers (FakeQuant: FP8 with a pow2 scale, FP4 with a pow2 or an e4m3 scale):
// a thread per block, or a thread per element with the block on 16 or 32 lanes (the same bits).

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

}  // namespace deepinfer::kernels::cuda
