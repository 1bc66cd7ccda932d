// The reference's always-on fake quantisers (QAT semantics), per block of the last dim.
#include <algorithm>
#include <cmath>

#include "core/dtype.h"
#include "kernels/cpu/cpu_ops.h"

namespace deepinfer::kernels::cpu {

namespace {
float block_amax(const float* x, int64_t n) {
  float m = 0.0f;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}
}  // namespace

namespace {
uint8_t e8m0_code(float pow2) { return static_cast<uint8_t>(std::ilogb(pow2) + 127); }

void fp4_block(float* x, int64_t n, float s, uint8_t* codes) {
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t c = core::f32_to_e2m1(std::clamp(x[i] / s, -6.0f, 6.0f));
    x[i] = core::e2m1_to_f32(c) * s;
    if (codes) {
      uint8_t& b = codes[i / 2];
      b = (i % 2 == 0) ? c : static_cast<uint8_t>(b | (c << 4));
    }
  }
}
}  // namespace

void fake_quant_fp8_pow2(float* x, int64_t n, uint8_t* codes, uint8_t* scale) {
  const float amax = std::max(block_amax(x, n), 1e-4f);
  const float s = core::pow2_ceil(amax * (1.0f / 448.0f));
  if (scale) *scale = e8m0_code(s);
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t c = core::f32_to_e4m3(std::clamp(x[i] / s, -448.0f, 448.0f));
    x[i] = core::e4m3_to_f32(c) * s;
    if (codes) codes[i] = c;
  }
}

void fake_quant_fp4_pow2(float* x, int64_t n, uint8_t* codes, uint8_t* scale) {
  const float amax = std::max(block_amax(x, n), 6.0f * 0x1p-126f);
  const float s = core::pow2_ceil(amax * (1.0f / 6.0f));
  if (scale) *scale = e8m0_code(s);
  fp4_block(x, n, s, codes);
}

void fake_quant_fp4_e4m3(float* x, int64_t n, uint8_t* codes, uint8_t* scale) {
  const float amax = std::max(block_amax(x, n), 6.0f * 0x1p-9f);
  const uint8_t sc = core::f32_to_e4m3(amax / 6.0f);
  const float s = core::e4m3_to_f32(sc);
  if (scale) *scale = sc;
  fp4_block(x, n, s, codes);
}

void fake_quant(core::ThreadPool& pool, const FakeQuantArgs& a) {
  // Shapes the reference cannot block run unquantised, exactly as it does.
  if (a.block <= 0 || a.dim % a.block != 0) return;
  const int64_t blocks = a.rows * (a.dim / a.block);
  pool.parallel_for(blocks, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      float* x = a.x + b * a.block;
      uint8_t* sc = a.scales ? a.scales + b : nullptr;
      switch (a.kind) {
        case FakeQuant::kFp8Pow2: fake_quant_fp8_pow2(x, a.block, a.codes ? a.codes + b * a.block : nullptr, sc); break;
        case FakeQuant::kFp4Pow2: fake_quant_fp4_pow2(x, a.block, a.codes ? a.codes + b * a.block / 2 : nullptr, sc); break;
        case FakeQuant::kFp4E4m3: fake_quant_fp4_e4m3(x, a.block, a.codes ? a.codes + b * a.block / 2 : nullptr, sc); break;
      }
    }
  }, 64);
}

}  // namespace deepinfer::kernels::cpu

namespace deepinfer::kernels {

void dequant_fake_quant(FakeQuant kind, const uint8_t* codes, const uint8_t* scales, int64_t rows, int64_t dim,
                        int64_t block, float* out) {
  const int64_t blocks = rows * (dim / block);
  for (int64_t b = 0; b < blocks; ++b) {
    const float s = kind == FakeQuant::kFp4E4m3 ? core::e4m3_to_f32(scales[b]) : core::e8m0_to_f32(scales[b]);
    float* o = out + b * block;
    if (kind == FakeQuant::kFp8Pow2) {
      const uint8_t* c = codes + b * block;
      for (int64_t i = 0; i < block; ++i) o[i] = core::e4m3_to_f32(c[i]) * s;
    } else {
      const uint8_t* c = codes + b * block / 2;
      for (int64_t i = 0; i < block; ++i) o[i] = core::e2m1_to_f32(i % 2 == 0 ? (c[i / 2] & 0xF) : static_cast<uint8_t>(c[i / 2] >> 4)) * s;
    }
  }
}

}  // namespace deepinfer::kernels
