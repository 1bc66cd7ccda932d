// Exact decodes of the packed caches' codes (FP8 e4m3, ue8m0, FP4 e2m1), bitwise the CPU
// reference's (kernels::dequant_fake_quant, core::e4m3_to_f32 ...), for every kernel that reads
// packed rows: gather.cu's dequantisation and the attention's packed windows.
//
// Bitwise notes: decodes build the float from bits exactly as kernels::dequant_row /
// core::e4m3_to_f32 do (a NaN code keeps its sign: sign | 0x7FC00000); products go through
// x86_mul, which is __fmul_rn for numbers and gives the NaN an x86 multiply gives (the NaN
// operand, quieted; a NaN made by the multiply itself is 0xFFC00000) instead of the GPU's
// canonical 0x7FFFFFFF.
#pragma once

#include <cstdint>

#include "kernels/backend.h"

namespace deepinfer::kernels::cuda {

__device__ inline float x86_mul(float a, float b) {
  if (isnan(a)) return __uint_as_float(__float_as_uint(a) | 0x00400000u);
  if (isnan(b)) return __uint_as_float(__float_as_uint(b) | 0x00400000u);
  const float r = __fmul_rn(a, b);
  return isnan(r) ? __uint_as_float(0xFFC00000u) : r;
}

// e4m3 code -> float, as kernels::dequant_row's e4m3_bits and core::e4m3_to_f32.
__device__ inline float e4m3_exact(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24, e = (b >> 3) & 0xFu, m = b & 7u;
  if (e == 15 && m == 7) return __uint_as_float(sign | 0x7FC00000u);
  if (e == 0) return __uint_as_float(sign | __float_as_uint(__fmul_rn(static_cast<float>(m), 0x1p-9f)));
  return __uint_as_float(sign | ((e + 120u) << 23) | (m << 20));
}

// ue8m0 code -> 2^(v-127) (NaN for 255), as core::e8m0_to_f32.
__device__ inline float e8m0_exact(uint8_t v) {
  if (v == 255) return __uint_as_float(0x7FC00000u);
  if (v == 0) return __uint_as_float(0x00400000u);  // 2^-127, subnormal
  return __uint_as_float(static_cast<uint32_t>(v) << 23);
}

// e2m1 code (sign in bit 3; code 8 is +0) -> float, as core::e2m1_to_f32.
__device__ inline float e2m1_exact(uint32_t code) {
  const uint32_t c = code & 7u, sign = (code & 8u) << 28;
  if (c >= 2) return __uint_as_float(sign | (((c >> 1) + 126u) << 23) | ((c & 1u) << 22));
  if (c == 0) return 0.0f;
  return __uint_as_float(sign | 0x3F000000u);  // ±0.5
}

// Value e of packed rows, as dequant_fake_quant.
__device__ inline void dequant_packed_at(int kind, const uint8_t* codes, const uint8_t* scales, float* out, int64_t e,
                                         int64_t block) {
  const int64_t b = e / block, i = e % block;
  const float s = kind == static_cast<int>(FakeQuant::kFp4E4m3) ? e4m3_exact(scales[b]) : e8m0_exact(scales[b]);
  float v;
  if (kind == static_cast<int>(FakeQuant::kFp8Pow2)) {
    v = e4m3_exact(codes[e]);
  } else {
    const uint8_t byte = codes[b * block / 2 + i / 2];
    v = e2m1_exact(i % 2 == 0 ? (byte & 0xFu) : static_cast<uint32_t>(byte >> 4));
  }
  out[e] = x86_mul(v, s);
}

// Values 8 e8 .. 8 e8 + 7 of FP8 rows with a power-of-two scale per `block` channels (block a
// multiple of 8, codes 8-byte aligned), each dequant_packed_at's.
__device__ inline void fp8_pow2_at8(const uint8_t* codes, const uint8_t* scales, int64_t e8, int64_t block, float v[8]) {
  const int64_t e = e8 * 8;
  const float s = e8m0_exact(scales[e / block]);
  const uint2 c = *reinterpret_cast<const uint2*>(codes + e);
#pragma unroll
  for (int j = 0; j < 8; ++j) v[j] = x86_mul(e4m3_exact(static_cast<uint8_t>(((j < 4 ? c.x : c.y) >> (8 * (j % 4))) & 0xFFu)), s);
}

}  // namespace deepinfer::kernels::cuda
