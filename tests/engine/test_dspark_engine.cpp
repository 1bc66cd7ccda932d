// Speculative decoding with the model's own drafter (spec::DsparkDrafter) on the DSpark fixture
// and on random-weight models with draft stages: greedy drafts leave every greedy and seeded
// output (tokens, logprobs bitwise, finish reasons) exactly that of decoding without
// speculation, alone and in mixed batches, with chunked prefill, exact prefill and bounded
// replay, and under a memory budget that preempts sequences; the drafts the engine's states give
// after verification and rollback are those of a state that computed the same tokens afresh;
// probabilistic drafts are reproducible for a seed in any batch and keep the target's
// distribution; LLM wires EngineConfig.speculative to the drafter.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/npy.h"
#include "engine/oracle_drafter.h"
#include "engine/random_model.h"
#include "model/devices.h"
#include "model/dspark_fixture.h"
#include "model/info.h"
#include "sample/chi_square.h"
#include "spec/dspark_drafter.h"

using namespace deepinfer;
using testing_util::EngineRig;
using testing_util::expect_same;
using testing_util::kSanitized;
using testing_util::request;
using ::testing::HasSubstr;

namespace {

// The random-weight engine model (tests/engine/random_model.h) with two DSpark stages, or a
// vocabulary of `vocab` tokens (the noise token is the last id).
std::string dspark_random_dir(int64_t vocab = 1024) {
  const std::string dir = ::testing::TempDir() + "/dspark_random_" + std::to_string(vocab) + "_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  nlohmann::json c = nlohmann::json::parse(std::ifstream(testing_util::random_model_dir() + "/config.json"));
  c["vocab_size"] = vocab;
  c["num_nextn_predict_layers"] = 2;
  c["dspark_block_size"] = 5;
  c["dspark_noise_token_id"] = vocab - 1;
  c["dspark_markov_rank"] = 16;
  c["dspark_n_routed_experts"] = 4;
  c["dspark_num_experts_per_tok"] = 2;
  std::ofstream(dir + "/config.json") << c.dump(2);
  if (vocab == 1024)
    std::filesystem::copy_file(testing_util::random_model_dir() + "/tokenizer.json", dir + "/tokenizer.json",
                               std::filesystem::copy_options::overwrite_existing);
  return dir;
}

engine::MemoryOptions with_dspark() {
  engine::MemoryOptions m;
  m.dspark = true;
  return m;
}

// Runs the DSpark drafter, then checks every draft against the one a fresh state gives that
// computed the sequence's tokens (but the anchor) in one exact forward: the engine's states'
// rings after chunked prefill, verification and rollback are those of plain computation.
class CheckingDrafter : public spec::Drafter {
 public:
  CheckingDrafter(EngineRig& rig, spec::DraftSampling s) : rig_(rig), inner_(*rig.lm.model, s) {}
  void propose(std::span<const spec::DraftQuery> queries, std::span<spec::Draft> out) override {
    inner_.propose(queries, out);
    for (size_t q = 0; q < queries.size(); ++q) {
      spec::DraftQuery fresh_q = queries[q];
      auto fresh = rig_.lm.model->new_state();
      const int64_t n = static_cast<int64_t>(fresh_q.tokens.size()) - 1;
      std::vector<float> lg(static_cast<size_t>(rig_.vocab()));
      rig_.batches->forward(fresh_q.tokens.data(), n, fresh, lg.data(), /*last_only=*/true);
      fresh_q.state = &fresh;
      spec::Draft d;
      inner_.propose(std::span<const spec::DraftQuery>(&fresh_q, 1), std::span<spec::Draft>(&d, 1));
      ++checked_;
      if (d.tokens != out[q].tokens || d.confidence != out[q].confidence || d.probs != out[q].probs) ++mismatches_;
    }
  }
  int64_t checked() const { return checked_; }
  int64_t mismatches() const { return mismatches_; }

 private:
  EngineRig& rig_;
  spec::DsparkDrafter inner_;
  int64_t checked_ = 0, mismatches_ = 0;
};

// Speculation with drafter d, K = k; adaptive verification on (with the curve `cost`, or the
// engine's measured one) or off.
engine::EngineOptions with_drafter(engine::EngineOptions o, std::shared_ptr<spec::Drafter> d, int64_t k, bool adaptive,
                                   std::function<double(int64_t)> cost = nullptr) {
  o.speculative.drafter = std::move(d);
  o.speculative.num_speculative_tokens = k;
  o.speculative.adaptive = adaptive;
  // A given curve: the cut itself is under test, so every step drafts (no gate).
  if (cost) {
    o.speculative.step_cost = std::make_shared<spec::FixedStepCost>(std::move(cost));
    o.speculative.skip_unpaid_rounds = false;
  }
  return o;
}

std::vector<int32_t> ids_of(const std::vector<int64_t>& v) { return std::vector<int32_t>(v.begin(), v.end()); }

// A mixed batch: prompts of 1..`max_len` tokens, greedy and seeded sampling (top-k / top-p /
// min-p), penalties, min_tokens, n = 2, logprobs.
std::vector<engine::EngineRequest> mixed_batch(int n, int max_len, int64_t vocab) {
  std::vector<engine::EngineRequest> reqs;
  for (int i = 0; i < n; ++i) {
    const int len = 1 + (i * 149) % max_len;
    std::vector<int32_t> ids;
    for (int t = 0; t < len; ++t) ids.push_back(static_cast<int32_t>(3 + (i * 131 + t * 17) % (vocab - 4)));
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
  return reqs;
}

}  // namespace

// The DSpark fixture: greedy and seeded requests with greedy drafts equal plain decoding (on the
// model without its stages) under the default budget, chunked prefill, exact prefill (every
// draft checked against a fresh state) and a memory budget that preempts.
TEST(DsparkEngine, FixtureGreedyDraftsEqualPlainDecoding) {
  const std::string dir = deepinfer::testing::dspark_checkpoint("dspark_engine");
  EngineRig plain(dir, engine::LoadFormat::kAuto), rig(dir, engine::LoadFormat::kAuto, 0, "cpu", with_dspark());
  ASSERT_TRUE(rig.lm.model->dspark());
  const auto prompt = ids_of(core::read_npy_ints(testing_util::fixture("full") + "/golden/tokens.npy"));
  ASSERT_GE(prompt.size(), 26u);
  std::vector<engine::EngineRequest> reqs;
  for (int i = 0; i < 6; ++i) {
    SamplingParams p;
    p.max_tokens = 20;
    p.ignore_eos = true;
    p.temperature = i % 2 ? 0.9f : 0.0f;
    p.seed = static_cast<uint64_t>(3 + i);
    p.logprobs = i % 3 == 0 ? std::optional<int>(2) : std::nullopt;
    if (i == 3) p.presence_penalty = 0.5f;
    reqs.push_back(request(std::vector<int32_t>(prompt.begin(), prompt.begin() + 1 + i * 5), p, static_cast<size_t>(i)));
  }
  struct Setup {
    std::string name;
    engine::EngineOptions o;
  };
  std::vector<Setup> setups{{"default", rig.options()}};
  setups.push_back({"token budget 7", rig.options()});
  setups.back().o.sched.max_num_batched_tokens = 7;
  setups.push_back({"exact prefill", rig.options()});
  setups.back().o.sched.exact_prefill = true;
  setups.push_back({"memory budget", rig.options()});
  setups.back().o.memory_budget_bytes = 3 * model::sequence_state_bytes(rig.lm.model->config(), 30, true);
  for (const Setup& s : setups) {
    const auto ref = plain.run(reqs, s.o);
    for (const auto& o : ref) ASSERT_TRUE(o.error.empty()) << o.error;
    for (int64_t k : {2, 5})
      for (int adaptive = 0; adaptive < 3; ++adaptive) {
        const std::string what = s.name + ", k " + std::to_string(k) + ", adaptive " + std::to_string(adaptive);
        auto checking = std::make_shared<CheckingDrafter>(rig, spec::DraftSampling::kGreedy);
        std::shared_ptr<spec::Drafter> d = checking;
        if (s.name != "exact prefill") d = std::make_shared<spec::DsparkDrafter>(*rig.lm.model, spec::DraftSampling::kGreedy);
        // Adaptive 1: the measured curve; 2: a fixed cost of 3 rows, which cuts drafts to their
        // confident prefixes.
        std::function<double(int64_t)> cost;
        if (adaptive == 2) cost = [](int64_t r) { return 3.0 + static_cast<double>(r); };
        engine::StepTimes t;
        expect_same(ref, rig.run(reqs, with_drafter(s.o, d, k, adaptive > 0, cost), &t), what);
        if (adaptive == 2) {
          EXPECT_GT(t.spec_chosen_hist[0], 0) << what;  // some drafts not verified at all
          EXPECT_GT(t.spec_chosen_hist[1], 0) << what;  // some cut to one token
        }
        EXPECT_GT(t.spec_rounds, 0) << what;
        if (adaptive < 2) {
          EXPECT_GT(t.spec_drafted, t.spec_rounds) << what;
        }
        if (s.name == "memory budget") {
          EXPECT_GT(t.preemptions, 0) << what;
        }
        if (s.name == "exact prefill") {
          EXPECT_GT(checking->checked(), 0) << what;
          EXPECT_EQ(checking->mismatches(), 0) << what;
        }
      }
    // Each request alone (K = 5, adaptive on the measured curve).
    if (s.name == "default")
      for (size_t i = 0; i < reqs.size(); ++i) {
        auto d = std::make_shared<spec::DsparkDrafter>(*rig.lm.model, spec::DraftSampling::kGreedy);
        expect_same({ref[i]}, rig.run({reqs[i]}, with_drafter(s.o, d, 5, true)), "alone, request " + std::to_string(i));
      }
  }
}

// Random-weight models with draft stages: mixed batches (greedy, seeded sampling, penalties,
// n = 2) with greedy drafts equal plain decoding under two token budgets (adaptive verification
// on and off) and a memory budget that preempts sequences with drafts (adaptive off: whole
// drafts).
TEST(DsparkEngine, RandomModelMixedBatchesEqualPlainDecoding) {
  const std::string dir = dspark_random_dir();
  EngineRig plain(dir, engine::LoadFormat::kRandom, 1), rig(dir, engine::LoadFormat::kRandom, 1, "cpu", with_dspark());
  const auto reqs = mixed_batch(kSanitized ? 8 : 16, 160, rig.vocab());
  for (int64_t budget : kSanitized ? std::vector<int64_t>{7} : std::vector<int64_t>{7, 64}) {
    engine::EngineOptions o = rig.options();
    o.sched.max_num_batched_tokens = budget;
    const auto ref = plain.run(reqs, o);
    engine::StepTimes t;
    for (bool adaptive : {false, true}) {
      auto d = std::make_shared<spec::DsparkDrafter>(*rig.lm.model, spec::DraftSampling::kGreedy);
      expect_same(ref, rig.run(reqs, with_drafter(o, d, 4, adaptive), &t),
                  "token budget " + std::to_string(budget) + (adaptive ? ", adaptive" : ""));
      EXPECT_GT(t.spec_rounds, 0);
    }
  }
  engine::EngineOptions tight = rig.options();
  tight.memory_budget_bytes = (kSanitized ? 2 : 4) * model::sequence_state_bytes(rig.lm.model->config(), 170, true);
  engine::StepTimes t;
  const auto ref = plain.run(reqs, tight);
  auto d = std::make_shared<spec::DsparkDrafter>(*rig.lm.model, spec::DraftSampling::kGreedy);
  expect_same(ref, rig.run(reqs, with_drafter(tight, d, 5, false), &t), "memory budget");
  EXPECT_GT(t.preemptions, 0);
}

// On every backend (the GPU's included): a mixed batch with DSpark's greedy drafts (adaptive
// verification on the measured curve) equals plain decoding on that backend, and probabilistic
// drafts give a seeded request the same tokens twice (adaptive off).
class DsparkOnDevice : public ::testing::TestWithParam<std::string> {};

TEST_P(DsparkOnDevice, GreedyDraftsEqualPlainDecoding) {
  const std::string dir = dspark_random_dir();
  EngineRig plain(dir, engine::LoadFormat::kRandom, 1, GetParam()), rig(dir, engine::LoadFormat::kRandom, 1, GetParam(), with_dspark());
  const auto reqs = mixed_batch(8, 100, rig.vocab());
  engine::EngineOptions o = rig.options();
  o.sched.max_num_batched_tokens = 64;
  const auto ref = plain.run(reqs, o);
  engine::StepTimes t;
  auto d = std::make_shared<spec::DsparkDrafter>(*rig.lm.model, spec::DraftSampling::kGreedy);
  expect_same(ref, rig.run(reqs, with_drafter(o, d, 5, true), &t), GetParam());
  EXPECT_GT(t.spec_rounds, 0);
  EXPECT_GT(t.spec_drafted, 0);
  auto q = std::make_shared<spec::DsparkDrafter>(*rig.lm.model, spec::DraftSampling::kProbabilistic);
  const auto a = rig.run(reqs, with_drafter(o, q, 3, false)), b = rig.run(reqs, with_drafter(o, q, 3, false));
  expect_same(a, b, GetParam() + ", probabilistic drafts twice");
}

INSTANTIATE_TEST_SUITE_P(Devices, DsparkOnDevice, ::testing::ValuesIn(deepinfer::testing::devices()),
                         deepinfer::testing::device_name);

// Probabilistic drafts: a seeded request's output is the same in any batch (where the token
// budget leaves every draft whole: the verified length decides which uniforms are read); greedy
// requests beside them still equal plain decoding; the drafts carry their distributions.
TEST(DsparkEngine, ProbabilisticDraftsAreReproducibleForASeed) {
  const std::string dir = dspark_random_dir();
  EngineRig plain(dir, engine::LoadFormat::kRandom, 2), rig(dir, engine::LoadFormat::kRandom, 2, "cpu", with_dspark());
  const auto reqs = mixed_batch(12, 40, rig.vocab());
  auto run = [&](int64_t seqs, engine::StepTimes* t) {
    engine::EngineOptions o = rig.options();
    o.sched.max_num_seqs = seqs;
    auto d = std::make_shared<spec::DsparkDrafter>(*rig.lm.model, spec::DraftSampling::kProbabilistic);
    return rig.run(reqs, with_drafter(o, d, 5, /*adaptive=*/false), t);
  };
  engine::StepTimes t;
  const auto a = run(64, &t), b = run(1, nullptr), c = run(5, nullptr);
  expect_same(a, b, "probabilistic drafts, other batches");
  expect_same(a, c, "probabilistic drafts, other batches");
  EXPECT_GT(t.spec_accepted, 0);
  const auto ref = plain.run(reqs, rig.options());
  for (size_t i = 0; i < reqs.size(); ++i)
    if (reqs[i].params.temperature == 0) {
      EXPECT_EQ(a[i].outputs[0].token_ids, ref[i].outputs[0].token_ids) << "greedy request " << i;
    }
  // The sampled requests did take other paths than plain decoding's (their drafts' draws and
  // the rejection rule's uniforms differ from the plain draws).
  size_t differ = 0;
  for (size_t i = 0; i < reqs.size(); ++i)
    if (reqs[i].params.temperature > 0)
      for (size_t k = 0; k < a[i].outputs.size(); ++k) differ += a[i].outputs[k].token_ids != ref[i].outputs[k].token_ids;
  EXPECT_GT(differ, 0u);
  // Every draft of a sampled request carries its distribution, which gives its token mass.
  EngineRig& r = rig;
  auto fresh = r.lm.model->new_state();
  const std::vector<int64_t> toks{5, 9, 13, 200, 17};
  std::vector<float> lg(static_cast<size_t>(r.vocab()));
  r.batches->forward(toks.data(), 4, fresh, lg.data(), true);
  SamplingParams p;
  p.temperature = 1.0f;
  spec::DraftQuery q{.seq_id = 0, .seed = 11, .tokens = toks, .prompt_len = 2, .k = 5, .params = &p, .state = &fresh};
  spec::DsparkDrafter pd(*r.lm.model, spec::DraftSampling::kProbabilistic);
  spec::Draft d;
  pd.propose(std::span<const spec::DraftQuery>(&q, 1), std::span<spec::Draft>(&d, 1));
  ASSERT_EQ(d.tokens.size(), 5u);
  ASSERT_EQ(d.probs.size(), 5u * static_cast<size_t>(r.vocab()));
  ASSERT_EQ(d.confidence.size(), 5u);
  for (size_t j = 0; j < 5; ++j) {
    double sum = 0;
    for (int64_t v = 0; v < r.vocab(); ++v) sum += d.probs[j * static_cast<size_t>(r.vocab()) + static_cast<size_t>(v)];
    EXPECT_NEAR(sum, 1.0, 1e-4);
    EXPECT_GT(d.probs[j * static_cast<size_t>(r.vocab()) + static_cast<size_t>(d.tokens[j])], 0.0f);
    EXPECT_GT(d.confidence[j], 0.0f);
    EXPECT_LT(d.confidence[j], 1.0f);
  }
  // The same query drafts the same tokens; another seed other ones; greedy drafting the argmax.
  spec::Draft again, other, greedy;
  pd.propose(std::span<const spec::DraftQuery>(&q, 1), std::span<spec::Draft>(&again, 1));
  EXPECT_EQ(again.tokens, d.tokens);
  spec::DraftQuery q2 = q;
  q2.seed = 12;
  pd.propose(std::span<const spec::DraftQuery>(&q2, 1), std::span<spec::Draft>(&other, 1));
  EXPECT_NE(other.tokens, d.tokens);
  spec::DsparkDrafter gd(*r.lm.model, spec::DraftSampling::kGreedy);
  gd.propose(std::span<const spec::DraftQuery>(&q, 1), std::span<spec::Draft>(&greedy, 1));
  EXPECT_TRUE(greedy.probs.empty());
  const model::Drafts m = r.lm.model->draft({{.state = &fresh, .anchor = toks.back()}});
  EXPECT_EQ(greedy.tokens, std::vector<int64_t>(m.ids.begin() + 1, m.ids.end()));
}

// Probabilistic DSpark drafts keep the target's distribution: four tokens at temperature 1 from
// a random-weight model with a vocabulary of 4, over seeded requests, against the exact product
// of the model's conditionals (chi-square); adaptive verification cuts the drafts by their
// confidences (which depend only on the tokens before each draft token), under a curve that
// makes rows past 2,500 dear.
TEST(DsparkEngine, ProbabilisticDraftsKeepTheTargetsDistribution) {
  const std::string dir = dspark_random_dir(4);
  EngineRig rig(dir, engine::LoadFormat::kRandom, 5, "cpu", with_dspark());
  constexpr int64_t V = 4, kTokens = 4, kRuns = kSanitized ? 1500 : 6000;
  const std::vector<int32_t> prompt{2, 3, 0};
  SamplingParams p;
  p.temperature = 1.0f;
  p.max_tokens = kTokens;
  p.ignore_eos = true;
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
  auto d = std::make_shared<spec::DsparkDrafter>(*rig.lm.model, spec::DraftSampling::kProbabilistic);
  engine::StepTimes t;
  const auto outs = rig.run(reqs, with_drafter(o, d, 3, true, [](int64_t r) { return r <= 2500 ? 1.0 : 1e6; }), &t);
  std::vector<int64_t> counts(expected.size(), 0);
  for (const auto& out : outs) {
    ASSERT_EQ(out.outputs[0].token_ids.size(), static_cast<size_t>(kTokens));
    size_t cell = 0;
    for (int32_t tok : out.outputs[0].token_ids) cell = cell * V + static_cast<size_t>(tok);
    ++counts[cell];
  }
  const auto chi = deepinfer::testing::chi_square(counts, expected, kRuns);
  EXPECT_EQ(chi.impossible, 0);
  EXPECT_GT(chi.p_value, 1e-3) << "chi2 " << chi.stat << " over " << chi.bins << " cells";
  EXPECT_GT(t.spec_accepted, 0);
  EXPECT_LT(t.spec_accepted, t.spec_drafted);
  // (max_tokens 4: a draft has at most 2 tokens.) Cut drafts among the whole ones.
  EXPECT_GT(t.spec_chosen_hist[0] + t.spec_chosen_hist[1], 0);
  EXPECT_GT(t.spec_chosen_hist[2], 0);
}

// LLM: EngineConfig.speculative = dspark on the fixture gives plain decoding's greedy output and
// verifies drafts; a checkpoint whose config has stages but no mtp.* tensors, and an unknown
// draft sampling, are errors that say so.
TEST(DsparkEngine, LlmRunsTheDrafter) {
  EngineConfig c;
  c.model = deepinfer::testing::dspark_checkpoint("dspark_llm");
  c.threads = 2;
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 16;
  p.ignore_eos = true;
  const std::vector<Prompt> prompts{Prompt::from_ids({5, 9, 100, 7}), Prompt::from_ids({300, 2, 8})};
  LLM plain(c);
  const auto ref = plain.generate(prompts, p);
  EXPECT_EQ(plain.last_stats().spec_rounds, 0);
  for (const char* sampling : {"greedy", "probabilistic"}) {
    c.speculative = {.method = "dspark", .num_speculative_tokens = 3, .draft_sampling = sampling, .adaptive = true};
    LLM llm(c);
    const auto got = llm.generate(prompts, p);
    for (size_t i = 0; i < ref.size(); ++i) EXPECT_EQ(got[i].outputs[0].token_ids, ref[i].outputs[0].token_ids) << sampling;
    // The statistics: the histograms agree with the totals.
    const EngineStats& st = llm.last_stats();
    EXPECT_GT(st.spec_rounds, 0) << sampling;
    ASSERT_EQ(st.spec_accepted_hist.size(), 4u);
    ASSERT_EQ(st.spec_chosen_hist.size(), 4u);
    int64_t rounds = 0, accepted = 0, chosen = 0, chosen_tokens = 0;
    for (int64_t j = 0; j <= 3; ++j) {
      rounds += st.spec_accepted_hist[static_cast<size_t>(j)];
      accepted += j * st.spec_accepted_hist[static_cast<size_t>(j)];
      chosen += st.spec_chosen_hist[static_cast<size_t>(j)];
      chosen_tokens += j * st.spec_chosen_hist[static_cast<size_t>(j)];
    }
    EXPECT_EQ(rounds, st.spec_rounds);
    EXPECT_EQ(accepted, st.spec_accepted);
    EXPECT_GE(chosen, st.spec_rounds);
    EXPECT_GE(chosen_tokens, st.spec_drafted);  // (the step's budgets may verify fewer than chosen)
    EXPECT_DOUBLE_EQ(st.mean_acceptance_length(), static_cast<double>(st.spec_accepted + st.spec_rounds) / static_cast<double>(st.spec_rounds));
    EXPECT_GT(st.spec_draft_s, 0.0);
    EXPECT_GT(st.spec_verify_s, 0.0);
    EXPECT_LE(st.spec_verify_s, st.wall_s);
  }
  auto error_of = [](const EngineConfig& cfg) -> std::string {
    try {
      LLM llm(cfg);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  EngineConfig bare = c;
  bare.speculative.draft_sampling = "greedy";
  bare.model = deepinfer::testing::dspark_checkpoint("dspark_llm_bare", /*mtp=*/false);
  EXPECT_THAT(error_of(bare), HasSubstr("the checkpoint has no mtp.* tensors"));
  EngineConfig bad = c;
  bad.speculative.draft_sampling = "beam";
  EXPECT_THAT(error_of(bad), HasSubstr("EngineConfig.speculative.draft_sampling: expected \"greedy\" or \"probabilistic\", got \"beam\""));
}
