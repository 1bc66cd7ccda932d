// validate(SamplingParams) and to_string(FinishReason): every invalid field is named.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "deepinfer/outputs.h"
#include "deepinfer/sampling_params.h"

using namespace deepinfer;

namespace {

struct Case {
  const char* field;  // expected in the message
  std::function<void(SamplingParams&)> edit;
};

const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

}  // namespace

TEST(Validate, DefaultsAndBoundariesAreAccepted) {
  EXPECT_EQ(validate(SamplingParams{}), "");
  SamplingParams p;
  p.n = 1024;
  p.max_tokens = 1;
  p.min_tokens = 1;
  p.temperature = 0.0f;
  p.top_k = -1;
  p.top_p = 1.0f;
  p.min_p = 1.0f;
  p.repetition_penalty = 0.01f;
  p.presence_penalty = -2.0f;
  p.frequency_penalty = 2.0f;
  p.stop = {"x"};
  p.stop_token_ids = {0, 99};
  p.logprobs = 20;
  p.seed = ~0ull;
  EXPECT_EQ(validate(p, 100), "");
  p.top_k = 0;
  p.min_p = 0.0f;
  p.logprobs = 0;
  p.presence_penalty = 2.0f;
  p.frequency_penalty = -2.0f;
  EXPECT_EQ(validate(p, 100), "");
  p.stop_token_ids = {1000000};
  EXPECT_EQ(validate(p, 0), "") << "vocab <= 0 skips the upper bound";
}

TEST(Validate, EachInvalidFieldIsNamed) {
  const std::vector<Case> cases = {
      {"n", [](SamplingParams& p) { p.n = 0; }},
      {"n", [](SamplingParams& p) { p.n = 1025; }},
      {"max_tokens", [](SamplingParams& p) { p.max_tokens = 0; }},
      {"min_tokens", [](SamplingParams& p) { p.min_tokens = -1; }},
      {"min_tokens", [](SamplingParams& p) { p.min_tokens = 17; }},  // > max_tokens (16)
      {"temperature", [](SamplingParams& p) { p.temperature = -0.1f; }},
      {"temperature", [](SamplingParams& p) { p.temperature = kNaN; }},
      {"temperature", [](SamplingParams& p) { p.temperature = kInf; }},
      {"top_k", [](SamplingParams& p) { p.top_k = -2; }},
      {"top_p", [](SamplingParams& p) { p.top_p = 0.0f; }},
      {"top_p", [](SamplingParams& p) { p.top_p = 1.5f; }},
      {"top_p", [](SamplingParams& p) { p.top_p = kNaN; }},
      {"min_p", [](SamplingParams& p) { p.min_p = -0.1f; }},
      {"min_p", [](SamplingParams& p) { p.min_p = 1.1f; }},
      {"min_p", [](SamplingParams& p) { p.min_p = kNaN; }},
      {"repetition_penalty", [](SamplingParams& p) { p.repetition_penalty = 0.0f; }},
      {"repetition_penalty", [](SamplingParams& p) { p.repetition_penalty = -1.0f; }},
      {"repetition_penalty", [](SamplingParams& p) { p.repetition_penalty = kNaN; }},
      {"repetition_penalty", [](SamplingParams& p) { p.repetition_penalty = kInf; }},
      {"presence_penalty", [](SamplingParams& p) { p.presence_penalty = 2.5f; }},
      {"presence_penalty", [](SamplingParams& p) { p.presence_penalty = -2.5f; }},
      {"presence_penalty", [](SamplingParams& p) { p.presence_penalty = kNaN; }},
      {"frequency_penalty", [](SamplingParams& p) { p.frequency_penalty = 3.0f; }},
      {"frequency_penalty", [](SamplingParams& p) { p.frequency_penalty = kNaN; }},
      {"stop[1]", [](SamplingParams& p) { p.stop = {"a", ""}; }},
      {"stop_token_ids[0]", [](SamplingParams& p) { p.stop_token_ids = {-1}; }},
      {"stop_token_ids[1]", [](SamplingParams& p) { p.stop_token_ids = {5, 100}; }},
      {"logprobs", [](SamplingParams& p) { p.logprobs = -1; }},
      {"logprobs", [](SamplingParams& p) { p.logprobs = 21; }},
  };
  for (const Case& c : cases) {
    SamplingParams p;
    c.edit(p);
    const std::string msg = validate(p, 100);
    EXPECT_NE(msg.find(std::string("SamplingParams.") + c.field), std::string::npos)
        << "field " << c.field << ": got \"" << msg << "\"";
    EXPECT_NE(msg.find("expected"), std::string::npos) << msg;
  }
}

TEST(Validate, MessageGivesTheRange) {
  SamplingParams p;
  p.top_p = 0.0f;
  EXPECT_EQ(validate(p), "SamplingParams.top_p = 0 is invalid: expected 0 < top_p <= 1");
  p = SamplingParams{};
  p.stop_token_ids = {7, 128};
  EXPECT_EQ(validate(p, 128), "SamplingParams.stop_token_ids[1] = 128 is invalid: expected a token id in [0, 128)");
}

TEST(FinishReason, Names) {
  EXPECT_STREQ(to_string(FinishReason::kNone), "none");
  EXPECT_STREQ(to_string(FinishReason::kStop), "stop");
  EXPECT_STREQ(to_string(FinishReason::kLength), "length");
  EXPECT_STREQ(to_string(FinishReason::kError), "error");
}
