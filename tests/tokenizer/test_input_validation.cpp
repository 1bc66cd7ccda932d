// Input validation at the tokenizer and chat-encoding boundary: text that is not UTF-8 is an
// Error naming the byte offset (it used to reach PCRE2 with PCRE2_NO_UTF_CHECK and crash);
// the early-stopping encode and the byte bound agree with the full encode; JSON nested
// deeper than kMaxJsonDepth is an Error before anything recurses on it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/json_input.h"
#include "tokenizer/chat_encoding.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

using namespace deepinfer;
using namespace deepinfer::tokenizer;
using ::testing::HasSubstr;

namespace {

const Tokenizer& fixture_tokenizer() {
  static auto t = Tokenizer::load(std::string(DEEPINFER_TEST_DATA) + "/v41/full/tokenizer.json");
  return *t;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

struct BadUtf8 {
  std::string text;
  size_t offset;
};

// Each kind of ill-formed sequence, at a known offset.
const std::vector<BadUtf8> kBad = {
    {"\xff", 0},                       // never a UTF-8 byte
    {"ab\xfe", 2},                     //
    {"ok \x80 there", 3},              // stray continuation byte
    {"\xc0\xaf", 0},                   // overlong '/'
    {"x\xc1\xbf", 1},                  // overlong
    {"\xe0\x80\x80", 0},               // overlong NUL in three bytes
    {"caf\xc3", 3},                    // truncated at the end
    {"\xe2\x82", 0},                   // truncated three-byte sequence
    {"\xe2\x82z", 0},                  // interrupted sequence
    {"a\xed\xa0\x80", 1},              // a surrogate (U+D800)
    {"\xed\xbf\xbf", 0},               // U+DFFF
    {"\xf4\x90\x80\x80", 0},           // past U+10FFFF
    {"\xf5\x80\x80\x80", 0},           //
    {"\xf0\x8f\xbf\xbf", 0},           // overlong four-byte
    {"h\xc3\xa9llo \xe2\x82\xac\xff", 10},  // valid multibyte, then a bad byte
};

}  // namespace

TEST(InputUtf8, FindInvalidUtf8ReportsTheFirstBadByte) {
  for (const auto& b : kBad) {
    SCOPED_TRACE(b.text);
    EXPECT_EQ(find_invalid_utf8(b.text), b.offset);
  }
  for (const std::string& ok : std::vector<std::string>{"", "plain", "h\xc3\xa9llo", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "\xf4\x8f\xbf\xbf",
                               "\xef\xbf\xbd", std::string("nul\0inside", 10), "\xed\x9f\xbf"})
    EXPECT_EQ(find_invalid_utf8(ok), std::string::npos) << ok;
}

TEST(InputUtf8, EncodeRejectsInvalidUtf8WithTheOffset) {
  const Tokenizer& tok = fixture_tokenizer();
  for (const auto& b : kBad) {
    SCOPED_TRACE(b.text);
    for (bool add : {false, true}) {
      const std::string err = error_of([&] { tok.encode(b.text, add); });
      EXPECT_THAT(err, HasSubstr("text: invalid UTF-8 at byte offset " + std::to_string(b.offset)));
    }
  }
  // Added tokens around the bad byte do not hide it.
  const std::string bos = "<\xEF\xBD\x9C" "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>";
  EXPECT_THAT(error_of([&] { tok.encode(bos + "\xff" + bos); }), HasSubstr("byte offset " + std::to_string(bos.size())));
  // Valid text still encodes.
  EXPECT_FALSE(tok.encode("h\xc3\xa9llo \xf0\x9f\x98\x80").empty());
}

TEST(InputUtf8, CheckUtf8NamesTheField) {
  EXPECT_THAT(error_of([] { check_utf8("abc\xc3(", "messages[2].content"); }),
              HasSubstr("messages[2].content: invalid UTF-8 at byte offset 3 (byte 0xC3)"));
  EXPECT_EQ(error_of([] { check_utf8("fine", "x"); }), "");
}

TEST(InputLimits, EncodeWithALimitStopsEarlyAndAgreesBelowIt) {
  const Tokenizer& tok = fixture_tokenizer();
  std::string text;
  for (int i = 0; i < 400; ++i) text += "word" + std::to_string(i) + " ";
  const std::vector<int32_t> full = tok.encode(text, true);
  ASSERT_GT(full.size(), 100u);
  EXPECT_EQ(tok.encode(text, true, full.size()), full);       // exactly at the limit: the same ids
  EXPECT_EQ(tok.encode(text, true, full.size() + 50), full);  // above it
  const std::vector<int32_t> cut = tok.encode(text, true, 100);
  EXPECT_GT(cut.size(), 100u);                                // past the limit: says so
  EXPECT_LT(cut.size(), full.size());                         // without encoding all of it
}

TEST(InputLimits, ByteBoundNeverRejectsTextThatFits) {
  const Tokenizer& tok = fixture_tokenizer();
  ASSERT_GE(tok.max_token_bytes(), 1u);
  const auto bound = tok.max_bytes_for(10);
  ASSERT_TRUE(bound.has_value());  // the fixture has no normaliser and no stripping added tokens
  EXPECT_EQ(*bound, 10 * tok.max_token_bytes());
  // Texts of every length up to the bound that encode to <= 10 tokens are within it, and a
  // text longer than it encodes to more than 10 tokens.
  for (const std::string piece : {"a", "hello ", "\xe2\x82\xac", " the", "0"}) {
    std::string t;
    while (t.size() <= *bound + 8) {
      t += piece;
      const size_t n = tok.encode(t).size();
      if (t.size() > *bound) {
        EXPECT_GT(n, 10u) << t.size();
      }
      if (n <= 10) {
        EXPECT_LE(t.size(), *bound);
      }
    }
  }
}

TEST(InputJsonDepth, TextAndValueDepth) {
  EXPECT_EQ(json_text_depth("1"), 0u);
  EXPECT_EQ(json_text_depth("[]"), 1u);
  EXPECT_EQ(json_text_depth("{\"a\":[{}]}"), 3u);
  EXPECT_EQ(json_text_depth("[\"[[[[\\\"[[\"]"), 1u);  // brackets in strings, escaped quotes
  EXPECT_EQ(json_text_depth(std::string(100000, '['), 10), 11u);  // stops early
  nlohmann::ordered_json v = 1;
  for (int i = 0; i < 200; ++i) v = nlohmann::ordered_json::array({v});
  EXPECT_EQ(json_value_depth(v, 1000), 200u);
  EXPECT_THAT(error_of([&] { check_json_depth(v, "tools"); }), HasSubstr("tools: JSON nested deeper than 128 levels"));
  EXPECT_THAT(error_of([] { parse_json_input(std::string(5000, '[') + std::string(5000, ']'), "messages"); }),
              HasSubstr("messages: JSON nested deeper than 128 levels"));
  EXPECT_THAT(error_of([] { parse_json_input("[1,", "messages"); }), HasSubstr("messages: invalid JSON"));
  EXPECT_EQ(json_value_depth(parse_json_input(std::string(128, '[') + std::string(128, ']'), "m")), 128u);
}

TEST(InputJsonDepth, ChatEncodingRejectsDeepValuesBeforeRecursing) {
  using Json = nlohmann::ordered_json;
  // Deep tool-call arguments given as JSON text: 100,000 levels would overflow the stack.
  std::string args;
  for (int i = 0; i < 100000; ++i) args += "{\"a\":";
  args += '1';
  args.append(100000, '}');
  Json msgs = Json::array();
  msgs.push_back({{"role", "user"}, {"content", "hi"}});
  msgs.push_back({{"role", "assistant"},
                  {"content", ""},
                  {"tool_calls", Json::array({{{"type", "function"}, {"function", {{"name", "f"}, {"arguments", args}}}}})}});
  EXPECT_THAT(error_of([&] { encode_chat(msgs); }),
              HasSubstr("messages[1].tool_calls[0].function.arguments: JSON nested deeper than 128 levels"));
  // Deep content blocks, built as a value (parsing is iterative; the checks recurse).
  Json deep = "x";
  for (int i = 0; i < 1000; ++i) deep = Json::array({deep});
  Json m2 = Json::array({{{"role", "user"}, {"content", deep}}});
  EXPECT_THAT(error_of([&] { encode_chat(m2); }), HasSubstr("chat messages: JSON nested deeper than 128 levels"));
  ChatOptions o;
  o.tools = Json::array({deep});
  EXPECT_THAT(error_of([&] { encode_chat(Json::array({{{"role", "user"}, {"content", "hi"}}}), o); }),
              HasSubstr("options.tools: JSON nested deeper than 128 levels"));
  // Invalid UTF-8 in a role, content or tool list is an Error too.
  EXPECT_THAT(error_of([&] { encode_chat(Json::array({{{"role", "us\xff"}, {"content", "hi"}}})); }), HasSubstr("messages[0]"));
  EXPECT_THAT(error_of([&] { encode_chat(Json::array({{{"role", "user"}, {"content", "h\xc3"}}})); }), HasSubstr("UTF-8"));
}
