// RoPE tables: the main rope and the YaRN-scaled compress rope of the released config.
#include <gtest/gtest.h>

#include <cmath>

#include "model/rope.h"

using namespace deepinfer;

TEST(Rope, MainInvFreq) {
  loader::RopeParams p;
  p.rope_theta = 10000.0;
  auto inv = model::rope_inv_freq(p, 64, 1048576);
  ASSERT_EQ(inv.size(), 32u);
  for (int i = 0; i < 32; ++i) EXPECT_NEAR(inv[i], std::pow(10000.0, -i / 32.0), 1e-7 * std::pow(10000.0, -i / 32.0)) << i;
}

TEST(Rope, ReleasedYarnCompressInvFreq) {
  // Released: compress_rope_theta 160000, factor 16, beta 32/1, original 65536.
  loader::RopeParams p;
  p.rope_type = "yarn";
  p.rope_theta = 160000.0;
  p.factor = 16.0;
  p.has_factor = true;
  p.beta_fast = 32;
  p.beta_slow = 1;
  p.original_max_position_embeddings = 65536;
  auto inv = model::rope_inv_freq(p, 64, 1048576);
  ASSERT_EQ(inv.size(), 32u);
  // Numbers from the spec (section 1.3): pairs 0-15 unscaled, 25-31 divided by 16.
  EXPECT_NEAR(inv[0], 1.0, 1e-7);
  EXPECT_NEAR(inv[1], 0.68766, 1e-5);
  EXPECT_NEAR(inv[15] / 3.6355e-3, 1.0, 1e-4);
  EXPECT_NEAR(inv[16] / 2.2656e-3, 1.0, 1e-4);
  EXPECT_NEAR(inv[24] / 1.9531e-5, 1.0, 1e-4);
  EXPECT_NEAR(inv[25] / 5.3723e-6, 1.0, 1e-4);
  EXPECT_NEAR(inv[31] / 5.6805e-7, 1.0, 1e-4);
  for (int i = 0; i <= 15; ++i) EXPECT_FLOAT_EQ(inv[i], static_cast<float>(std::pow(160000.0, -i / 32.0)));
  for (int i = 25; i < 32; ++i) EXPECT_NEAR(inv[i] * 16.0 / std::pow(160000.0, -i / 32.0), 1.0, 1e-6);
  // Without `factor`, it is max_position_embeddings / original.
  p.has_factor = false;
  auto inv2 = model::rope_inv_freq(p, 64, 1048576);
  EXPECT_EQ(inv, inv2);
}

TEST(Rope, Tables) {
  model::RopeTable t;
  t.inv_freq = {1.0f, 0.5f};
  std::vector<int64_t> pos = {0, 3};
  std::vector<float> c, s;
  t.compute(pos.data(), 2, &c, &s);
  EXPECT_EQ(c[0], 1.0f);
  EXPECT_EQ(s[1], 0.0f);
  EXPECT_FLOAT_EQ(c[2], std::cos(3.0f));
  EXPECT_FLOAT_EQ(s[3], std::sin(1.5f));
}
