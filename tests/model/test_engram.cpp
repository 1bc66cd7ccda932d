// Engram: the compressed token map against the reference's (both tokenizers), the released
// bucket layout, and hashing across chunks.
#include <gtest/gtest.h>

#include <fstream>

#include "core/error.h"
#include "core/npy.h"
#include "loader/config.h"
#include "model/engram.h"
#include "tokenizer/engram_map.h"
#include "tokenizer/tokenizer.h"

using namespace deepinfer;

namespace {
std::string data(const std::string& rel) { return std::string(DEEPINFER_TEST_DATA) + "/" + rel; }

void check_map(const std::string& name, int32_t expect_keys) {
  auto tok = tokenizer::Tokenizer::load(data("tokenizer/" + name + "/tokenizer.json"));
  auto m = tokenizer::build_engram_token_map(*tok);
  std::vector<int64_t> ref = core::read_npy_ints(data("tokenizer/" + name + "/engram_map.npy"));
  ASSERT_EQ(m.map.size(), ref.size());
  EXPECT_EQ(m.n_keys, expect_keys);
  // Keys in compressed-id order, from the reference's normalizers.
  std::ifstream keys(data("tokenizer/" + name + "/engram_keys.jsonl"));
  std::vector<std::string> ref_keys;
  for (std::string line; std::getline(keys, line);) ref_keys.push_back(line);
  int mismatches = 0;
  for (size_t i = 0; i < ref.size() && mismatches < 10; ++i) {
    if (m.map[i] != ref[i]) {
      ++mismatches;
      const int32_t one[1] = {static_cast<int32_t>(i)};
      ADD_FAILURE() << name << ": token " << i << " '" << tok->decode(one) << "' -> " << m.map[i] << ", reference "
                    << ref[i] << " (key " << (ref[i] < static_cast<int64_t>(ref_keys.size()) ? ref_keys[ref[i]] : "?")
                    << ", ours '" << tokenizer::engram_normalize(tok->decode(one)) << "')";
    }
  }
}
}  // namespace

TEST(Engram, FixtureTokenMapMatchesReference) { check_map("fixture", 756); }

TEST(Engram, DeepSeekTokenMapMatchesReference) { check_map("deepseek", 99092); }

TEST(Engram, ReleasedBucketLayout) {
  auto c = loader::parse_config(R"({"engram_layer_ids": [1, 14], "engram_num_embeddings": [384006168, 384016682]})", "released");
  std::vector<int32_t> map(static_cast<size_t>(c.vocab_size));
  for (size_t i = 0; i < map.size(); ++i) map[i] = static_cast<int32_t>(i % 99092);
  model::EngramHasher h(c, map, 99092);
  ASSERT_EQ(h.primes().size(), 2u);
  // Spec section 3.9: consecutive primes from 16,000,057, never reused.
  EXPECT_EQ(h.primes()[0][0], 16000057);
  EXPECT_EQ(h.primes()[0][7], 16000183);
  EXPECT_EQ(h.primes()[0][8], 16000189);
  EXPECT_EQ(h.primes()[0][23], 16000463);
  EXPECT_EQ(h.primes()[1][0], 16000477);
  EXPECT_EQ(h.primes()[1][23], 16000889);
  int64_t s0 = 0, s1 = 0;
  for (int64_t p : h.primes()[0]) s0 += p;
  for (int64_t p : h.primes()[1]) s1 += p;
  EXPECT_EQ(s0, 384006168);
  EXPECT_EQ(s1, 384016682);
  // Multipliers are odd and bounded so id * multiplier cannot overflow.
  for (const auto& row : h.multipliers())
    for (int64_t m : row) {
      EXPECT_EQ(m % 2, 1);
      EXPECT_LE(m, 2 * 46539438283891 + 1);
    }
  // A wrong row count or compressed vocabulary is a clear load error.
  auto bad = loader::parse_config(R"({"engram_layer_ids": [1, 14], "engram_num_embeddings": [384006168, 5]})", "bad");
  EXPECT_THROW(model::EngramHasher(bad, map, 99092), Error);
  EXPECT_THROW(model::EngramHasher(c, map, 99091), Error);
}

TEST(Engram, HashingIsIndependentOfChunking) {
  auto c = loader::parse_config(R"({"engram_layer_ids": [1, 14], "engram_num_embeddings": [384006168, 384016682]})", "released");
  std::vector<int32_t> map(static_cast<size_t>(c.vocab_size));
  for (size_t i = 0; i < map.size(); ++i) map[i] = static_cast<int32_t>(i % 99092);
  model::EngramHasher h(c, map, 99092);
  std::vector<int64_t> toks = {5, 99, 12, 7, 7, 100000, 3}, pos(toks.size());
  for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int64_t>(i);
  const int64_t w = h.n_layers() * h.n_cols();
  std::vector<int64_t> one(toks.size() * static_cast<size_t>(w)), split(one.size());
  std::vector<int32_t> hist1, hist2;
  h.hash(toks.data(), pos.data(), 7, hist1, one.data());
  h.hash(toks.data(), pos.data(), 3, hist2, split.data());
  h.hash(toks.data() + 3, pos.data() + 3, 4, hist2, split.data() + 3 * w);
  EXPECT_EQ(one, split);
  // Position 0's bigram pads its missing history; bucket ids land inside each layer's table.
  for (size_t i = 0; i < one.size(); ++i) {
    const size_t layer = (i / static_cast<size_t>(h.n_cols())) % 2;
    EXPECT_GE(one[i], 0);
    EXPECT_LT(one[i], layer == 0 ? 384006168 : 384016682);
  }
  // A DEAD entry (a position never written) blocks every longer look-back.
  std::vector<int32_t> hist3 = {static_cast<int32_t>(map[5]), model::EngramHasher::kDead};
  std::vector<int64_t> t2 = {12}, p2 = {2}, out(static_cast<size_t>(w)), ref(static_cast<size_t>(w));
  h.hash(t2.data(), p2.data(), 1, hist3, out.data());
  std::vector<int32_t> hist4;
  std::vector<int64_t> p0 = {0};
  h.hash(t2.data(), p0.data(), 1, hist4, ref.data());  // at position 0 every look-back is padded
  EXPECT_EQ(out, ref);
}
