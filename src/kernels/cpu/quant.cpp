// The reference's always-on fake quantisers (QAT semantics), per block of the last dim, and
// the weight quantiser to the release formats (quantize_weight, model::quantize_matrix's rule).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"
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

namespace {

// ue8m0 code of 2^ceil(log2(amax / max_code)) by the quotient's exponent and mantissa fields
// (core::pow2_ceil's rounding), clamped to [0, 254]; 0 for a block without a nonzero value.
uint8_t pow2_scale_code(float amax, float max_code) {
  if (!(amax > 0.0f)) return 0;
  uint32_t b;
  const float t = amax / max_code;
  std::memcpy(&b, &t, 4);
  const int k = static_cast<int>((b >> 23) & 0xFFu) - 127 + ((b & 0x7FFFFFu) != 0 ? 1 : 0);
  return static_cast<uint8_t>(std::clamp(k + 127, 0, 254));
}

// Block row `br` of a QuantizeWeightArgs chunk (32 rows for kFP8Block32, else one row): its
// scales and codes.
void quantize_block_row(const QuantizeWeightArgs& a, int64_t br) {
  const bool block32 = a.format == WeightFormat::kFP8Block32, fp4 = a.format == WeightFormat::kMXFP4;
  const int64_t C = a.cols, sc_cols = (C + 31) / 32, packed = (C + 1) / 2;
  const int64_t r0 = block32 ? br * 32 : br, r1 = block32 ? std::min(a.rows, r0 + 32) : br + 1;
  const int64_t scale_row = block32 ? a.row0 / 32 + br : a.row0 + br;
  const float max_code = fp4 ? 6.0f : 448.0f;
  for (int64_t bc = 0; bc < sc_cols; ++bc) {
    const int64_t c0 = bc * 32, c1 = std::min(C, c0 + 32);
    float amax = 0.0f;
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(a.x[r * C + c]));
    const uint8_t code = pow2_scale_code(amax, max_code);
    a.scales[scale_row * sc_cols + bc] = code;
    const float s = core::e8m0_to_f32(code);
    for (int64_t r = r0; r < r1; ++r) {
      const float* x = a.x + r * C;
      const int64_t g = a.row0 + r;
      if (!fp4) {
        for (int64_t c = c0; c < c1; ++c) a.codes[g * C + c] = core::f32_to_e4m3(std::clamp(x[c] / s, -448.0f, 448.0f));
        continue;
      }
      for (int64_t c = c0; c < c1; c += 2) {  // blocks start at even columns: pairs never straddle two
        const uint8_t lo = core::f32_to_e2m1(std::clamp(x[c] / s, -6.0f, 6.0f));
        const uint8_t hi = c + 1 < c1 ? core::f32_to_e2m1(std::clamp(x[c + 1] / s, -6.0f, 6.0f)) : uint8_t{0};
        a.codes[g * packed + c / 2] = static_cast<uint8_t>(lo | (hi << 4));
      }
    }
  }
}

int64_t block_rows(const QuantizeWeightArgs& a) {
  DI_CHECK(a.format == WeightFormat::kFP8Block32 || a.format == WeightFormat::kFP8Row32 || a.format == WeightFormat::kMXFP4,
           "quantize_weight stores kFP8Block32, kFP8Row32 or kMXFP4");
  DI_CHECK(a.format != WeightFormat::kFP8Block32 || a.row0 % 32 == 0, "quantize_weight: a kFP8Block32 chunk starts at a multiple of 32 rows");
  if (a.rows <= 0 || a.cols <= 0) return 0;
  return a.format == WeightFormat::kFP8Block32 ? (a.rows + 31) / 32 : a.rows;
}

}  // namespace

void quantize_weight(core::ThreadPool& pool, const QuantizeWeightArgs& a) {
  pool.parallel_for(block_rows(a), [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) quantize_block_row(a, b);
  }, 1);
}

}  // namespace deepinfer::kernels::cpu

namespace deepinfer::kernels {

void quantize_weight_rows(const QuantizeWeightArgs& a) {
  const int64_t n = cpu::block_rows(a);
  for (int64_t b = 0; b < n; ++b) cpu::quantize_block_row(a, b);
}

namespace {
// Distance of q >= 0 to the nearest point where round-to-nearest onto the ascending grid g
// changes its result (the midpoints; past the last one the quantisers clamp).
template <size_t N>
double grid_margin(double q, const std::array<double, N>& g) {
  double d = INFINITY;
  for (size_t i = 0; i + 1 < N; ++i) d = std::min(d, std::fabs(q - 0.5 * (g[i] + g[i + 1])));
  return d;
}
const std::array<double, 127>& e4m3_grid() {  // the non-negative finite e4m3 values, ascending
  static const std::array<double, 127> g = [] {
    std::array<double, 127> v{};
    for (int c = 0; c < 127; ++c) v[static_cast<size_t>(c)] = core::e4m3_to_f32(static_cast<uint8_t>(c));
    return v;
  }();
  return g;
}
constexpr std::array<double, 8> kE2m1 = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};
// Relative distance of t > 0 to the nearest power of two (where pow2_ceil(t) changes).
double pow2_margin(double t) {
  const double lo = std::exp2(std::floor(std::log2(t)));
  return std::min(t - lo, 2.0 * lo - t) / t;
}
}  // namespace

double quant_margin(FakeQuant kind, const float* x, int64_t n) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  // The scale and its margin, with the quantisers' amax floors (a floored scale cannot change).
  double s = 0, m = INFINITY;
  const bool fp8 = kind == FakeQuant::kFp8Pow2;
  if (fp8) {
    const float t = std::max(amax, 1e-4f) * (1.0f / 448.0f);
    s = core::pow2_ceil(t);
    if (amax > 1e-4f) m = pow2_margin(t);
  } else if (kind == FakeQuant::kFp4Pow2) {
    const float t = std::max(amax, 6.0f * 0x1p-126f) * (1.0f / 6.0f);
    s = core::pow2_ceil(t);
    if (amax > 6.0f * 0x1p-126f) m = pow2_margin(t);
  } else {
    const float t = std::max(amax, 6.0f * 0x1p-9f) / 6.0f;
    s = core::round_e4m3(t);
    if (amax > 6.0f * 0x1p-9f) m = grid_margin(t, e4m3_grid()) / t;
  }
  if (amax == 0.0f) return m;
  for (int64_t i = 0; i < n; ++i) {
    const double v = std::fabs(x[i]);
    if (fp8 && v < amax / 16.0) continue;
    const double q = std::min(v / s, fp8 ? 448.0 : 6.0);
    m = std::min(m, (fp8 ? grid_margin(q, e4m3_grid()) : grid_margin(q, kE2m1)) * s / amax);
  }
  return m;
}

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
