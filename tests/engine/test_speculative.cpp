// Speculative decoding in the engine, with an oracle drafter: with deterministic drafts every
// output (tokens, logprobs bitwise, finish reasons, text) equals decoding without speculation,
// on every fixture and on a random-weight model, alone and in mixed batches, with chunked
// prefill, bounded replay and preemption, whichever drafts are right or wrong; stop strings,
// stop ids, EOS and max_tokens landing inside an accepted block end the output where plain
// decoding ends it.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/npy.h"
#include "engine/oracle_drafter.h"
#include "engine/random_model.h"
#include "model/devices.h"
#include "sample/chi_square.h"
#include "sample/sampler.h"
#include "spec/verify_schedule.h"

using namespace deepinfer;
using testing_util::EngineRig;
using testing_util::expect_same;
using testing_util::kSanitized;
using testing_util::request;
using testing_util::OracleDrafter;
using testing_util::outputs_of;

namespace {

// Oracle patterns: every draft right; a wrong draft at a position that cycles through the
// block; every draft wrong; drafts cut short.
struct Pattern {
  std::string name;
  std::function<bool(size_t, int64_t, int64_t)> wrong;
  std::function<int64_t(size_t, int64_t, int64_t)> length;
};

std::vector<Pattern> patterns() {
  return {{"right", nullptr, nullptr},
          {"one wrong", [](size_t r, int64_t pos, int64_t i) { return i == static_cast<int64_t>((r + static_cast<size_t>(pos)) % 6); }, nullptr},
          {"all wrong", [](size_t, int64_t, int64_t) { return true; }, nullptr},
          {"short", nullptr, [](size_t r, int64_t pos, int64_t k) { return static_cast<int64_t>((r + static_cast<size_t>(pos)) % static_cast<size_t>(k + 1)); }}};
}

// Runs reqs without speculation, then with the oracle under every pattern and the given k, and
// checks the outputs equal; returns the speculative runs' totals.
// (ends_early: outputs may end before max_tokens, so drafts past their end are proposed.)
engine::StepTimes check_patterns(EngineRig& rig, const std::vector<engine::EngineRequest>& reqs, engine::EngineOptions base,
                                 const std::vector<int64_t>& ks, const std::string& what, bool ends_early = false) {
  const auto ref = rig.run(reqs, base);
  for (const auto& o : ref) EXPECT_TRUE(o.error.empty()) << what << ": " << o.error;
  engine::StepTimes total;
  total.spec_accepted_hist.assign(spec::kMaxDraftTokens + 1, 0);
  for (int64_t k : ks)
    for (const Pattern& pat : patterns()) {
      engine::EngineOptions o = base;
      auto drafter = std::make_shared<OracleDrafter>(outputs_of(ref), rig.vocab(), pat.wrong, pat.length);
      o.speculative = {.drafter = drafter, .num_speculative_tokens = k};
      engine::StepTimes t;
      expect_same(ref, rig.run(reqs, o, &t), what + ", k " + std::to_string(k) + ", " + pat.name);
      EXPECT_GT(t.spec_rounds, 0) << what;
      EXPECT_LE(drafter->verified_drafts(), t.spec_drafted) << what;  // (a block that ends a sequence is not reported)
      if (pat.name == "right" && !ends_early) {
        EXPECT_EQ(t.spec_accepted, t.spec_drafted) << what << ": every right draft is kept";
      }
      if (pat.name == "all wrong") {
        EXPECT_EQ(t.spec_accepted, 0) << what;
      }
      total.spec_rounds += t.spec_rounds;
      total.spec_drafted += t.spec_drafted;
      total.spec_accepted += t.spec_accepted;
      total.preemptions += t.preemptions;
      for (size_t j = 0; j < t.spec_accepted_hist.size(); ++j) total.spec_accepted_hist[j] += t.spec_accepted_hist[j];
    }
  return total;
}

std::vector<int32_t> ids_of(const std::vector<int64_t>& v) { return std::vector<int32_t>(v.begin(), v.end()); }

}  // namespace

class SpeculativeFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(SpeculativeFixture, GreedyEqualsPlainDecoding) {
  const std::string dir = testing_util::fixture(GetParam());
  EngineRig rig(dir, engine::LoadFormat::kAuto);
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 24;
  p.ignore_eos = true;
  p.logprobs = 2;
  const auto prompt = ids_of(core::read_npy_ints(dir + "/golden/greedy_prompt.npy"));
  std::vector<int32_t> shorter(prompt.begin(), prompt.begin() + static_cast<int64_t>(prompt.size() / 2 + 1));
  const std::vector<engine::EngineRequest> reqs{request(prompt, p, 0), request(shorter, p, 1)};
  const auto t = check_patterns(rig, reqs, rig.options(), {1, 5}, GetParam());
  // Every accepted count from 0 to 5 occurred.
  for (size_t j = 0; j < t.spec_accepted_hist.size(); ++j) EXPECT_GT(t.spec_accepted_hist[j], 0) << GetParam() << ": accepted " << j;
}

INSTANTIATE_TEST_SUITE_P(V41, SpeculativeFixture, ::testing::Values("swa", "ced", "ced-1src", "ced-reindex", "full", "full-q"),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                           std::string s = p.param;
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });

// On every backend the build has (the CPU, the CPU with graphs emulated, so that verify chunks
// run in the graph buckets, and CUDA): greedy and seeded sampled requests with logprobs, drawn
// on the backend or through the sampler, equal plain decoding on that backend.
class SpeculativeOnDevice : public ::testing::TestWithParam<std::string> {};

TEST_P(SpeculativeOnDevice, EqualsPlainDecoding) {
  EngineRig rig(testing_util::random_model_dir(), engine::LoadFormat::kRandom, 2, GetParam());
  std::vector<engine::EngineRequest> reqs;
  for (int i = 0; i < 8; ++i) {
    std::vector<int32_t> ids;
    for (int t = 0; t < 2 + i * 9; ++t) ids.push_back(4 + (i * 53 + t * 13) % 1000);
    SamplingParams p;
    p.max_tokens = 12;
    p.ignore_eos = true;
    p.logprobs = i % 3 == 0 ? std::optional<int>(3) : std::nullopt;
    p.temperature = i % 2 ? 0.9f : 0.0f;
    p.seed = static_cast<uint64_t>(40 + i);
    if (i == 5) p.presence_penalty = 0.4f;
    reqs.push_back(request(ids, p, static_cast<size_t>(i)));
  }
  check_patterns(rig, reqs, rig.options(), {4}, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Devices, SpeculativeOnDevice, ::testing::ValuesIn(deepinfer::testing::devices()),
                         deepinfer::testing::device_name);

// A mixed batch on the random-weight model: prompts of 1..160 tokens (chunked prefill beside
// verification), greedy and seeded sampling, penalties (rows through the host sampler), top-k /
// top-p / min-p, min_tokens, n = 2, logprobs; under small token budgets, with every row through
// the sampler, and under a memory budget that preempts sequences in the middle of speculation.
TEST(Speculative, MixedBatchesEqualPlainDecoding) {
  EngineRig rig(testing_util::random_model_dir(), engine::LoadFormat::kRandom, 1);
  std::vector<engine::EngineRequest> reqs;
  for (int i = 0; i < 16; ++i) {
    const int len = 1 + (i * 149) % 160;
    std::vector<int32_t> ids;
    for (int t = 0; t < len; ++t) ids.push_back(3 + (i * 131 + t * 17) % 1000);
    SamplingParams p;
    p.max_tokens = 10 + i % 5;
    p.ignore_eos = true;
    p.logprobs = i % 3 == 0 ? std::optional<int>(2) : std::nullopt;
    if (i % 2 == 0) {
      p.temperature = 0;
    } else {
      p.temperature = 0.8f;
      p.top_p = 0.9f;
      p.top_k = i % 4 == 1 ? 50 : 0;
      p.min_p = i % 4 == 3 ? 0.01f : 0.0f;
      p.seed = static_cast<uint64_t>(7 + i);
    }
    if (i % 5 == 1) p.repetition_penalty = 1.2f;
    if (i % 5 == 2) p.frequency_penalty = 0.5f;
    if (i % 7 == 3) p.min_tokens = 4;
    if (i % 6 == 5) p.n = 2;
    reqs.push_back(request(ids, p, static_cast<size_t>(i)));
  }
  for (int64_t budget : kSanitized ? std::vector<int64_t>{7} : std::vector<int64_t>{7, 64}) {
    engine::EngineOptions o = rig.options();
    o.sched.max_num_batched_tokens = budget;
    check_patterns(rig, reqs, o, {3}, "token budget " + std::to_string(budget));
  }
  engine::EngineOptions host = rig.options();
  host.sample_on_backend = false;
  check_patterns(rig, reqs, host, {5}, "every row through the sampler");
  engine::EngineOptions tight = rig.options();
  tight.memory_budget_bytes = 60000;  // forces preemption
  const auto t = check_patterns(rig, reqs, tight, {5}, "memory budget");
  EXPECT_GT(t.preemptions, 0);
}

TEST(Speculative, ExactPrefillAndSmallWindows) {
  EngineRig rig(testing_util::random_model_dir(), engine::LoadFormat::kRandom, 3);
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 40;  // past the window of 16 and across many compressor groups
  p.ignore_eos = true;
  std::vector<engine::EngineRequest> reqs;
  for (int i = 0; i < 4; ++i) reqs.push_back(request({static_cast<int32_t>(5 + i), 9, 11}, p, static_cast<size_t>(i)));
  engine::EngineOptions o = rig.options();
  o.sched.exact_prefill = true;
  check_patterns(rig, reqs, o, {2, 4}, "exact prefill");
}

// Stop strings, stop token ids, EOS and max_tokens that land inside a block of accepted drafts.
TEST(Speculative, StopConditionsInsideAnAcceptedBlock) {
  const std::string prompt_text = "The quick brown fox";
  EngineRig rig(testing_util::random_model_dir(), engine::LoadFormat::kRandom, 1);
  const std::vector<int32_t> prompt = rig.lm.tokenizer->encode(prompt_text);
  SamplingParams g;
  g.temperature = 0;
  g.max_tokens = 24;
  g.ignore_eos = true;
  const auto base = rig.run({request(prompt, g, 0)}, rig.options())[0].outputs[0];
  ASSERT_EQ(base.token_ids.size(), 24u);
  std::vector<engine::EngineRequest> reqs;
  for (int at : {2, 4, 7}) {  // stop ids at several places of a block
    SamplingParams s = g;
    s.stop_token_ids = {base.token_ids[static_cast<size_t>(at)]};
    reqs.push_back(request(prompt, s, reqs.size()));
  }
  for (size_t cut : {base.text.size() / 3, base.text.size() / 2}) {
    SamplingParams s = g;
    s.stop = {base.text.substr(cut, 3)};
    reqs.push_back(request(prompt, s, reqs.size()));
  }
  for (int m : {1, 2, 3, 7, 8, 9}) {
    SamplingParams s = g;
    s.max_tokens = m;
    reqs.push_back(request(prompt, s, reqs.size()));
  }
  const auto ref = rig.run(reqs, rig.options());
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(ref[i].outputs[0].finish_reason, FinishReason::kStop);
  EXPECT_EQ(ref[3].outputs[0].finish_reason, FinishReason::kStop);
  for (int64_t k : {1, 3, 5}) {
    engine::EngineOptions o = rig.options();
    o.speculative = {.drafter = std::make_shared<OracleDrafter>(outputs_of(ref), rig.vocab()),
                     .num_speculative_tokens = k};
    expect_same(ref, rig.run(reqs, o), "k " + std::to_string(k));
  }
  // EOS: a model whose EOS id is the greedy output's fifth token.
  const std::string dir = ::testing::TempDir() + "/speculative_eos_model";
  std::filesystem::create_directories(dir);
  nlohmann::json c = nlohmann::json::parse(std::ifstream(testing_util::random_model_dir() + "/config.json"));
  c["eos_token_id"] = base.token_ids[4];
  std::ofstream(dir + "/config.json") << c.dump();
  std::filesystem::copy_file(testing_util::random_model_dir() + "/tokenizer.json", dir + "/tokenizer.json",
                             std::filesystem::copy_options::overwrite_existing);
  EngineRig eos(dir, engine::LoadFormat::kRandom, 1);
  SamplingParams e = g;
  e.ignore_eos = false;
  const auto eos_ref = eos.run({request(prompt, e, 0)}, eos.options());
  EXPECT_EQ(eos_ref[0].outputs[0].finish_reason, FinishReason::kStop);
  EXPECT_LE(eos_ref[0].outputs[0].token_ids.size(), 5u);
  engine::EngineOptions o = eos.options();
  o.speculative = {.drafter = std::make_shared<OracleDrafter>(outputs_of(eos_ref), eos.vocab()),
                   .num_speculative_tokens = 5};
  expect_same(eos_ref, eos.run({request(prompt, e, 0)}, o), "EOS");
}

TEST(Speculative, ConfigErrorsNameTheField) {
  auto expect_error = [](const SpeculativeConfig& sp, const std::string& says) {
    EngineConfig c = testing_util::random_model_config(1);
    c.speculative = sp;
    try {
      LLM llm(c);
      ADD_FAILURE() << "no error for method \"" << sp.method << "\"";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  expect_error({"eagle", 3}, "EngineConfig.speculative.method");
  expect_error({"dspark", 0}, "num_speculative_tokens: must be in [1, 5]");
  expect_error({"dspark", 6}, "num_speculative_tokens: must be in [1, 5]");
  expect_error({"dspark", 5}, "no DSpark draft stages (config.json num_nextn_predict_layers is 0");
  // Off: runs, nothing verified.
  EngineConfig c = testing_util::random_model_config(1);
  LLM llm(c);
  SamplingParams p;
  p.max_tokens = 3;
  ASSERT_EQ(llm.generate({Prompt::from_ids({4, 5})}, p)[0].outputs[0].token_ids.size(), 3u);
  EXPECT_EQ(llm.last_stats().spec_rounds, 0);
}

// Probabilistic drafts through the engine: four tokens sampled at temperature 1 from a
// random-weight model with a vocabulary of 4, over 6,000 seeded requests (1,500 under the
// sanitizers), against the exact
// product of the model's conditionals (chi-square); drafts of k = 3 drawn from a mix of the
// oracle's token and the uniform distribution.
TEST(Speculative, ProbabilisticDraftsKeepTheTargetsDistribution) {
  const std::string dir = ::testing::TempDir() + "/speculative_vocab4_model";
  std::filesystem::create_directories(dir);
  nlohmann::json c = nlohmann::json::parse(std::ifstream(testing_util::random_model_dir() + "/config.json"));
  c["vocab_size"] = 4;
  c["eos_token_id"] = 1;
  std::ofstream(dir + "/config.json") << c.dump();
  EngineRig rig(dir, engine::LoadFormat::kRandom, 5);
  constexpr int64_t V = 4, kTokens = 4, kRuns = kSanitized ? 1500 : 6000;
  const std::vector<int32_t> prompt{2, 3, 0};
  SamplingParams p;
  p.temperature = 1.0f;
  p.max_tokens = kTokens;
  p.ignore_eos = true;
  // The exact joint distribution: every prefix's logits through the sampler's distribution.
  const std::vector<double> expected = exact_joint_distribution(rig, prompt, p, kTokens);
  std::vector<engine::EngineRequest> reqs;
  for (int64_t i = 0; i < kRuns; ++i) {
    SamplingParams q = p;
    q.seed = static_cast<uint64_t>(100 + i);
    reqs.push_back(request(prompt, q, static_cast<size_t>(i)));
  }
  engine::EngineOptions o = rig.options();
  o.sched.max_num_seqs = 2048;
  o.sched.max_num_batched_tokens = 8192;
  auto counts_of = [&](const std::vector<RequestOutput>& outs) {
    std::vector<int64_t> counts(expected.size(), 0);
    for (const auto& out : outs) {
      EXPECT_EQ(out.outputs[0].token_ids.size(), static_cast<size_t>(kTokens));
      size_t cell = 0;
      for (int32_t t : out.outputs[0].token_ids) cell = cell * V + static_cast<size_t>(t);
      ++counts[cell];
    }
    return counts;
  };
  const auto plain = deepinfer::testing::chi_square(counts_of(rig.run(reqs, o)), expected, kRuns);
  EXPECT_GT(plain.p_value, 1e-3) << "without speculation: chi2 " << plain.stat << " over " << plain.bins << " cells";
  std::vector<std::vector<std::vector<int32_t>>> oracle(static_cast<size_t>(kRuns), {{0, 2, 1, 3}});
  auto drafter = std::make_shared<OracleDrafter>(oracle, V, nullptr, nullptr, /*probabilistic=*/true, 0.6);
  o.speculative = {.drafter = drafter, .num_speculative_tokens = 3};
  engine::StepTimes t;
  const auto outs = rig.run(reqs, o, &t);
  const auto spec = deepinfer::testing::chi_square(counts_of(outs), expected, kRuns);
  EXPECT_EQ(spec.impossible, 0);
  EXPECT_GT(spec.p_value, 1e-3) << "with speculation: chi2 " << spec.stat << " over " << spec.bins << " cells";
  EXPECT_GT(t.spec_accepted, 0);
  EXPECT_LT(t.spec_accepted, t.spec_drafted);  // rejections too: the residual draws are in the counts
  // Seeded: the same drafts and verdicts again, in other batches.
  o.sched.max_num_seqs = 300;
  const auto again = rig.run(reqs, o);
  for (size_t i = 0; i < again.size(); ++i) EXPECT_EQ(again[i].outputs[0].token_ids, outs[i].outputs[0].token_ids);
}

// Structured outputs: each row's mask is the grammar's after the drafts before it (the matcher
// follows the draft, then rolls back), so a draft the grammar refuses is never kept and the
// outputs equal plain decoding's.
TEST(Speculative, StructuredOutputsEqualPlainDecoding) {
  EngineRig rig(testing_util::random_model_dir(), engine::LoadFormat::kRandom, 3);
  const std::vector<StructuredOutput> grammars{
      {StructuredOutput::Kind::kRegex, "(yes|no|maybe)-[0-9]{2,4}\\.", true},
      {StructuredOutput::Kind::kGrammar, "root ::= \"(\" expr \")\"\nexpr ::= [0-9] | \"(\" expr \"+\" expr \")\"", true},
      {StructuredOutput::Kind::kJsonObject, "", true},
      {StructuredOutput::Kind::kJsonSchema,
       R"({"type":"object","properties":{"name":{"type":"string","maxLength":8},"age":{"type":"integer","minimum":0,"maximum":120}},"required":["name","age"]})",
       false}};
  std::vector<engine::EngineRequest> reqs;
  for (size_t g = 0; g < grammars.size(); ++g)
    for (int sampled = 0; sampled < 2; ++sampled) {
      SamplingParams p;
      p.max_tokens = 40;
      p.temperature = sampled ? 1.0f : 0.0f;
      p.seed = 17 + g;
      p.logprobs = 1;
      p.n = sampled ? 2 : 1;
      p.structured_output = grammars[g];
      const char prompt[] = {'a', static_cast<char>('0' + g), 0};
      reqs.push_back(request(rig.lm.tokenizer->encode(prompt), p, reqs.size()));
    }
  const auto t = check_patterns(rig, reqs, rig.options(), {2, 5}, "structured", /*ends_early=*/true);
  EXPECT_GT(t.spec_accepted, 0);
}

// Adaptive verification against injected step-time curves, with an oracle whose drafts are all
// right and carry confidence 0.9: a flat curve verifies every draft whole (as adaptive off
// does); a curve without a fixed cost verifies none (plain decoding steps); a fixed cost of 40
// rows verifies all five drafts of a sequence alone and fewer per sequence in a batch of 32.
// The outputs equal plain decoding's every time.
TEST(Speculative, AdaptiveVerificationFollowsTheCostCurve) {
  EngineRig rig(testing_util::random_model_dir(), engine::LoadFormat::kRandom, 4);
  std::vector<engine::EngineRequest> reqs;
  for (int i = 0; i < 32; ++i) {
    SamplingParams p;
    p.temperature = 0;
    p.max_tokens = 14;
    p.ignore_eos = true;
    reqs.push_back(request({static_cast<int32_t>(7 + i), 40, static_cast<int32_t>(90 + 3 * i)}, p, static_cast<size_t>(i)));
  }
  engine::EngineOptions base = rig.options();
  base.sched.max_num_seqs = 64;
  const auto ref = rig.run(reqs, base);
  auto run = [&](const std::vector<engine::EngineRequest>& rq, const std::vector<RequestOutput>& want, bool adaptive,
                 std::function<double(int64_t)> curve, const std::string& what) {
    auto oracle = std::make_shared<OracleDrafter>(outputs_of(want), rig.vocab());
    oracle->set_confidence([](size_t, int64_t, int64_t) { return 0.9f; });
    engine::EngineOptions o = base;
    o.speculative = {.drafter = oracle, .num_speculative_tokens = 5, .adaptive = adaptive, .skip_unpaid_rounds = false,
                     .step_cost = curve ? std::make_shared<spec::FixedStepCost>(curve) : nullptr};
    engine::StepTimes t;
    expect_same(want, rig.run(rq, o, &t), what);
    return t;
  };
  const auto off = run(reqs, ref, false, nullptr, "adaptive off");
  const auto flat = run(reqs, ref, true, [](int64_t) { return 1.0; }, "flat curve");
  EXPECT_EQ(flat.spec_chosen_hist, off.spec_chosen_hist);
  EXPECT_EQ(flat.spec_drafted, off.spec_drafted);
  EXPECT_EQ(flat.spec_chosen_hist[0], 0);
  EXPECT_GT(flat.spec_chosen_hist[5], 0);
  const auto linear = run(reqs, ref, true, [](int64_t r) { return static_cast<double>(r); }, "linear curve");
  EXPECT_EQ(linear.spec_rounds, 0);
  EXPECT_EQ(linear.spec_chosen_hist[0], std::accumulate(linear.spec_chosen_hist.begin(), linear.spec_chosen_hist.end(), int64_t{0}));
  // Every decode step but the last (whose block would pass max_tokens) drafted, none verified.
  EXPECT_EQ(linear.spec_chosen_hist[0], 32 * 12);
  const auto fixed = [](int64_t r) { return 40.0 + static_cast<double>(r); };
  const std::vector<engine::EngineRequest> one{reqs[0]};
  const std::vector<RequestOutput> one_ref{ref[0]};
  const auto alone = run(one, one_ref, true, fixed, "fixed cost, alone");
  const auto batch = run(reqs, ref, true, fixed, "fixed cost, batch of 32");
  auto mean_k = [](const engine::StepTimes& t) {
    int64_t n = 0, sum = 0;
    for (size_t k = 0; k < t.spec_chosen_hist.size(); ++k) n += t.spec_chosen_hist[k], sum += static_cast<int64_t>(k) * t.spec_chosen_hist[k];
    return static_cast<double>(sum) / static_cast<double>(n);
  };
  // Alone every block the oracle offers whole (5, then fewer near max_tokens) is kept whole.
  const auto alone_off = run(one, one_ref, false, nullptr, "alone, adaptive off");
  EXPECT_EQ(alone.spec_chosen_hist, alone_off.spec_chosen_hist);
  EXPECT_LT(mean_k(batch), mean_k(alone) - 1.0);
  EXPECT_GT(mean_k(batch), 0.0);
}

// The gate of adaptive verification: an oracle whose drafts are always wrong (and confident)
// stops drafting after its first rounds but for a probe every DraftGate::kProbeEvery steps; one
// always right keeps drafting every step; the outputs equal plain decoding's either way.
TEST(Speculative, UnpaidDraftRoundsAreSkipped) {
  EngineRig rig(testing_util::random_model_dir(), engine::LoadFormat::kRandom, 4);
  std::vector<engine::EngineRequest> reqs;
  for (int i = 0; i < 4; ++i) {
    SamplingParams p;
    p.temperature = 0;
    p.max_tokens = 60;
    p.ignore_eos = true;
    reqs.push_back(request({static_cast<int32_t>(3 + i), 17, static_cast<int32_t>(50 + i)}, p, static_cast<size_t>(i)));
  }
  engine::EngineOptions base = rig.options();
  const auto ref = rig.run(reqs, base);
  auto run = [&](bool wrong) {
    std::function<bool(size_t, int64_t, int64_t)> always;
    if (wrong) always = [](size_t, int64_t, int64_t) { return true; };
    auto oracle = std::make_shared<OracleDrafter>(outputs_of(ref), rig.vocab(), always);
    oracle->set_confidence([](size_t, int64_t, int64_t) { return 0.9f; });
    engine::EngineOptions o = base;
    // A curve whose fixed cost makes whole drafts worth verifying: only the gate stops them.
    o.speculative = {.drafter = oracle, .num_speculative_tokens = 3, .adaptive = true,
                     .step_cost = std::make_shared<spec::FixedStepCost>([](int64_t r) { return 1.0 + 1e-3 * static_cast<double>(r); })};
    engine::StepTimes t;
    expect_same(ref, rig.run(reqs, o, &t), wrong ? "always wrong" : "always right");
    return t;
  };
  const auto wrong = run(true);
  EXPECT_GT(wrong.spec_skipped_steps, 0);
  EXPECT_GT(wrong.spec_rounds, 0);
  EXPECT_LT(wrong.spec_rounds, 4 * (60 / spec::DraftGate::kProbeEvery + 3));  // the first rounds and the probes
  EXPECT_EQ(wrong.spec_accepted, 0);
  const auto right = run(false);
  EXPECT_EQ(right.spec_skipped_steps, 0);
  EXPECT_EQ(right.spec_accepted, right.spec_drafted);
}

// The counters: an oracle that proposes the target's own continuation has every round keep all
// K drafts (mean acceptance length K + 1); one that is always wrong keeps none (length 1). With
// max_tokens 1 + 4 n + 1 and K = 3 every round drafts 3 (the last token is a plain decode).
TEST(Speculative, CountersOfRightAndWrongOracles) {
  EngineRig rig(testing_util::random_model_dir(), engine::LoadFormat::kRandom, 6);
  constexpr int kRequests = 5, kRounds = 4, K = 3;
  std::vector<engine::EngineRequest> reqs;
  for (int i = 0; i < kRequests; ++i) {
    SamplingParams p;
    p.temperature = 0;
    p.max_tokens = 1 + (K + 1) * kRounds + 1;
    p.ignore_eos = true;
    reqs.push_back(request({static_cast<int32_t>(20 + i), 31, 77}, p, static_cast<size_t>(i)));
  }
  const auto ref = rig.run(reqs, rig.options());
  for (bool right : {true, false}) {
    std::function<bool(size_t, int64_t, int64_t)> wrong;
    if (!right) wrong = [](size_t, int64_t, int64_t) { return true; };
    auto oracle = std::make_shared<OracleDrafter>(outputs_of(ref), rig.vocab(), wrong);
    engine::EngineOptions o = rig.options();
    o.speculative = {.drafter = oracle, .num_speculative_tokens = int64_t{K}, .adaptive = false};
    engine::StepTimes t;
    expect_same(ref, rig.run(reqs, o, &t), right ? "right" : "wrong");
    // Each round drafts min(K, max_tokens - generated - 1) tokens; a right one emits them all
    // and one more, a wrong one a single token.
    std::vector<int64_t> accepted(K + 1, 0), chosen(K + 1, 0);
    int64_t rounds = 0, drafted = 0;
    const int64_t max_tokens = reqs[0].params.max_tokens;
    for (int64_t gen = 1; max_tokens - gen - 1 > 0;) {
      const int64_t k = std::min<int64_t>(K, max_tokens - gen - 1);
      ++rounds, drafted += k, ++chosen[static_cast<size_t>(k)], ++accepted[right ? static_cast<size_t>(k) : 0];
      gen += right ? k + 1 : 1;
    }
    for (auto* v : {&accepted, &chosen})
      for (int64_t& x : *v) x *= kRequests;
    EXPECT_EQ(t.spec_rounds, rounds * kRequests);
    EXPECT_EQ(t.spec_drafted, drafted * kRequests);
    EXPECT_EQ(t.spec_accepted, right ? drafted * kRequests : 0);
    EXPECT_EQ(t.spec_accepted_hist, accepted);
    EXPECT_EQ(t.spec_chosen_hist, chosen);
    if (right) {
      EXPECT_EQ(rounds, kRounds);
      EXPECT_EQ(accepted[K], kRequests * kRounds);  // acceptance K every round
    }
    EXPECT_GT(t.verify_s, 0.0);
    EXPECT_LE(t.verify_s, t.wall_s);
  }
}
