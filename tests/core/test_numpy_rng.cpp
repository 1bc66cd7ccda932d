// NumPy-compatible SeedSequence / PCG64 / Generator.integers against values from real NumPy
// (tests/data/numpy_rng/reference.txt, written by tools/numpy_rng_reference.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/numpy_rng.h"

using namespace deepinfer;
using namespace deepinfer::core;

namespace {

// One record of the reference file: its kind and the whitespace-separated fields after it.
struct Record {
  std::string kind;
  std::vector<std::string> fields;
  int line = 0;
};

const std::vector<Record>& reference() {
  static const std::vector<Record> records = [] {
    std::vector<Record> out;
    const std::string path = std::string(DEEPINFER_TEST_DATA) + "/numpy_rng/reference.txt";
    std::ifstream in(path);
    EXPECT_TRUE(in.good()) << "cannot open " << path;
    std::string text;
    int line_no = 0;
    while (std::getline(in, text)) {
      ++line_no;
      if (text.empty() || text[0] == '#') continue;
      std::istringstream ss(text);
      Record r;
      r.line = line_no;
      ss >> r.kind;
      for (std::string f; ss >> f;) r.fields.push_back(f);
      out.push_back(std::move(r));
    }
    return out;
  }();
  return records;
}

// Cursor over a record's fields.
class Fields {
 public:
  explicit Fields(const Record& r) : r_(r) {}
  uint64_t u64() { return std::stoull(next()); }
  int64_t i64() { return std::stoll(next()); }
  size_t size() { return static_cast<size_t>(std::stoull(next())); }
  std::string str() { return next(); }
  bool done() const { return pos_ == r_.fields.size(); }

 private:
  const std::string& next() {
    if (pos_ >= r_.fields.size()) throw std::runtime_error("reference line " + std::to_string(r_.line) + " too short");
    return r_.fields[pos_++];
  }
  const Record& r_;
  size_t pos_ = 0;
};

std::vector<const Record*> records_of(const std::string& kind) {
  std::vector<const Record*> out;
  for (const Record& r : reference())
    if (r.kind == kind) out.push_back(&r);
  return out;
}

}  // namespace

TEST(NumpyRng, ReferenceFileLoads) {
  EXPECT_GT(records_of("pool").size(), 40u);
  EXPECT_GT(records_of("ints").size(), 900u);
  EXPECT_EQ(records_of("engram").size(), 46u * 4u);
}

TEST(NumpyRng, SeedSequencePool) {
  for (const Record* r : records_of("pool")) {
    Fields f(*r);
    const uint64_t seed = f.u64();
    SeedSequence ss(seed);
    for (size_t i = 0; i < SeedSequence::kPoolSize; ++i) EXPECT_EQ(ss.pool()[i], f.u64()) << "seed " << seed << " word " << i;
    EXPECT_TRUE(f.done());
  }
}

TEST(NumpyRng, SeedSequenceGenerateStateU32) {
  for (const Record* r : records_of("state32")) {
    Fields f(*r);
    const uint64_t seed = f.u64();
    const size_t n = f.size();
    const std::vector<uint32_t> got = SeedSequence(seed).generate_state_u32(n);
    ASSERT_EQ(got.size(), n);
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(got[i], f.u64()) << "seed " << seed << " word " << i;
    EXPECT_TRUE(f.done());
  }
}

TEST(NumpyRng, SeedSequenceGenerateStateU64) {
  for (const Record* r : records_of("state64")) {
    Fields f(*r);
    const uint64_t seed = f.u64();
    const size_t n = f.size();
    const std::vector<uint64_t> got = SeedSequence(seed).generate_state_u64(n);
    ASSERT_EQ(got.size(), n);
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(got[i], f.u64()) << "seed " << seed << " word " << i;
    EXPECT_TRUE(f.done());
  }
}

TEST(NumpyRng, Pcg64SeededState) {
  for (const Record* r : records_of("pcg")) {
    Fields f(*r);
    const uint64_t seed = f.u64();
    const Pcg64State st = Pcg64(seed).state();
    EXPECT_EQ(st.state_hi, f.u64()) << seed;
    EXPECT_EQ(st.state_lo, f.u64()) << seed;
    EXPECT_EQ(st.inc_hi, f.u64()) << seed;
    EXPECT_EQ(st.inc_lo, f.u64()) << seed;
  }
}

TEST(NumpyRng, Pcg64RandomRaw) {
  for (const Record* r : records_of("raw")) {
    Fields f(*r);
    const uint64_t seed = f.u64();
    const size_t n = f.size();
    Pcg64 gen(seed);
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(gen.next_u64(), f.u64()) << "seed " << seed << " draw " << i;
  }
}

TEST(NumpyRng, Pcg64MixedU32AndU64Draws) {
  const auto recs = records_of("mixed");
  ASSERT_FALSE(recs.empty());
  for (const Record* r : recs) {
    Fields f(*r);
    const uint64_t seed = f.u64();
    const std::string ops = f.str();
    ASSERT_EQ(f.size(), ops.size());
    Pcg64 gen(seed);
    for (size_t i = 0; i < ops.size(); ++i) {
      const uint64_t got = ops[i] == '4' ? gen.next_u32() : gen.next_u64();
      EXPECT_EQ(got, f.u64()) << "seed " << seed << " op " << i << " (" << ops[i] << ")";
    }
  }
}

TEST(NumpyRng, Pcg64U32IsLowHalfThenHighHalf) {
  Pcg64 a(10007), b(10007);
  for (int i = 0; i < 20; ++i) {
    const uint64_t v = a.next_u64();
    EXPECT_FALSE(b.has_u32());
    EXPECT_EQ(b.next_u32(), static_cast<uint32_t>(v));
    EXPECT_TRUE(b.has_u32());
    EXPECT_EQ(b.next_u32(), static_cast<uint32_t>(v >> 32));
  }
}

// Every default_rng(seed).integers(low, high, size=n, dtype=int64) case: values and the bit
// generator's state afterwards (which pins down how many draws were consumed, rejections
// included, and the half-used uint32 buffer).
TEST(NumpyRng, GeneratorIntegersInt64) {
  const auto recs = records_of("ints");
  ASSERT_FALSE(recs.empty());
  for (const Record* r : recs) {
    Fields f(*r);
    const uint64_t seed = f.u64();
    const int64_t low = f.i64(), high = f.i64();
    const size_t n = f.size();
    const uint64_t after_hi = f.u64(), after_lo = f.u64(), after_has = f.u64(), after_buf = f.u64();
    Pcg64 gen(seed);
    const std::vector<int64_t> got = generator_integers_i64(gen, low, high, n);
    ASSERT_EQ(got.size(), n);
    const std::string what = "line " + std::to_string(r->line) + ": seed " + std::to_string(seed) + " [" +
                             std::to_string(low) + ", " + std::to_string(high) + ") n " + std::to_string(n);
    for (size_t i = 0; i < n; ++i) {
      const int64_t want = f.i64();
      ASSERT_EQ(got[i], want) << what << " index " << i;
      ASSERT_GE(got[i], low) << what;
      ASSERT_LT(got[i], high) << what;
    }
    EXPECT_TRUE(f.done()) << what;
    const Pcg64State st = gen.state();
    EXPECT_EQ(st.state_hi, after_hi) << what;
    EXPECT_EQ(st.state_lo, after_lo) << what;
    EXPECT_EQ(gen.has_u32() ? 1u : 0u, after_has) << what;
    if (gen.has_u32()) {
      EXPECT_EQ(gen.next_u32(), after_buf) << what;
    }
    if (low == 0) {
      EXPECT_EQ(numpy_default_rng_integers(seed, high, n), got) << what;
    }
  }
}

TEST(NumpyRng, GeneratorIntegersSuccessiveCalls) {
  const auto recs = records_of("chain");
  ASSERT_FALSE(recs.empty());
  for (const Record* r : recs) {
    Fields f(*r);
    const uint64_t seed = f.u64();
    const size_t calls = f.size();
    Pcg64 gen(seed);
    for (size_t c = 0; c < calls; ++c) {
      const int64_t low = f.i64(), high = f.i64();
      const size_t n = f.size();
      const std::vector<int64_t> got = generator_integers_i64(gen, low, high, n);
      for (size_t i = 0; i < n; ++i) EXPECT_EQ(got[i], f.i64()) << "seed " << seed << " call " << c << " index " << i;
    }
    EXPECT_TRUE(f.done());
  }
}

// The exact expression of Engram's hash multipliers:
// default_rng(10007 * layer_id).integers(0, max(1, (2**63 - 1) // cvocab // 2), size=4,
// dtype=int64) * 2 + 1.
TEST(NumpyRng, EngramMultipliers) {
  for (const Record* r : records_of("engram")) {
    Fields f(*r);
    const uint64_t layer_id = f.u64();
    const int64_t cvocab = f.i64();
    const int64_t high = std::max<int64_t>(1, INT64_MAX / cvocab / 2);
    const std::vector<int64_t> got = numpy_default_rng_integers(10007 * layer_id, high, 4);
    for (size_t i = 0; i < 4; ++i) EXPECT_EQ(got[i] * 2 + 1, f.i64()) << "layer " << layer_id << " cvocab " << cvocab;
  }
}

TEST(NumpyRng, ReleasedEngramBound) { EXPECT_EQ(INT64_MAX / 99092 / 2, 46539438283891); }

TEST(NumpyRng, RangeOfOneDrawsNothing) {
  Pcg64 gen(7);
  const Pcg64State before = gen.state();
  EXPECT_EQ(generator_integers_i64(gen, 41, 42, 5), std::vector<int64_t>(5, 41));
  EXPECT_EQ(gen.state().state_lo, before.state_lo);
  EXPECT_EQ(gen.state().state_hi, before.state_hi);
}

TEST(NumpyRng, RejectsEmptyRangeLikeNumpy) {
  Pcg64 gen(0);
  EXPECT_THROW(generator_integers_i64(gen, 0, 0, 3), Error);
  EXPECT_THROW(generator_integers_i64(gen, 5, 2, 1), Error);
  EXPECT_THROW(numpy_default_rng_integers(0, -4, 1), Error);
  // numpy returns an empty array for size 0 before looking at the bounds.
  EXPECT_TRUE(generator_integers_i64(gen, 0, 0, 0).empty());
}

TEST(NumpyRng, FullUnsignedRangeUsesRawDraws) {
  // rng == 2^64 - 1 is reachable only through bounded_u64_fill (endpoint=True in numpy).
  Pcg64 a(3), b(3);
  std::vector<uint64_t> out(6);
  bounded_u64_fill(a, 0, UINT64_MAX, out);
  for (uint64_t v : out) EXPECT_EQ(v, b.next_u64());
}
