// States a request can reach that used to abort the process (internal checks) now fail that
// request alone with a clear message while the rest of the batch completes: a NaN in the
// logits (with and without a grammar, drawn on the host or the backend), an EOS id outside the vocabulary with min_tokens, a
// tokenizer larger than the model's vocabulary under a grammar.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <unistd.h>
#include <filesystem>
#include <functional>
#include <fstream>

#include <nlohmann/json.hpp>

#include "deepinfer/llm.h"
#include "engine/oracle_drafter.h"
#include "engine/random_model.h"
#include "loader/checkpoint.h"

using namespace deepinfer;
using ::testing::AllOf;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

namespace {

std::string temp_dir(const std::string& name) {
  const std::string d = ::testing::TempDir() + "/request_errors_" + name + "_" + std::to_string(::getpid());
  fs::create_directories(d);
  return d;
}

// The fixture checkpoint with the embedding row of `token` set to NaN: only sequences that
// contain the token get NaN hidden states and logits.
std::string nan_checkpoint(int32_t token) {
  const std::string d = temp_dir("nan");
  for (const auto& e : fs::directory_iterator(testing_util::fixture("full"))) {
    if (e.is_regular_file()) fs::copy_file(e.path(), d + "/" + e.path().filename().string(), fs::copy_options::overwrite_existing);
  }
  std::fstream f(d + "/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
  uint64_t n = 0;
  f.read(reinterpret_cast<char*>(&n), 8);
  std::string header(n, '\0');
  f.read(header.data(), static_cast<std::streamsize>(n));
  const auto h = nlohmann::json::parse(header);
  const auto& t = h.at("model.embed.weight");
  EXPECT_EQ(t.at("dtype"), "F32");
  const int64_t cols = t.at("shape")[1].get<int64_t>();
  const int64_t begin = t.at("data_offsets")[0].get<int64_t>();
  const uint32_t nan_bits = 0x7FC00000u;
  f.seekp(static_cast<std::streamoff>(8 + n + static_cast<uint64_t>(begin) + static_cast<uint64_t>(token * cols) * 4));
  for (int64_t c = 0; c < cols; ++c) f.write(reinterpret_cast<const char*>(&nan_bits), 4);
  return d;
}

// The random-weight test model with config.json changed by `edit`.
std::string random_model_with(const std::string& name, const std::function<void(nlohmann::json&)>& edit) {
  const std::string d = temp_dir(name);
  const std::string src = testing_util::random_model_dir();
  nlohmann::json c = nlohmann::json::parse(std::ifstream(src + "/config.json"));
  edit(c);
  std::ofstream(d + "/config.json") << c.dump(2);
  fs::copy_file(src + "/tokenizer.json", d + "/tokenizer.json", fs::copy_options::overwrite_existing);
  return d;
}

StructuredOutput regex(const std::string& pattern) { return StructuredOutput{StructuredOutput::Kind::kRegex, pattern, false}; }

}  // namespace

TEST(EngineRequestErrors, NanLogitsFailTheirRequestOnly) {
  constexpr int32_t kPoison = 7;
  EngineConfig cfg;
  cfg.model = nan_checkpoint(kPoison);
  cfg.threads = 2;
  LLM llm(cfg);
  SamplingParams grammar;
  grammar.max_tokens = 8;
  grammar.temperature = 1.0f;
  grammar.structured_output = regex("[a-z]{1,6}");
  SamplingParams plain;
  plain.max_tokens = 4;
  plain.n = 2;
  plain.temperature = 1.0f;
  plain.repetition_penalty = 1.1f;  // drawn by the sampler (a backend-drawn row returns no logits to check)
  SamplingParams on_backend;  // nothing precedes the draw: the backend draws, no logits come back
  on_backend.max_tokens = 4;
  on_backend.temperature = 1.0f;
  SamplingParams greedy = on_backend;
  greedy.temperature = 0.0f;
  auto outs = llm.generate({Prompt::from_ids({5, kPoison, 9}), Prompt::from_ids({5, 9}), Prompt::from_ids({kPoison}),
                            Prompt::from_ids({3, 4}), Prompt::from_ids({kPoison, 3}), Prompt::from_ids({6, 3}),
                            Prompt::from_ids({4, kPoison}), Prompt::from_ids({6, 4})},
                           {grammar, grammar, plain, plain, on_backend, on_backend, greedy, greedy});
  ASSERT_EQ(outs.size(), 8u);
  for (size_t r : {0u, 2u, 4u, 6u}) {
    EXPECT_THAT(outs[r].error, HasSubstr("NaN in the logits at step 0")) << r;
    EXPECT_THAT(outs[r].error, HasSubstr("the checkpoint's tensor 'embed.weight'")) << r;  // found, named
    EXPECT_TRUE(outs[r].finished);
  }
  for (size_t r : {4u, 6u}) EXPECT_THAT(outs[r].error, HasSubstr("drawn on the device")) << r;
  for (size_t r : {1u, 3u, 5u, 7u}) {
    EXPECT_EQ(outs[r].error, "") << r;
    ASSERT_FALSE(outs[r].outputs.empty()) << r;
    EXPECT_FALSE(outs[r].outputs[0].token_ids.empty()) << r;
  }
  EXPECT_EQ(outs[3].outputs.size(), 2u);
}

TEST(EngineRequestErrors, TheNonFiniteTensorIsFound) {
  // The scan a NaN error runs: the poisoned embedding row is named with its first element; the
  // fixtures (float32, and FP8 / MXFP4 with e8m0 scales) hold none.
  constexpr int32_t kPoison = 7;
  const auto ck = loader::Checkpoint::open(nan_checkpoint(kPoison));
  const int64_t cols = ck->config().hidden_size;
  EXPECT_THAT(loader::first_nonfinite_tensor(*ck),
              AllOf(HasSubstr("'embed.weight' ("), HasSubstr("element " + std::to_string(kPoison * cols) + " is nan")));
  for (const char* fx : {"full", "full-q"})
    EXPECT_EQ(loader::first_nonfinite_tensor(*loader::Checkpoint::open(testing_util::fixture(fx))), "") << fx;
}

TEST(EngineRequestErrors, EosOutsideTheVocabularyIsRefusedAtLoad) {
  // An eos_token_id the head cannot produce would make min_tokens unenforceable and EOS
  // undrawable: the config check names it before anything runs (the engine's own per-request
  // check stays as a second line for EOS ids that come from the tokenizer).
  EngineConfig cfg = testing_util::random_model_config(5);
  cfg.model = random_model_with("eos", [](nlohmann::json& c) { c["eos_token_id"] = 5000; });
  try {
    LLM llm(cfg);
    FAIL() << "an eos_token_id outside the vocabulary loaded";
  } catch (const std::exception& e) {
    EXPECT_THAT(e.what(), HasSubstr("eos_token_id"));
    EXPECT_THAT(e.what(), HasSubstr("5000"));
  }
}

TEST(EngineRequestErrors, TokenizerLargerThanTheVocabularyUnderAGrammar) {
  EngineConfig cfg = testing_util::random_model_config(6);
  cfg.model = random_model_with("vocab", [](nlohmann::json& c) { c["vocab_size"] = 512; });
  LLM llm(cfg);
  SamplingParams grammar;
  grammar.max_tokens = 6;
  grammar.structured_output = regex("[0-9]+");
  SamplingParams plain;
  plain.max_tokens = 3;
  auto outs = llm.generate({Prompt::from_ids({5, 9}), Prompt::from_ids({5, 9})}, {grammar, plain});
  ASSERT_EQ(outs.size(), 2u);
  EXPECT_THAT(outs[0].error, HasSubstr("structured_output: the tokenizer has"));
  EXPECT_THAT(outs[0].error, HasSubstr("vocab_size 512"));
  EXPECT_EQ(outs[1].error, "");
  ASSERT_EQ(outs[1].outputs.size(), 1u);
  EXPECT_EQ(outs[1].outputs[0].token_ids.size(), 3u);
}

// Speculative decoding: a NaN in a verify row fails the request exactly where plain decoding
// fails it (the tokens before it kept, the same message), and a NaN in a row past a rejected
// draft is never read.
TEST(EngineRequestErrors, NanRowsUnderSpeculationFailWherePlainDecodingFails) {
  SamplingParams greedy;
  greedy.temperature = 0;
  greedy.max_tokens = 10;
  greedy.ignore_eos = true;
  SamplingParams host = greedy;  // rows through the sampler
  host.repetition_penalty = 1.2f;
  SamplingParams sampled = greedy;
  sampled.temperature = 1.0f;
  sampled.seed = 3;
  const std::vector<SamplingParams> params{greedy, host, sampled};
  auto requests = [&] {
    std::vector<engine::EngineRequest> reqs;
    for (size_t i = 0; i < params.size(); ++i) {
      engine::EngineRequest r;
      r.request_id = std::to_string(i);
      r.prompt_ids = {5, 9, 11};
      r.params = params[i];
      reqs.push_back(r);
    }
    return reqs;
  };
  testing_util::EngineRig clean(testing_util::fixture("full"), engine::LoadFormat::kAuto);
  const auto expected = testing_util::outputs_of(clean.run(requests(), clean.options()));
  ASSERT_EQ(expected[0][0].size(), 10u);
  // Poison the greedy output's fourth token: plain decoding fails once that token is fed.
  const int32_t poison = expected[0][0][3];
  testing_util::EngineRig rig(nan_checkpoint(poison), engine::LoadFormat::kAuto);
  const auto ref = rig.run(requests(), rig.options());
  EXPECT_THAT(ref[0].error, HasSubstr("NaN in the logits"));
  for (int64_t k : {2, 5}) {
    engine::EngineOptions o = rig.options();
    auto oracle = std::make_shared<testing_util::OracleDrafter>(expected, rig.vocab(),
                                                                [](size_t, int64_t pos, int64_t i) { return (pos + i) % 3 == 2; });
    oracle->set_wrong_token(poison);  // wrong drafts are the poisoned token
    o.speculative = {.drafter = oracle, .num_speculative_tokens = k};
    const auto got = rig.run(requests(), o);
    ASSERT_EQ(got.size(), ref.size());
    for (size_t i = 0; i < ref.size(); ++i) {
      EXPECT_EQ(got[i].error, ref[i].error) << "k " << k << ", request " << i;
      EXPECT_EQ(got[i].outputs[0].token_ids, ref[i].outputs[0].token_ids) << "k " << k << ", request " << i;
      EXPECT_EQ(got[i].outputs[0].finish_reason, ref[i].outputs[0].finish_reason) << "k " << k << ", request " << i;
    }
  }
}
