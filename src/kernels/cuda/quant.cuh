// The fake quantisers' rounding with a thread per element (fq_scale, fq_value), shared by
// fake_quant_lanes_k (quant.cu) and norm_rope_quant_k (norm.cu), so their bits agree.
#pragma once

#include "kernels/cuda/cuda_common.cuh"

namespace deepinfer::kernels::cuda {

// A block's scale from its amax (kind: FakeQuant's order: FP8 with a pow2 scale, FP4 with a pow2
// or an e4m3 scale) and the scale's stored code; a value rounded at scale s (its code: e4m3, or
// e2m1) and the value the code stands for. fake_quant_lanes_k and norm_rope_quant_k share them.
__device__ __forceinline__ float fq_scale(int kind, float amax, uint8_t* code) {
  if (kind == 0 || kind == 1) {
    const float s = kind == 0 ? d_pow2_ceil(fmaxf(amax, 1e-4f) * (1.0f / 448.0f)) : d_pow2_ceil(fmaxf(amax, 6.0f * 0x1p-126f) * (1.0f / 6.0f));
    *code = static_cast<uint8_t>(ilogbf(s) + 127);
    return s;
  }
  *code = d_f32_to_e4m3(fmaxf(amax, 6.0f * 0x1p-9f) / 6.0f);
  return d_e4m3_to_f32(*code);
}
__device__ __forceinline__ float fq_value(int kind, float v, float s, uint8_t* code) {
  if (kind == 0) {
    *code = d_f32_to_e4m3(fminf(fmaxf(v / s, -448.0f), 448.0f));
    return d_e4m3_to_f32(*code) * s;
  }
  *code = d_f32_to_e2m1(fminf(fmaxf(v / s, -6.0f), 6.0f));
  return d_e2m1_to_f32(*code) * s;
}

}  // namespace deepinfer::kernels::cuda
