// Exact dtype conversions and the reference's rounding rules.
#include <gtest/gtest.h>

#include <cmath>

#include "core/dtype.h"

using namespace deepinfer::core;

TEST(Dtype, E4m3DecodesEveryCode) {
  for (int c = 0; c < 256; ++c) {
    const uint8_t code = static_cast<uint8_t>(c);
    const int sign = c >> 7, e = (c >> 3) & 0xF, m = c & 7;
    const float v = e4m3_to_f32(code);
    if (e == 15 && m == 7) {
      EXPECT_TRUE(std::isnan(v)) << c;
      continue;
    }
    double mag = e == 0 ? m * std::ldexp(1.0, -9) : (1.0 + m / 8.0) * std::ldexp(1.0, e - 7);
    EXPECT_EQ(v, static_cast<float>(sign ? -mag : mag)) << c;
    // Every finite code round-trips (except -0 -> code 0x80 which also round-trips).
    EXPECT_EQ(f32_to_e4m3(v), code) << c;
  }
}

TEST(Dtype, E4m3RoundsToNearestEven) {
  // Between 1.0 (mantissa 000) and 1.125 (001): the tie goes to the even 1.0.
  EXPECT_EQ(round_e4m3(1.0625f), 1.0f);
  // Between 1.125 (001) and 1.25 (010): the tie goes to 1.25.
  EXPECT_EQ(round_e4m3(1.1875f), 1.25f);
  EXPECT_EQ(round_e4m3(1.19f), 1.25f);
  EXPECT_EQ(round_e4m3(1.06f), 1.0f);
  // Subnormals: step 2^-9; a tie between 1 and 2 steps goes to 2.
  EXPECT_EQ(round_e4m3(1.5f * 0x1p-9f), 2 * 0x1p-9f);
  EXPECT_EQ(round_e4m3(0.5f * 0x1p-9f), 0.0f);
  EXPECT_EQ(round_e4m3(-3.4f * 0x1p-9f), -3 * 0x1p-9f);
  // Top of the range: 464 ties to 448; above that rounds to the NaN code like torch.
  EXPECT_EQ(round_e4m3(448.0f), 448.0f);
  EXPECT_EQ(round_e4m3(464.0f), 448.0f);
  EXPECT_TRUE(std::isnan(round_e4m3(470.0f)));
  EXPECT_TRUE(std::isnan(round_e4m3(1e6f)));
}

TEST(Dtype, E2m1TieRule) {
  auto v = [](float q) { return e2m1_to_f32(f32_to_e2m1(q)); };
  // Ties at 0.25, 1.25, 2.5, 5.0 round down (even code); at 0.75, 1.75, 3.5 round up.
  EXPECT_EQ(v(0.25f), 0.0f);
  EXPECT_EQ(v(0.75f), 1.0f);
  EXPECT_EQ(v(1.25f), 1.0f);
  EXPECT_EQ(v(1.75f), 2.0f);
  EXPECT_EQ(v(2.5f), 2.0f);
  EXPECT_EQ(v(3.5f), 4.0f);
  EXPECT_EQ(v(5.0f), 4.0f);
  EXPECT_EQ(v(std::nextafter(0.25f, 1.0f)), 0.5f);
  EXPECT_EQ(v(std::nextafter(5.0f, 6.0f)), 6.0f);
  EXPECT_EQ(v(-2.6f), -3.0f);
  EXPECT_EQ(v(6.0f), 6.0f);
  EXPECT_EQ(f32_to_e2m1(-0.0f), 0x8);
  EXPECT_EQ(v(-0.1f), 0.0f);
  EXPECT_FALSE(std::signbit(v(-0.1f)));  // -0 becomes +0 through the table
  for (int c = 0; c < 16; ++c) EXPECT_EQ(std::fabs(e2m1_to_f32(static_cast<uint8_t>(c))), std::fabs(e2m1_to_f32(static_cast<uint8_t>(c ^ 8))));
}

TEST(Dtype, Pow2Ceil) {
  EXPECT_EQ(pow2_ceil(1.0f), 1.0f);
  EXPECT_EQ(pow2_ceil(1.5f), 2.0f);
  EXPECT_EQ(pow2_ceil(0.3f), 0.5f);
  EXPECT_EQ(pow2_ceil(4.0f), 4.0f);
  EXPECT_EQ(pow2_ceil(std::nextafter(4.0f, 5.0f)), 8.0f);
  // Subnormal inputs: exponent field 0 plus a nonzero mantissa gives 2^-126.
  EXPECT_EQ(pow2_ceil(0x1p-140f), 0x1p-126f);
}

TEST(Dtype, E8m0AndHalfFormats) {
  EXPECT_EQ(e8m0_to_f32(127), 1.0f);
  EXPECT_EQ(e8m0_to_f32(0), 0x1p-127f);
  EXPECT_EQ(e8m0_to_f32(254), 0x1p127f);
  EXPECT_TRUE(std::isnan(e8m0_to_f32(255)));
  EXPECT_EQ(bf16_to_f32(0x3F80), 1.0f);
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(f32_to_bf16(bf16_to_f32(0xC0A0)), 0xC0A0);
  EXPECT_EQ(f16_to_f32(0x3C00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xC000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x0001), 0x1p-24f);
  EXPECT_TRUE(std::isinf(f16_to_f32(0x7C00)));
}

TEST(Dtype, Names) {
  DType t;
  EXPECT_TRUE(parse_dtype("F8_E4M3", &t));
  EXPECT_EQ(t, DType::F8_E4M3);
  EXPECT_EQ(dtype_size(t), 1);
  EXPECT_FALSE(parse_dtype("F64", &t));
}
