// Per-request input limits through the public API: text that is not UTF-8 (prompts, chat
// roles and contents, stop strings, messages JSON), prompts longer than max_model_len, deep
// messages JSON: each fails its own request with a message naming the field, and the other
// requests of the batch complete.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "deepinfer/llm.h"
#include "engine/random_model.h"

using namespace deepinfer;
using ::testing::HasSubstr;

namespace {
EngineConfig limited_config(int64_t max_model_len) {
  EngineConfig c = testing_util::random_model_config(3);
  c.max_model_len = max_model_len;
  return c;
}
}  // namespace

TEST(RequestLimits, InvalidUtf8FailsAloneNamingTheField) {
  LLM llm(limited_config(0));
  SamplingParams ok;
  ok.max_tokens = 2;
  SamplingParams bad_stop = ok;
  bad_stop.stop = {"fine", "st\xc3"};
  std::vector<Request> reqs(7);
  reqs[0].prompt = Prompt::from_text("good one");
  reqs[1].prompt = Prompt::from_text("bad \xff text");
  reqs[2].messages = {{"user", "hi \xed\xa0\x80", ""}};
  reqs[3].messages = {{"us\xfe", "hi", ""}};
  reqs[4].prompt = Prompt::from_text("good two");
  reqs[5].messages_json = "[{\"role\":\"user\",\"content\":\"x\xc0\xaf\"}]";
  reqs[6].prompt = Prompt::from_text("stop strings");
  for (auto& r : reqs) r.params = ok;
  reqs[6].params = bad_stop;
  const auto outs = llm.run(reqs);
  ASSERT_EQ(outs.size(), 7u);
  EXPECT_EQ(outs[0].error, "");
  EXPECT_EQ(outs[0].outputs[0].token_ids.size(), 2u);
  EXPECT_EQ(outs[4].error, "");
  EXPECT_EQ(outs[4].outputs[0].token_ids.size(), 2u);
  EXPECT_THAT(outs[1].error, HasSubstr("prompt: invalid UTF-8 at byte offset 4 (byte 0xFF)"));
  EXPECT_THAT(outs[2].error, HasSubstr("messages[0].content: invalid UTF-8 at byte offset 3"));
  EXPECT_THAT(outs[3].error, HasSubstr("messages[0].role: invalid UTF-8 at byte offset 2"));
  EXPECT_THAT(outs[5].error, HasSubstr("messages"));
  EXPECT_THAT(outs[5].error, HasSubstr("UTF-8"));
  EXPECT_THAT(outs[6].error, HasSubstr("stop[1]: invalid UTF-8 at byte offset 2"));
  // generate() and chat() take the same path.
  auto g = llm.generate({Prompt::from_text("\x80"), Prompt::from_text("ok")}, ok);
  EXPECT_THAT(g[0].error, HasSubstr("prompt: invalid UTF-8 at byte offset 0"));
  EXPECT_EQ(g[1].error, "");
  auto c = llm.chat({{{"system", "sys \xf4\x90\x80\x80", ""}, {"user", "hi", ""}}, {{"user", "hello", ""}}}, ok);
  EXPECT_THAT(c[0].error, HasSubstr("messages[0].content: invalid UTF-8 at byte offset 4"));
  EXPECT_EQ(c[1].error, "");
}

TEST(RequestLimits, PromptLongerThanMaxModelLenFailsAlone) {
  LLM llm(limited_config(64));
  EXPECT_EQ(llm.max_model_len(), 64);
  SamplingParams p;
  p.max_tokens = 4;
  SamplingParams many = p;
  many.max_tokens = 60;
  std::string long_text;
  for (int i = 0; i < 200; ++i) {
    long_text += 'w';
    long_text += std::to_string(i);
    long_text += ' ';
  }
  std::vector<Request> reqs(6);
  reqs[0].prompt = Prompt::from_ids(std::vector<int32_t>(61, 7));  // 61 + 4 > 64
  reqs[1].prompt = Prompt::from_ids(std::vector<int32_t>(60, 7));  // 60 + 4 = 64: fits
  reqs[2].prompt = Prompt::from_text(long_text);                   // hundreds of tokens
  reqs[3].prompt = Prompt::from_text(std::string(1 << 20, 'a'));   // rejected on its bytes
  reqs[4].prompt = Prompt::from_ids({5, 6, 7, 8, 9});
  reqs[5].messages = {{"user", long_text, ""}};
  for (auto& r : reqs) r.params = p;
  reqs[4].params = many;  // 5 + 60 = 65 > 64
  const auto outs = llm.run(reqs);
  EXPECT_THAT(outs[0].error, HasSubstr("prompt too long: 61 prompt tokens + max_tokens 4 = 65 tokens, more than the maximum model length (max_model_len) = 64"));
  EXPECT_EQ(outs[1].error, "");
  EXPECT_EQ(outs[1].outputs[0].token_ids.size(), 4u);
  EXPECT_THAT(outs[2].error, HasSubstr("prompt too long: the prompt encodes to more than the maximum model length (max_model_len) = 64 tokens"));
  EXPECT_THAT(outs[3].error, HasSubstr("prompt too long: the prompt of 1048576 bytes"));
  EXPECT_THAT(outs[4].error, HasSubstr("5 prompt tokens + max_tokens 60 = 65 tokens"));
  EXPECT_THAT(outs[5].error, HasSubstr("prompt too long: the conversation encodes to more than"));
}

TEST(RequestLimits, MaxModelLenIsCheckedAgainstTheModel) {
  // The fixture's max_position_embeddings is 1024: longer is a configuration error; 0 takes it.
  EngineConfig c;
  c.model = std::string(DEEPINFER_TEST_DATA) + "/v41/full";
  c.threads = 1;
  c.max_model_len = 1025;
  try {
    LLM llm(c);
    ADD_FAILURE() << "max_model_len 1025 accepted";
  } catch (const Error& e) {
    EXPECT_THAT(std::string(e.what()), HasSubstr("EngineConfig.max_model_len = 1025 is longer than the model's max_position_embeddings = 1024"));
  }
  c.max_model_len = -1;
  EXPECT_THROW(LLM{c}, Error);
  c.max_model_len = 0;
  LLM llm(c);
  EXPECT_EQ(llm.max_model_len(), 1024);
  SamplingParams p;
  p.max_tokens = 2000;
  auto outs = llm.generate({Prompt::from_text("hi"), Prompt::from_ids({5, 6})}, {p, SamplingParams{}});
  EXPECT_THAT(outs[0].error, HasSubstr("max_tokens 2000"));
  EXPECT_EQ(outs[1].error, "");
}

TEST(RequestLimits, DeepMessagesJsonFailsAlone) {
  LLM llm(limited_config(0));
  std::vector<Request> reqs(3);
  reqs[0].messages_json = std::string(100000, '[') + std::string(100000, ']');
  reqs[1].prompt = Prompt::from_text("still runs");
  std::string args = "\"";
  for (int i = 0; i < 50000; ++i) args += "{\\\"a\\\":";
  args += '1';
  args.append(50000, '}');
  args += '"';
  reqs[2].messages_json = R"([{"role":"user","content":"q"},{"role":"assistant","content":"","tool_calls":[{"type":"function","function":{"name":"f","arguments":)" + args + "}}]}]";
  for (auto& r : reqs) r.params.max_tokens = 2;
  const auto outs = llm.run(reqs);
  EXPECT_THAT(outs[0].error, HasSubstr("messages: JSON nested deeper than 128 levels"));
  EXPECT_EQ(outs[1].error, "");
  EXPECT_THAT(outs[2].error, HasSubstr("messages[1].tool_calls[0].function.arguments: JSON nested deeper than 128 levels"));
}
