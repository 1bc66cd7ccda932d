// The offline engine end to end: the reference's greedy continuations, invariance of every
// output to batching, chunking and preemption, stop conditions, n > 1, per-request errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/npy.h"
#include "deepinfer/llm.h"
#include "engine/random_model.h"
#include "kernels/backend.h"
#include "model/devices.h"

using namespace deepinfer;

namespace {
using testing_util::fixture;
using testing_util::random_model_dir;

EngineConfig random_config() { return testing_util::random_model_config(1); }

std::vector<int32_t> ids_of(const std::vector<int64_t>& v) { return std::vector<int32_t>(v.begin(), v.end()); }
}  // namespace

class EngineGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(EngineGolden, ExactPrefillReproducesReferenceGreedyTokens) {
  EngineConfig c;
  c.model = fixture(GetParam());
  c.exact_prefill = true;
  c.threads = 2;
  LLM llm(c);
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 24;
  p.ignore_eos = true;
  auto prompt = ids_of(core::read_npy_ints(fixture(GetParam()) + "/golden/greedy_prompt.npy"));
  auto expect = ids_of(core::read_npy_ints(fixture(GetParam()) + "/golden/greedy_tokens.npy"));
  auto outs = llm.generate({Prompt::from_ids(prompt)}, p);
  ASSERT_EQ(outs.size(), 1u);
  ASSERT_TRUE(outs[0].error.empty()) << outs[0].error;
  EXPECT_EQ(outs[0].outputs[0].token_ids, expect);
  EXPECT_EQ(outs[0].outputs[0].finish_reason, FinishReason::kLength);
}

INSTANTIATE_TEST_SUITE_P(V41, EngineGolden, ::testing::Values("swa", "ced-1src", "ced", "ced-reindex", "full", "full-q"),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                           std::string s = p.param;
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });

// 64 requests, prompts of 1..300 tokens, greedy and seeded sampling with logprobs: the same
// tokens and bitwise the same logprobs alone, all together, under a memory budget that forces
// preemption, and with three chunked-prefill budgets.
TEST(Engine, OutputsAreInvariantToBatchingChunkingAndPreemption) {
  const int kRequests = 64;
  std::vector<Prompt> prompts;
  std::vector<SamplingParams> params;
  for (int i = 0; i < kRequests; ++i) {
    const int len = 1 + (i * 149) % 300;
    std::vector<int32_t> ids;
    for (int t = 0; t < len; ++t) ids.push_back(3 + (i * 131 + t * 17) % 1000);
    prompts.push_back(Prompt::from_ids(ids));
    SamplingParams p;
    p.max_tokens = 6;
    p.ignore_eos = true;
    p.logprobs = 2;
    if (i % 2 == 0) {
      p.temperature = 0;
    } else {
      p.temperature = 0.9f;
      p.top_p = 0.95f;
      p.seed = static_cast<uint64_t>(1000 + i);
    }
    params.push_back(p);
  }
  auto run = [&](EngineConfig c, bool one_at_a_time) {
    LLM llm(c);
    std::vector<RequestOutput> outs;
    if (one_at_a_time) {
      for (int i = 0; i < kRequests; ++i) {
        // Unseeded-ness is not used here (every sampled request has a seed).
        auto o = llm.generate({prompts[static_cast<size_t>(i)]}, {params[static_cast<size_t>(i)]});
        outs.push_back(std::move(o[0]));
      }
    } else {
      outs = llm.generate(prompts, params);
    }
    return std::make_pair(std::move(outs), llm.last_stats());
  };
  EngineConfig base = random_config();
  auto [ref, ref_stats] = run(base, false);
  for (const auto& o : ref) ASSERT_TRUE(o.error.empty()) << o.error;
  auto check = [&](const std::vector<RequestOutput>& got, const std::string& what) {
    ASSERT_EQ(got.size(), ref.size());
    for (size_t i = 0; i < ref.size(); ++i) {
      const auto& a = ref[i].outputs[0];
      const auto& b = got[i].outputs[0];
      EXPECT_EQ(a.token_ids, b.token_ids) << what << ": request " << i;
      ASSERT_EQ(a.logprobs.size(), b.logprobs.size()) << what;
      for (size_t t = 0; t < a.logprobs.size(); ++t) {
        EXPECT_EQ(std::memcmp(&a.logprobs[t].logprob, &b.logprobs[t].logprob, sizeof(float)), 0) << what << ": request " << i;
        EXPECT_EQ(a.logprobs[t].top, b.logprobs[t].top) << what;
      }
    }
  };
  check(run(base, true).first, "one at a time");
  for (int64_t budget : {7, 64, 257}) {
    EngineConfig c = base;
    c.max_num_batched_tokens = budget;
    check(run(c, false).first, "token budget " + std::to_string(budget));
  }
  EngineConfig tight = base;
  tight.memory_budget_bytes = 300000;  // a few long sequences' state: forces preemption
  auto [pre, pre_stats] = run(tight, false);
  EXPECT_GT(pre_stats.preemptions, 0);
  check(pre, "memory budget with preemption");
}

TEST(Engine, StopStringsEosMaxTokensAndN) {
  LLM llm(random_config());
  SamplingParams greedy;
  greedy.temperature = 0;
  greedy.max_tokens = 12;
  greedy.ignore_eos = true;
  auto base = llm.generate({Prompt::from_text("The quick brown fox")}, greedy)[0].outputs[0];
  ASSERT_EQ(base.token_ids.size(), 12u);
  ASSERT_GE(base.text.size(), 4u);
  // A stop string made of the middle of the text, spanning token boundaries where possible.
  const std::string stop = base.text.substr(base.text.size() / 2 - 1, 3);
  SamplingParams s = greedy;
  s.stop = {stop};
  auto cut = llm.generate({Prompt::from_text("The quick brown fox")}, s)[0].outputs[0];
  EXPECT_EQ(cut.finish_reason, FinishReason::kStop);
  EXPECT_EQ(cut.stop_reason, stop);
  EXPECT_EQ(cut.text, base.text.substr(0, base.text.find(stop)));
  // A stop token id: generation ends on it.
  SamplingParams st = greedy;
  st.stop_token_ids = {base.token_ids[3]};
  auto by_tok = llm.generate({Prompt::from_text("The quick brown fox")}, st)[0].outputs[0];
  EXPECT_EQ(by_tok.finish_reason, FinishReason::kStop);
  EXPECT_LE(by_tok.token_ids.size(), 4u);
  EXPECT_EQ(by_tok.token_ids.back(), base.token_ids[3]);
  // EOS: make the greedy token the EOS id by choosing it as ... the model's EOS (id 1) is
  // rarely greedy; min_tokens blocks it, ignore_eos disables it. Check EOS ends a sequence
  // by declaring the first greedy token a stop token is covered above; here max_tokens.
  EXPECT_EQ(base.finish_reason, FinishReason::kLength);
  // n > 1 with a seed: distinct completions, reproducible.
  SamplingParams n3;
  n3.n = 3;
  n3.temperature = 1.0f;
  n3.max_tokens = 8;
  n3.seed = 42;
  auto a = llm.generate({Prompt::from_text("Hello")}, n3)[0];
  auto b = llm.generate({Prompt::from_text("Hello")}, n3)[0];
  ASSERT_EQ(a.outputs.size(), 3u);
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(a.outputs[static_cast<size_t>(k)].index, k);
    EXPECT_EQ(a.outputs[static_cast<size_t>(k)].token_ids, b.outputs[static_cast<size_t>(k)].token_ids);
  }
  EXPECT_TRUE(a.outputs[0].token_ids != a.outputs[1].token_ids || a.outputs[1].token_ids != a.outputs[2].token_ids);
}

TEST(Engine, EosEndsASequence) {
  // With EOS = the token greedy decoding produces first, the completion stops right there.
  LLM probe(random_config());
  SamplingParams g;
  g.temperature = 0;
  g.max_tokens = 1;
  auto first = probe.generate({Prompt::from_ids({5, 6, 7})}, g)[0].outputs[0].token_ids[0];
  const std::string dir = ::testing::TempDir() + "/engine_eos_model";
  std::filesystem::create_directories(dir);
  std::ifstream in(random_model_dir() + "/config.json");
  nlohmann::json c = nlohmann::json::parse(in);
  c["eos_token_id"] = first;
  std::ofstream(dir + "/config.json") << c.dump();
  EngineConfig ec = random_config();
  ec.model = dir;
  LLM llm(ec);
  g.max_tokens = 10;
  auto o = llm.generate({Prompt::from_ids({5, 6, 7})}, g)[0].outputs[0];
  EXPECT_EQ(o.finish_reason, FinishReason::kStop);
  EXPECT_EQ(o.token_ids, std::vector<int32_t>{first});
  g.min_tokens = 3;  // EOS blocked until 3 tokens
  auto m = llm.generate({Prompt::from_ids({5, 6, 7})}, g)[0].outputs[0];
  EXPECT_GE(m.token_ids.size(), 3u);
  EXPECT_NE(m.token_ids[0], first);
}

TEST(Engine, BadRequestsFailAloneWithAMessage) {
  LLM llm(random_config());
  SamplingParams ok;
  ok.max_tokens = 3;
  SamplingParams neg = ok;
  neg.temperature = -1;
  SamplingParams topp = ok;
  topp.top_p = 0;
  std::vector<Prompt> prompts = {Prompt::from_text("fine"), Prompt::from_ids({1, 5000}), Prompt::from_text("fine too"),
                                 Prompt::from_text(""), Prompt::from_text("x")};
  std::vector<SamplingParams> params = {ok, ok, neg, ok, topp};
  auto outs = llm.generate(prompts, params);
  ASSERT_EQ(outs.size(), 5u);
  EXPECT_TRUE(outs[0].error.empty());
  EXPECT_EQ(outs[0].outputs[0].token_ids.size(), 3u);
  EXPECT_NE(outs[1].error.find("5000"), std::string::npos) << outs[1].error;
  EXPECT_NE(outs[2].error.find("temperature"), std::string::npos) << outs[2].error;
  EXPECT_NE(outs[3].error.find("empty"), std::string::npos) << outs[3].error;
  EXPECT_NE(outs[4].error.find("top_p"), std::string::npos) << outs[4].error;
}

TEST(Engine, DeviceAndDtypeAreCheckedAndBf16EmulationRuns) {
  auto expect_rejected = [](const EngineConfig& bad, const std::string& names) {
    try {
      LLM llm(bad);
      ADD_FAILURE() << names << " accepted";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(names), std::string::npos) << e.what();
    }
  };
  EngineConfig bad = random_config();
  bad.device = "tpu";
  expect_rejected(bad, "device 'tpu'");
  bad = random_config();
  bad.dtype = "float16";
  expect_rejected(bad, "dtype 'float16'");
  // bfloat16 on the CPU (an emulation of the GPU's rounding) runs the engine end to end.
  EngineConfig c = random_config();
  c.dtype = "bfloat16";
  LLM llm(c);
  SamplingParams sp;
  sp.max_tokens = 4;
  sp.temperature = 0;
  auto outs = llm.generate({Prompt::from_ids({3, 4, 5})}, sp);
  ASSERT_EQ(outs.size(), 1u);
  ASSERT_TRUE(outs[0].error.empty()) << outs[0].error;
  EXPECT_EQ(outs[0].outputs[0].token_ids.size(), 4u);
}

TEST(Engine, MemoryFractionBudgetsTheBackendsMemory) {
  // A fraction so small that the budget holds less than one sequence: requests then run one
  // at a time (the budget is a target, never a stall), with the same outputs.
  SamplingParams sp;
  sp.max_tokens = 3;
  sp.temperature = 0;
  std::vector<Prompt> prompts;
  for (int i = 0; i < 4; ++i) prompts.push_back(Prompt::from_ids({3 + i, 4, 5, 6}));
  EngineConfig c = random_config();
  LLM free_llm(c);
  const auto a = free_llm.generate(prompts, sp);
  const int64_t free_steps = free_llm.last_stats().steps;
  c.memory_fraction = 1e-9;  // tens of bytes of RAM: positive, and less than one sequence
  LLM tight(c);
  const auto b = tight.generate(prompts, sp);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].outputs[0].token_ids, b[i].outputs[0].token_ids) << i;
  EXPECT_GT(tight.last_stats().steps, free_steps);
}

class EngineOnDevice : public ::testing::TestWithParam<std::string> {};

TEST_P(EngineOnDevice, RowsDrawnOnTheBackendGiveTheSamplersTokens) {
  // Greedy and sampled requests (temperature, top-k, top-p, min-p, logprobs) with nothing before
  // the draw take their token from the backend (only the id and the logprobs come back); the
  // rest (penalties, pending min_tokens) go through the sampler. Either way every output equals
  // the all-sampler run's.
  std::vector<Prompt> prompts;
  std::vector<SamplingParams> params;
  for (int i = 0; i < 12; ++i) {
    std::vector<int32_t> ids;
    for (int t = 0; t < 3 + i * 5; ++t) ids.push_back(2 + (i * 37 + t * 11) % 1000);
    prompts.push_back(Prompt::from_ids(ids));
    SamplingParams p;
    p.max_tokens = 5;
    p.ignore_eos = true;
    p.temperature = 0;
    if (i % 6 == 1) p.logprobs = i % 4;
    if (i % 6 == 2) p.repetition_penalty = 1.3f;
    if (i % 6 == 3) p.min_tokens = 3;
    if (i % 6 == 4) {
      p.temperature = 0.8f;
      p.seed = 7;
    }
    if (i % 6 == 5) {
      p.temperature = 1.3f;
      p.top_k = 50;
      p.top_p = 0.9f;
      p.min_p = 0.02f;
      if (i == 11) p.logprobs = 2;
    }
    params.push_back(p);
  }
  EngineConfig c = random_config();
  c.device = GetParam();
  c.sample_on_backend = false;
  std::vector<RequestOutput> ref, got;
  {
    LLM llm(c);
    ref = llm.generate(prompts, params);
  }
  c.sample_on_backend = true;
  {
    LLM llm(c);
    got = llm.generate(prompts, params);
  }
  ASSERT_EQ(ref.size(), got.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    ASSERT_TRUE(ref[i].error.empty() && got[i].error.empty()) << ref[i].error << got[i].error;
    EXPECT_EQ(ref[i].outputs[0].token_ids, got[i].outputs[0].token_ids) << "request " << i;
    const auto &rl = ref[i].outputs[0].logprobs, &gl = got[i].outputs[0].logprobs;
    ASSERT_EQ(rl.size(), gl.size()) << "request " << i;
    for (size_t t = 0; t < rl.size(); ++t) {  // logprobs from the backend: the sampler's (CUDA: within fp64 rounding)
      EXPECT_NEAR(rl[t].logprob, gl[t].logprob, 1e-5) << "request " << i << " token " << t;
      ASSERT_EQ(rl[t].top.size(), gl[t].top.size()) << "request " << i << " token " << t;
      for (size_t j = 0; j < rl[t].top.size(); ++j) {
        EXPECT_EQ(rl[t].top[j].first, gl[t].top[j].first) << "request " << i << " token " << t;
        EXPECT_NEAR(rl[t].top[j].second, gl[t].top[j].second, 1e-5) << "request " << i << " token " << t;
      }
    }
    EXPECT_EQ(got[i].outputs[0].token_ids.size(), 5u);
  }
}

// The state budget: a byte budget as given; a fraction of physical memory on the CPU (no budget
// by default); on a GPU by default 0.9 of the memory free once the model is loaded and a
// warm-up forward of the step's token budget has left its working set in the backend's pool.
TEST_P(EngineOnDevice, StateBudgetLeavesRoomForTheStep) {
  EngineConfig c = random_config();
  c.device = GetParam();
  c.max_num_batched_tokens = 300;
  const bool cpu = GetParam().rfind("cpu", 0) == 0;
  const int64_t free_before = kernels::make_backend(c.device, 1, c.dtype)->memory_available();
  {
    LLM llm(c);
    if (cpu) {
      EXPECT_EQ(llm.state_budget_bytes(), 0);
      EXPECT_THAT(llm.memory_report(), ::testing::HasSubstr("; no state budget;"));
    } else {
      const int64_t free_now = kernels::make_backend(c.device, 1, c.dtype)->memory_available();
      EXPECT_LT(free_now, free_before);
      EXPECT_NEAR(static_cast<double>(llm.state_budget_bytes()), 0.9 * static_cast<double>(free_now), 0.01 * static_cast<double>(free_now));
      EXPECT_THAT(llm.memory_report(), ::testing::ContainsRegex("state budget [0-9.]+ [KMGT]?B \\(0.9 of [0-9.]+ [KMGT]?B free after a "
                                                                "warm-up forward of 300 tokens\\)"));
      SamplingParams p;
      p.max_tokens = 4;
      p.ignore_eos = true;
      const auto outs = llm.generate({Prompt::from_ids({5, 6, 7})}, p);
      EXPECT_TRUE(outs[0].error.empty()) << outs[0].error;
      EXPECT_EQ(outs[0].outputs[0].token_ids.size(), 4u);
    }
  }
  c.memory_fraction = 0.5;
  {
    LLM llm(c);
    const int64_t avail = kernels::make_backend(c.device, 1, c.dtype)->memory_available();
    EXPECT_NEAR(static_cast<double>(llm.state_budget_bytes()), 0.5 * static_cast<double>(avail), 0.01 * static_cast<double>(avail));
    EXPECT_THAT(llm.memory_report(), ::testing::HasSubstr(cpu ? " of physical memory)" : " free after a warm-up forward of 300 tokens)"));
  }
  c.memory_budget_bytes = 3'000'000;
  {
    LLM llm(c);
    EXPECT_EQ(llm.state_budget_bytes(), 3'000'000);
    EXPECT_THAT(llm.memory_report(), ::testing::HasSubstr("; state budget 3 MB;"));
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, EngineOnDevice, ::testing::ValuesIn(deepinfer::testing::devices()),
                         deepinfer::testing::device_name);
