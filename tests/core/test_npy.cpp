// .npy reading and writing, and its errors.
#include <gtest/gtest.h>

#include <fstream>

#include "core/error.h"
#include "core/npy.h"

using namespace deepinfer;

TEST(Npy, RoundTrip) {
  const std::string p = ::testing::TempDir() + "/rt.npy";
  std::vector<float> v = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, 8.0f};
  core::write_npy_f32(p, v.data(), {2, 3});
  std::vector<int64_t> shape;
  EXPECT_EQ(core::read_npy_f32(p, &shape), v);
  EXPECT_EQ(shape, (std::vector<int64_t>{2, 3}));
  std::vector<int64_t> ids = {0, 5, 1023};
  core::write_npy_i64(p, ids.data(), {3});
  EXPECT_EQ(core::read_npy_ints(p, &shape), ids);
  EXPECT_EQ(shape, (std::vector<int64_t>{3}));
}

TEST(Npy, FixtureTokens) {
  std::vector<int64_t> shape;
  auto t = core::read_npy_ints(std::string(DEEPINFER_TEST_DATA) + "/v41/ced/golden/tokens.npy", &shape);
  EXPECT_EQ(shape, (std::vector<int64_t>{40}));
  for (int64_t x : t) EXPECT_TRUE(x >= 0 && x < 1024);
}

TEST(Npy, Errors) {
  const std::string p = ::testing::TempDir() + "/bad.npy";
  { std::ofstream(p) << "not numpy"; }
  EXPECT_THROW(core::read_npy(p), Error);
  EXPECT_THROW(core::read_npy("/nonexistent/x.npy"), Error);
  std::vector<float> v = {1, 2, 3};
  core::write_npy_f32(p, v.data(), {3});
  EXPECT_THROW(core::read_npy_ints(p), Error);  // float array where ints are expected
  // Truncate the data section.
  std::ifstream in(p, std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), {});
  { std::ofstream(p, std::ios::binary) << all.substr(0, all.size() - 5); }
  try {
    core::read_npy(p);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
  }
}
