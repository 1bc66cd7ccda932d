// The fake quantisers: block scales, rounding, and blocks that do not divide.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include <cstring>

#include "core/dtype.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_ops.h"

using namespace deepinfer;

TEST(FakeQuant, Fp8Pow2Block) {
  std::vector<float> x(32, 0.0f);
  x[0] = 100.0f;  // amax 100 -> s = pow2ceil(100/448) = 0.25; 400 ties between 384 and 416 -> 384
  x[1] = 1.03f;   // 4.12 -> e4m3 step 0.5 at [4, 8): 4.0 -> 1.0
  x[2] = -0.0009f;  // -0.0036 -> subnormal grid 2^-9: round(1.8432) = 2 -> 2^-8 * 0.25
  kernels::cpu::fake_quant_fp8_pow2(x.data(), 32);
  EXPECT_EQ(x[0], 96.0f);
  EXPECT_EQ(x[1], 1.0f);
  EXPECT_EQ(x[2], -0x1p-8f * 0.25f);
  // Tiny blocks use the 1e-4 amax floor: s = pow2ceil(1e-4/448).
  std::vector<float> y(32, 0.0f);
  y[5] = 1e-9f;
  kernels::cpu::fake_quant_fp8_pow2(y.data(), 32);
  float s = core::pow2_ceil(1e-4f * (1.0f / 448.0f));
  EXPECT_EQ(y[5], core::round_e4m3(1e-9f / s) * s);
}

TEST(FakeQuant, Fp4Pow2AndE4m3) {
  std::vector<float> x(32, 0.0f);
  x[0] = 6.0f;   // s = pow2ceil(1) = 1
  x[1] = 2.5f;   // tie -> 2
  x[2] = 0.75f;  // tie -> 1
  x[3] = -5.0f;  // tie -> -4
  kernels::cpu::fake_quant_fp4_pow2(x.data(), 32);
  EXPECT_EQ(x[0], 6.0f);
  EXPECT_EQ(x[1], 2.0f);
  EXPECT_EQ(x[2], 1.0f);
  EXPECT_EQ(x[3], -4.0f);
  // e4m3 scale: amax 7 -> s = e4m3(7/6 = 1.1667) = 1.125 (a non power of two).
  std::vector<float> y(16, 0.0f);
  y[0] = 7.0f;   // 7/1.125 = 6.22 -> clamp 6 -> 6.75
  y[1] = 2.0f;   // 1.777 -> 2 -> 2.25
  kernels::cpu::fake_quant_fp4_e4m3(y.data(), 16);
  EXPECT_EQ(y[0], 6.0f * 1.125f);
  EXPECT_EQ(y[1], 2.0f * 1.125f);
}

TEST(FakeQuant, BlocksAreIndependentAndNonDividingDimsPassThrough) {
  auto be = kernels::make_cpu_backend(2);
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  std::vector<float> x(3 * 64);
  for (auto& v : x) v = nd(rng);
  x[40] = 1000.0f;  // a large value in block 1 of row 0 must not change block 0
  std::vector<float> ref = x;
  for (int b = 0; b < 6; ++b) kernels::cpu::fake_quant_fp8_pow2(ref.data() + 32 * b, 32);
  be->fake_quant({.x = x.data(), .rows = 3, .dim = 64, .block = 32, .kind = kernels::FakeQuant::kFp8Pow2});
  EXPECT_EQ(x, ref);
  std::vector<float> z(3 * 40), z0;
  for (auto& v : z) v = nd(rng);
  z0 = z;
  be->fake_quant({.x = z.data(), .rows = 3, .dim = 40, .block = 32, .kind = kernels::FakeQuant::kFp8Pow2});
  EXPECT_EQ(z, z0);  // 40 % 32 != 0: the reference leaves it unquantised
}

// quant_margin: zero for a value on a rounding midpoint or a scale input on the point where
// its scale changes, the exact distance otherwise, and small FP8 values left out.
TEST(QuantMargin, ZeroOnABoundaryAndTheDistanceBesideIt) {
  using kernels::FakeQuant;
  std::vector<float> x(32, 0.0f);
  x[0] = 104.0f;  // q = 416 with s = 0.25 (t = 0.232 is 7% from a power of two)
  x[1] = 17.0f;   // q = 68: the midpoint of 64 and 72
  EXPECT_EQ(kernels::quant_margin(FakeQuant::kFp8Pow2, x.data(), 32), 0.0);
  x[1] = std::nextafter(17.0f, 18.0f);
  EXPECT_DOUBLE_EQ(kernels::quant_margin(FakeQuant::kFp8Pow2, x.data(), 32), (x[1] - 17.0) / 104.0);
  x[1] = 1.0625f;  // q = 4.25, a midpoint, but under amax / 16
  EXPECT_GT(kernels::quant_margin(FakeQuant::kFp8Pow2, x.data(), 32), 1e-3);
  x[0] = 112.0f;  // t = 112 / 448 = 0.25: the scale's boundary
  EXPECT_EQ(kernels::quant_margin(FakeQuant::kFp8Pow2, x.data(), 32), 0.0);

  std::vector<float> y(32, 0.0f);
  y[0] = 5.9f;   // s = 1; t = 0.9833 is 1.7% below 1
  y[1] = 2.5f;   // an e2m1 boundary
  EXPECT_EQ(kernels::quant_margin(FakeQuant::kFp4Pow2, y.data(), 32), 0.0);
  y[1] = 2.45f;
  EXPECT_NEAR(kernels::quant_margin(FakeQuant::kFp4Pow2, y.data(), 32), (2.5 - 2.45f) / 5.9f, 1e-9);

  std::vector<float> z(16, 0.0f);
  z[0] = 6.375f;  // t = 1.0625: the midpoint of the e4m3 scales 1 and 1.125
  EXPECT_EQ(kernels::quant_margin(FakeQuant::kFp4E4m3, z.data(), 16), 0.0);
  std::vector<float> zeros(32, 0.0f);
  EXPECT_TRUE(std::isinf(kernels::quant_margin(FakeQuant::kFp8Pow2, zeros.data(), 32)));
}

// A block moved by less than its margin (as a fraction of its amax) rounds every value the
// margin covers to the same value (a zero may change its sign).
TEST(QuantMargin, APerturbationInsideTheMarginKeepsTheCodes) {
  using kernels::FakeQuant;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  std::uniform_real_distribution<double> ud(-0.5, 0.5);
  auto rounded = [](FakeQuant kind, std::vector<float> x) {
    const int64_t n = static_cast<int64_t>(x.size());
    if (kind == FakeQuant::kFp8Pow2) kernels::cpu::fake_quant_fp8_pow2(x.data(), n);
    if (kind == FakeQuant::kFp4Pow2) kernels::cpu::fake_quant_fp4_pow2(x.data(), n);
    if (kind == FakeQuant::kFp4E4m3) kernels::cpu::fake_quant_fp4_e4m3(x.data(), n);
    return x;
  };
  int checked = 0;
  for (FakeQuant kind : {FakeQuant::kFp8Pow2, FakeQuant::kFp4Pow2, FakeQuant::kFp4E4m3}) {
    const size_t n = kind == FakeQuant::kFp4E4m3 ? 16 : 32;
    for (int t = 0; t < 2000; ++t) {
      std::vector<float> x(n);
      for (auto& v : x) v = nd(rng) * 3.0f;
      float amax = 0.0f;
      for (float v : x) amax = std::max(amax, std::fabs(v));
      const double d = kernels::quant_margin(kind, x.data(), static_cast<int64_t>(n)) * amax;
      if (d < 1e-5) continue;  // a move under float32 resolution would prove nothing
      std::vector<float> y = x;
      for (auto& v : y) v = static_cast<float>(v + ud(rng) * d);
      const std::vector<float> rx = rounded(kind, x), ry = rounded(kind, y);
      for (size_t i = 0; i < n; ++i) {
        if (kind == FakeQuant::kFp8Pow2 && std::fabs(x[i]) < amax / 16.0f) continue;
        ASSERT_EQ(rx[i], ry[i]) << "kind " << static_cast<int>(kind) << ", trial " << t << ", value " << i;
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 3000);
}

TEST(WeightFormats, DequantMatchesTheDtypeTablesForEveryCode) {
  // Every e4m3 code (NaN included) and every e2m1 code through the vectorised row paths.
  std::vector<uint8_t> q(256), scale(8, 127);
  for (int i = 0; i < 256; ++i) q[static_cast<size_t>(i)] = static_cast<uint8_t>(i);
  kernels::WeightView w8{kernels::WeightFormat::kFP8Row32, q.data(), scale.data(), 1, 256};
  std::vector<float> out(256);
  kernels::dequant_row(w8, 0, out.data());
  for (int i = 0; i < 256; ++i) {
    const float ref = core::e4m3_to_f32(static_cast<uint8_t>(i));
    if (std::isnan(ref)) EXPECT_TRUE(std::isnan(out[static_cast<size_t>(i)])) << i;
    else EXPECT_EQ(std::memcmp(&ref, &out[static_cast<size_t>(i)], 4), 0) << i;
  }
  std::vector<uint8_t> p4(128);
  for (int i = 0; i < 128; ++i) p4[static_cast<size_t>(i)] = static_cast<uint8_t>((i % 16) | ((15 - i % 16) << 4));
  std::vector<uint8_t> s4(8, 128);  // scale 2
  kernels::WeightView w4{kernels::WeightFormat::kMXFP4, p4.data(), s4.data(), 1, 256};
  kernels::dequant_row(w4, 0, out.data());
  for (int j = 0; j < 256; ++j) {
    const uint8_t code = (j % 2 == 0) ? static_cast<uint8_t>((j / 2) % 16) : static_cast<uint8_t>(15 - (j / 2) % 16);
    const float ref = core::e2m1_to_f32(code) * 2.0f;
    EXPECT_EQ(std::memcmp(&ref, &out[static_cast<size_t>(j)], 4), 0) << j;
  }
}
