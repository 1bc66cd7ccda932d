// .npy reading and writing, and its errors.
#include <gtest/gtest.h>

#include <filesystem>
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

namespace {

// A .npy file with a hand-written header dict and `data` after it.
std::string npy_bytes(const std::string& dict, const std::string& data = "") {
  std::string header = dict;
  header += std::string((64 - (10 + header.size() + 1) % 64) % 64, ' ') + "\n";
  std::string s("\x93NUMPY\x01\x00", 8);
  s += static_cast<char>(header.size() & 0xFF);
  s += static_cast<char>(header.size() >> 8);
  return s + header + data;
}

std::string npy_error(const std::string& bytes) {
  // A folder of the test's own: ctest runs tests in parallel processes that share TempDir().
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / ::testing::UnitTest::GetInstance()->current_test_info()->name();
  std::filesystem::create_directories(dir);
  const std::string p = (dir / "crafted.npy").string();
  { std::ofstream(p, std::ios::binary) << bytes; }
  try {
    core::read_npy(p);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "read_npy accepted the file";
  return "";
}

}  // namespace

// A small file whose header claims a huge shape is refused before anything is allocated: the
// data must be in the file.
TEST(Npy, ShapeLargerThanTheFileIsRefusedBeforeAllocating) {
  for (const char* shape : {"(100000, 100000)", "(1099511627776,)", "(65536, 65536, 4)"}) {
    const std::string m = npy_error(npy_bytes(std::string("{'descr': '<f4', 'fortran_order': False, 'shape': ") + shape + ", }", "abcd"));
    EXPECT_NE(m.find("crafted.npy"), std::string::npos) << m;
    EXPECT_TRUE(m.find("truncated .npy data") != std::string::npos || m.find("too large") != std::string::npos) << m;
    EXPECT_EQ(m.find("bad_alloc"), std::string::npos) << m;
  }
  const std::string m = npy_error(npy_bytes("{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }", std::string(23, 'x')));
  EXPECT_NE(m.find("needs 24 bytes, the file has 23 after its header"), std::string::npos) << m;
}

TEST(Npy, MalformedShapesAndTypesAreNamed) {
  struct Case {
    const char* dict;
    const char* expect;
  } cases[] = {
      {"{'descr': '<i8', 'fortran_order': False, 'shape': (1e9,), }", "'1e9' is not a dimension"},
      {"{'descr': '<i8', 'fortran_order': False, 'shape': (3x,), }", "'3x' is not a dimension"},
      {"{'descr': '<i8', 'fortran_order': False, 'shape': (-2,), }", "negative dimension -2"},
      {"{'descr': '<i8', 'fortran_order': False, 'shape': (99999999999999999999,), }", "is not a dimension"},
      {"{'descr': '<i8', 'fortran_order': False, 'shape': 3, }", "'shape' must be a tuple"},
      {"{'descr': '<i8', 'fortran_order': Maybe, 'shape': (3,), }", "fortran_order is 'Maybe'"},
      {"{'descr': '<U8', 'fortran_order': False, 'shape': (3,), }", "unsupported .npy dtype '<U8'"},
      {"{'descr': '<c8', 'fortran_order': False, 'shape': (3,), }", "unsupported .npy dtype '<c8'"},
      {"{'descr': '>i8', 'fortran_order': False, 'shape': (3,), }", "only little-endian"},
      {"{'descr': '<i8', 'fortran_order': True, 'shape': (3,), }", "Fortran-order"},
  };
  for (const Case& c : cases) {
    const std::string m = npy_error(npy_bytes(c.dict, std::string(64, '\0')));
    EXPECT_NE(m.find(c.expect), std::string::npos) << c.dict << " -> " << m;
    EXPECT_NE(m.find("crafted.npy"), std::string::npos) << m;
  }
  // Python 2's long suffix and spaces still read.
  const std::string p = ::testing::TempDir() + "/long.npy";
  { std::ofstream(p, std::ios::binary) << npy_bytes("{'descr': '<i8', 'fortran_order': False, 'shape': (2L, ), }", std::string(16, '\1')); }
  std::vector<int64_t> shape;
  EXPECT_EQ(core::read_npy_ints(p, &shape).size(), 2u);
  EXPECT_EQ(shape, (std::vector<int64_t>{2}));
}

TEST(Npy, StreamingWriterMatchesTheOneShotWriter) {
  const std::string a = ::testing::TempDir() + "/a.npy", b = ::testing::TempDir() + "/b.npy";
  std::vector<float> v(3 * 5);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * 0.5f - 2.0f;
  core::write_npy_f32(a, v.data(), {3, 5});
  core::NpyF32Writer w(b, {3, 5});
  w.write(v.data(), 5);
  w.write(v.data() + 5, 10);
  w.finish();
  std::ifstream fa(a, std::ios::binary), fb(b, std::ios::binary);
  const std::string sa((std::istreambuf_iterator<char>(fa)), {}), sb((std::istreambuf_iterator<char>(fb)), {});
  EXPECT_EQ(sa, sb);
  try {
    core::NpyF32Writer bad("/nonexistent-dir/x.npy", {1});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-dir/x.npy: cannot open for writing: No such file"), std::string::npos)
        << e.what();
  }
}
