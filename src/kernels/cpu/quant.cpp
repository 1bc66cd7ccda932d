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

void fake_quant_fp8_pow2(float* x, int64_t n) {
  const float amax = std::max(block_amax(x, n), 1e-4f);
  const float s = core::pow2_ceil(amax * (1.0f / 448.0f));
  for (int64_t i = 0; i < n; ++i) {
    float q = std::clamp(x[i] / s, -448.0f, 448.0f);
    x[i] = core::round_e4m3(q) * s;
  }
}

void fake_quant_fp4_pow2(float* x, int64_t n) {
  const float amax = std::max(block_amax(x, n), 6.0f * 0x1p-126f);
  const float s = core::pow2_ceil(amax * (1.0f / 6.0f));
  for (int64_t i = 0; i < n; ++i) {
    float q = std::clamp(x[i] / s, -6.0f, 6.0f);
    x[i] = core::e2m1_to_f32(core::f32_to_e2m1(q)) * s;
  }
}

void fake_quant_fp4_e4m3(float* x, int64_t n) {
  const float amax = std::max(block_amax(x, n), 6.0f * 0x1p-9f);
  const float s = core::round_e4m3(amax / 6.0f);
  for (int64_t i = 0; i < n; ++i) {
    float q = std::clamp(x[i] / s, -6.0f, 6.0f);
    x[i] = core::e2m1_to_f32(core::f32_to_e2m1(q)) * s;
  }
}

void fake_quant(core::ThreadPool& pool, const FakeQuantArgs& a) {
  // Shapes the reference cannot block run unquantised, exactly as it does.
  if (a.block <= 0 || a.dim % a.block != 0) return;
  const int64_t blocks = a.rows * (a.dim / a.block);
  pool.parallel_for(blocks, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      float* x = a.x + b * a.block;
      switch (a.kind) {
        case FakeQuant::kFp8Pow2: fake_quant_fp8_pow2(x, a.block); break;
        case FakeQuant::kFp4Pow2: fake_quant_fp4_pow2(x, a.block); break;
        case FakeQuant::kFp4E4m3: fake_quant_fp4_e4m3(x, a.block); break;
      }
    }
  }, 64);
}

}  // namespace deepinfer::kernels::cpu
