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
