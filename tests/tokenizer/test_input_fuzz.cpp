// Deterministic mini-fuzz of the input paths (the CI counterpart of fuzz_tokenizer_encode and
// fuzz_chat_encoding): a few thousand fixed-seed mutations of text and conversations. Each
// must encode or fail with deepinfer::Error naming the first bad byte; see fuzz/input_fuzz.h.
#include <gtest/gtest.h>

#include <random>

#include "fuzz/input_fuzz.h"

using namespace deepinfer;

namespace {

const tokenizer::Tokenizer& fixture_tokenizer() {
  static auto t = tokenizer::Tokenizer::load(std::string(DEEPINFER_TEST_DATA) + "/v41/full/tokenizer.json");
  return *t;
}

std::string mutate_text(std::string s, std::mt19937_64& rng) {
  static const char* kPieces[] = {"\xff", "\xc3", "\xc3\xa9", "\xe2\x82", "\xe2\x82\xac", "\xed\xa0\x80", "\xf0\x9f\x98\x80",
                                  "\xf4\x90\x80\x80", "\xc0\xaf", " ", "\n\n", "'s", "123", "<\xEF\xBD\x9C" "User\xEF\xBD\x9C>",
                                  "<think>", "\xe3\x80\x80", "\t", std::string("\0", 1).c_str()};
  const int n = 1 + static_cast<int>(rng() % 4);
  for (int k = 0; k < n; ++k) {
    const size_t pos = s.empty() ? 0 : rng() % (s.size() + 1);
    switch (rng() % 4) {
      case 0:
        if (pos < s.size()) s[pos] = static_cast<char>(rng() % 256);
        break;
      case 1:
        s.insert(pos, kPieces[rng() % (sizeof kPieces / sizeof *kPieces)]);
        break;
      case 2:
        if (pos < s.size()) s.erase(pos, 1 + rng() % std::min<size_t>(5, s.size() - pos));
        break;
      default:
        s.insert(pos, 1, static_cast<char>(rng() % 128));
    }
  }
  return s;
}

}  // namespace

TEST(InputMiniFuzz, TokenizerEncodeOnMutatedBytes) {
  const auto& tok = fixture_tokenizer();
  std::mt19937_64 rng(41);
  std::string s = "Hello, w\xc3\xb6rld! It's 2024: caf\xc3\xa9 \xe2\x82\xac 5.";
  int rejected = 0;
  for (int i = 0; i < 4000; ++i) {
    if (i % 4 == 0) s = i % 8 ? "The quick brown fox \xf0\x9f\xa6\x8a jumps." : "Hello, w\xc3\xb6rld! It's 2024: caf\xc3\xa9 \xe2\x82\xac 5.";
    s = mutate_text(s, rng);
    if (s.size() > 300) s.resize(rng() % 300);
    const std::string bug = fuzz::check_encode(tok, s);
    ASSERT_EQ(bug, "") << "input: " << testing::PrintToString(s);
    rejected += tokenizer::find_invalid_utf8(s) != std::string::npos;
  }
  EXPECT_GT(rejected, 200);   // the mutations reach both sides
  EXPECT_LT(rejected, 3800);
}

TEST(InputMiniFuzz, ChatEncodingOnConversationsFromBytes) {
  const auto& tok = fixture_tokenizer();
  std::mt19937_64 rng(7);
  int rendered = 0;
  for (int i = 0; i < 3000; ++i) {
    std::vector<uint8_t> bytes(8 + rng() % 120);
    for (auto& b : bytes) b = static_cast<uint8_t>(rng() % 4 == 0 ? rng() % 256 : 65 + rng() % 40);
    const std::string bug = fuzz::check_chat(tok, bytes.data(), bytes.size());
    ASSERT_EQ(bug, "") << "case " << i;
    tokenizer::ChatOptions o;
    try {
      (void)tokenizer::encode_chat(fuzz::messages_from_bytes(bytes.data(), bytes.size(), &o), o);
      ++rendered;
    } catch (const Error&) {
    }
  }
  EXPECT_GT(rendered, 100);  // not every case is an error
}
