// run-batch lines (api::parse_batch_line): every field's type and range, null as absent, the
// line-size and JSON-depth limits, invalid UTF-8; each bad line is an error naming the field
// and the value, and never throws. Plus the deterministic mini-fuzz of the line parser (the
// CI counterpart of fuzz_batch_line).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "api/batch_file.h"
#include "fuzz/input_fuzz.h"

using namespace deepinfer;
using ::testing::HasSubstr;

namespace {

Request parse_body(const std::string& body_fields) {
  return api::parse_batch_line("{\"custom_id\":\"c\",\"body\":{\"prompt\":\"hi\"" + body_fields + "}}", 3);
}

struct BadCase {
  std::string fields, expect;
};

}  // namespace

TEST(BatchLine, WrongTypesAndRangesNameTheFieldAndValue) {
  const std::vector<BadCase> cases = {
      {",\"top_logprobs\":\"abc\",\"logprobs\":true", "body.top_logprobs: expected an integer, got \"abc\""},
      {",\"top_logprobs\":\"abc\"", "body.top_logprobs: expected an integer, got \"abc\""},
      {",\"top_logprobs\":3", "body.top_logprobs: needs \"logprobs\": true"},
      {",\"logprobs\":false,\"top_logprobs\":2", "body.top_logprobs: needs"},
      {",\"top_logprobs\":21,\"logprobs\":true", "body.top_logprobs: must be in [0, 20], got 21"},
      {",\"logprobs\":\"5\"", "body.logprobs: expected an integer or a boolean, got \"5\""},
      {",\"logprobs\":-1", "body.logprobs: must be in [0, 20], got -1"},
      {",\"n\":2.0", "body.n: expected an integer, got 2.0"},
      {",\"n\":\"2\"", "body.n: expected an integer, got \"2\""},
      {",\"n\":0", "body.n: must be in [1, 1024], got 0"},
      {",\"n\":1025", "body.n: must be in [1, 1024], got 1025"},
      {",\"max_tokens\":4294967297", "body.max_tokens: must be in [1, 2147483647], got 4294967297"},
      {",\"max_tokens\":18446744073709551615", "body.max_tokens: must be in [1, 2147483647], got 18446744073709551615"},
      {",\"max_tokens\":-9223372036854775808", "body.max_tokens: must be in [1, 2147483647], got -9223372036854775808"},
      {",\"max_completion_tokens\":0", "body.max_completion_tokens: must be in [1, 2147483647], got 0"},
      {",\"min_tokens\":-1", "body.min_tokens: must be in [0, 2147483647], got -1"},
      {",\"top_k\":-2", "body.top_k: must be in [-1, 2147483647], got -2"},
      {",\"top_k\":3000000000", "body.top_k: must be in [-1, 2147483647], got 3000000000"},
      {",\"seed\":-1", "body.seed: must be in [0, 18446744073709551615], got -1"},
      {",\"seed\":1.5", "body.seed: expected an integer, got 1.5"},
      {",\"seed\":\"7\"", "body.seed: expected an integer, got \"7\""},
      {",\"temperature\":1e300", "body.temperature: out of range, got 1e+300"},
      {",\"temperature\":\"hot\"", "body.temperature: expected a number, got \"hot\""},
      {",\"top_p\":[1]", "body.top_p: expected a number, got [1]"},
      {",\"presence_penalty\":-1e39", "body.presence_penalty: out of range"},
      {",\"ignore_eos\":1", "body.ignore_eos: expected true or false, got 1"},
      {",\"skip_special_tokens\":\"false\"", "body.skip_special_tokens: expected true or false, got \"false\""},
      {",\"stream\":\"yes\"", "body.stream: expected true or false, got \"yes\""},
      {",\"stream\":true", "body.stream: streaming is not available"},
      {",\"stop\":5", "body.stop: expected a string or a list of strings, got 5"},
      {",\"stop\":[\"a\",null]", "body.stop[1]: expected a string, got null"},
      {",\"stop_token_ids\":[1,-4]", "body.stop_token_ids[1]: token id -4 is out of range"},
      {",\"stop_token_ids\":[1,2147483648]", "body.stop_token_ids[1]: token id 2147483648 is out of range"},
      {",\"stop_token_ids\":\"1,2\"", "body.stop_token_ids: expected a list of token ids"},
      {",\"model\":5", "body.model: expected a string, got 5"},
      {",\"user\":{}", "body.user: expected a string, got {}"},
      {",\"reasoning_effort\":3", "body.reasoning_effort: expected a string, got 3"},
      {",\"thinking\":\"yes\"", "body.thinking: expected true or false, got \"yes\""},
      {",\"chat_template_kwargs\":[]", "body.chat_template_kwargs: expected an object, got []"},
      {",\"chat_template_kwargs\":{\"thinking\":1}", "body.chat_template_kwargs.thinking: expected true or false, got 1"},
      {",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":5}}", "body.response_format.json_schema.schema"},
      {",\"guided_regex\":\"\"", "body.guided_regex: expected a non-empty string"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.fields);
    const Request r = parse_body(c.fields);
    EXPECT_THAT(r.error, HasSubstr(c.expect));
    EXPECT_EQ(r.request_id, "c");
  }
  // Token ids in a prompt list.
  EXPECT_THAT(api::parse_batch_line(R"({"body":{"prompt":[1,-3]}})", 1).error, HasSubstr("body.prompt[1]: token id -3 is out of range"));
  EXPECT_THAT(api::parse_batch_line(R"({"body":{"prompt_token_ids":[1,4294967296]}})", 1).error,
              HasSubstr("body.prompt_token_ids[1]: token id 4294967296 is out of range"));
  EXPECT_THAT(api::parse_batch_line(R"({"body":{"prompt_token_ids":[1,2.5]}})", 1).error,
              HasSubstr("body.prompt_token_ids[1]: expected an integer token id, got 2.5"));
}

TEST(BatchLine, NullMeansNotGiven) {
  const Request r = parse_body(
      ",\"max_tokens\":null,\"n\":null,\"seed\":null,\"stop\":null,\"temperature\":null,\"logprobs\":null,"
      "\"top_logprobs\":null,\"stream\":null,\"model\":null,\"response_format\":null,\"guided_json\":null,"
      "\"stop_token_ids\":null,\"chat_template_kwargs\":{\"thinking\":null}");
  EXPECT_EQ(r.error, "");
  EXPECT_EQ(r.params.max_tokens, SamplingParams{}.max_tokens);
  EXPECT_EQ(r.params.n, 1);
  EXPECT_FALSE(r.params.seed.has_value());
  EXPECT_FALSE(r.params.logprobs.has_value());
  EXPECT_FALSE(r.params.structured_output.has_value());
  // structured_outputs null next to a guided_json: the guided_json is used.
  const Request g = parse_body(",\"structured_outputs\":null,\"guided_json\":{\"type\":\"object\"}");
  EXPECT_EQ(g.error, "");
  ASSERT_TRUE(g.params.structured_output.has_value());
  // Values at the edges of their ranges are accepted.
  const Request e = parse_body(",\"seed\":18446744073709551615,\"max_tokens\":2147483647,\"top_k\":-1,\"n\":1024,"
                               "\"logprobs\":true,\"top_logprobs\":20,\"temperature\":3.4e38");
  EXPECT_EQ(e.error, "");
  EXPECT_EQ(*e.params.seed, 18446744073709551615ull);
  EXPECT_EQ(*e.params.logprobs, 20);
}

TEST(BatchLine, DeepJsonFailsAloneWithoutRecursing) {
  for (const std::string where : {"messages", "response_format", "guided_json", "tools_in_messages"}) {
    SCOPED_TRACE(where);
    std::string deep = std::string(200000, '[') + std::string(200000, ']');
    std::string line;
    if (where == "messages") line = R"({"custom_id":"d","body":{"messages":)" + deep + "}}";
    else if (where == "response_format")
      line = R"({"custom_id":"d","body":{"prompt":"x","response_format":{"type":"json_schema","json_schema":{"schema":{"items":)" + deep + "}}}}}";
    else if (where == "guided_json") line = R"({"custom_id":"d","body":{"prompt":"x","guided_json":)" + deep + "}}";
    else line = R"({"custom_id":"d","body":{"messages":[{"role":"system","content":"s","tools":)" + deep + "}]}}";
    const Request r = api::parse_batch_line(line, 12);
    EXPECT_EQ(r.error, "line 12: JSON nested deeper than 128 levels");
  }
  // 128 levels in the whole line (the line, body and guided_json objects count) are fine; 129 are not.
  auto nested = [](int levels) { return std::string(static_cast<size_t>(levels) - 3, '[') + std::string(static_cast<size_t>(levels) - 3, ']'); };
  EXPECT_EQ(api::parse_batch_line(R"({"body":{"prompt":"x","guided_json":{"default":)" + nested(128) + "}}}", 1).error, "");
  EXPECT_THAT(api::parse_batch_line(R"({"body":{"prompt":"x","guided_json":{"default":)" + nested(129) + "}}}", 1).error,
              HasSubstr("nested deeper than 128"));
  // Brackets inside strings do not count.
  EXPECT_EQ(api::parse_batch_line(R"({"body":{"prompt":")" + std::string(1000, '[') + "\"}}", 1).error, "");
}

TEST(BatchLine, LineSizeAndUtf8) {
  std::string big = R"({"custom_id":"big","body":{"prompt":")" + std::string(api::kMaxBatchLineBytes, 'a') + "\"}}";
  EXPECT_THAT(api::parse_batch_line(big, 5).error, HasSubstr("line 5: " + std::to_string(big.size()) + " bytes, more than the limit of"));
  EXPECT_EQ(api::parse_batch_line("{\"custom_id\":\"u\",\"body\":{\"prompt\":\"ab\xff\"}}", 9).error,
            "line 9: invalid UTF-8 at byte offset 37");
  EXPECT_THAT(api::parse_batch_line("{\"custom_id\":\"u\xc3\",\"body\":{\"prompt\":\"ab\"}}", 9).error, HasSubstr("line 9: invalid UTF-8 at byte offset 15"));
}

TEST(BatchLine, MiniFuzzOfTheLineParser) {
  std::mt19937_64 rng(2024);
  const std::vector<std::string> seeds = {
      R"({"custom_id":"a","body":{"prompt":"hi","max_tokens":3,"temperature":0.5,"stop":["x","y"],"seed":9}})",
      R"({"custom_id":"b","body":{"prompt_token_ids":[1,2,3],"n":2,"logprobs":true,"top_logprobs":2}})",
      R"({"custom_id":"c","body":{"messages":[{"role":"user","content":"hi"}],"thinking":true,"reasoning_effort":"low"}})",
      R"({"custom_id":"d","body":{"prompt":"x","response_format":{"type":"json_schema","json_schema":{"name":"n","schema":{"type":"object"}}}}})",
      R"({"custom_id":"e","body":{"prompt":"x","structured_outputs":{"regex":"[a-z]+","disable_any_whitespace":true}}})"};
  static const char* kTokens[] = {"{", "}", "[", "]", "\"", "\\", ",", ":", "null", "true", "-1", "1e400", "18446744073709551616",
                                  "2.0", "\xff", "\xc3", "\\ud800", "\"n\":", "\"max_tokens\":", "\"body\":", "[[[[[[[[", "0"};
  int accepted = 0;
  for (int i = 0; i < 5000; ++i) {
    std::string s = seeds[rng() % seeds.size()];
    const int n = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < n; ++k) {
      const size_t pos = rng() % (s.size() + 1);
      switch (rng() % 4) {
        case 0: if (pos < s.size()) s[pos] = static_cast<char>(rng() % 256); break;
        case 1: s.insert(pos, kTokens[rng() % (sizeof kTokens / sizeof *kTokens)]); break;
        case 2: if (pos < s.size()) s.erase(pos, 1 + rng() % std::min<size_t>(6, s.size() - pos)); break;
        default: if (pos < s.size()) s.insert(pos, s.substr(pos, 1 + rng() % 12));
      }
    }
    const std::string bug = fuzz::check_batch_line(s);
    ASSERT_EQ(bug, "") << "line: " << testing::PrintToString(s);
    accepted += api::parse_batch_line(s, 1).error.empty();
  }
  EXPECT_GT(accepted, 100);
}
