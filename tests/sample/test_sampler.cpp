// Sampler: greedy and min_tokens, vLLM penalties, exact filter sets, determinism across
// batches and threads, raw logprobs, Philox known answers. Statistics: test_sampler_stats.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <ostream>
#include <string>
#include <vector>

#include "core/rng.h"
#include "core/thread_pool.h"
#include "sample/rng.h"
#include "sample/sampler.h"

using namespace deepinfer;
using namespace deepinfer::sample;

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

SampleRequest request(const std::vector<float>& logits, const SamplingParams& p, uint64_t seed = 0,
                      uint64_t step = 0) {
  SampleRequest r;
  r.logits = logits;
  r.params = &p;
  r.seed = seed;
  r.step = step;
  return r;
}

SamplingParams greedy() {
  SamplingParams p;
  p.temperature = 0.0f;
  return p;
}

std::vector<double> double_log_softmax(const std::vector<float>& l) {
  long double m = -INFINITY, s = 0;
  for (float v : l) m = std::max<long double>(m, v);
  for (float v : l) s += std::exp(static_cast<long double>(v) - m);
  std::vector<double> out;
  for (float v : l) out.push_back(static_cast<double>(static_cast<long double>(v) - m - std::log(s)));
  return out;
}

}  // namespace

// ------------------------------------------------------------------------------------------
// Greedy and min_tokens

TEST(SamplerGreedy, PicksArgmax) {
  Sampler s;
  const SamplingParams p = greedy();
  std::vector<float> l = {0.1f, 3.0f, -1.0f, 2.9f, -7.0f};
  EXPECT_EQ(s.sample(request(l, p)).token, 1);
  l = {-5.0f, -4.0f, -3.0f, -2.5f, -2.75f};
  EXPECT_EQ(s.sample(request(l, p)).token, 3);
  SamplingParams tiny = p;
  tiny.temperature = 5e-6f;  // below vLLM's 1e-5: still greedy
  EXPECT_EQ(s.sample(request(l, tiny, 7, 3)).token, 3);
}

TEST(SamplerGreedy, TiesGoToLowestId) {
  Sampler s;
  const SamplingParams p = greedy();
  std::vector<float> l = {1.0f, 5.0f, 2.0f, 5.0f, 5.0f};
  EXPECT_EQ(s.sample(request(l, p)).token, 1);
  l = {kNegInf, kNegInf, kNegInf};
  EXPECT_EQ(s.sample(request(l, p)).token, 0);
  l = {std::numeric_limits<float>::quiet_NaN(), 1.0f, 1.0f};
  EXPECT_EQ(s.sample(request(l, p)).token, 1) << "NaN counts as -inf";
}

TEST(SamplerGreedy, MinTokensBlocksEos) {
  Sampler s;
  SamplingParams p = greedy();
  p.min_tokens = 2;
  const std::vector<float> l = {0.5f, 1.0f, 0.2f, 9.0f};  // EOS = 3 is the argmax
  const std::vector<int32_t> eos = {3};
  std::vector<int32_t> out = {1};
  SampleRequest r = request(l, p);
  r.eos_ids = eos;
  r.output_ids = out;
  EXPECT_EQ(s.sample(r).token, 1) << "1 token generated < min_tokens 2: EOS blocked";
  out = {1, 1};
  r.output_ids = out;
  EXPECT_EQ(s.sample(r).token, 3) << "min_tokens reached: EOS allowed";
  p.min_tokens = 0;
  r.output_ids = {};
  EXPECT_EQ(s.sample(r).token, 3);
}

TEST(SamplerGreedy, MinTokensSkipsEosIdsOutsideTheRow) {
  // An EOS id the row does not have (a config naming an id beyond the vocabulary) cannot be
  // drawn: holding it back is a no-op, not a failed internal check.
  Sampler s;
  SamplingParams p = greedy();
  p.min_tokens = 2;
  const std::vector<float> l = {0.5f, 1.0f, 0.2f, 9.0f};
  const std::vector<int32_t> eos = {3, 4, 100000, -1};
  SampleRequest r = request(l, p);
  r.eos_ids = eos;
  EXPECT_EQ(s.sample(r).token, 1);
}

TEST(SamplerGreedy, MinTokensBlocksStopTokenIds) {
  Sampler s;
  SamplingParams p = greedy();
  p.min_tokens = 1;
  p.stop_token_ids = {2, 0};
  const std::vector<float> l = {8.0f, 1.0f, 9.0f, 7.0f};
  const std::vector<int32_t> eos = {1};
  SampleRequest r = request(l, p);
  r.eos_ids = eos;
  EXPECT_EQ(s.sample(r).token, 3);
  std::vector<float> got(4);
  s.processed_logits(r, got);
  EXPECT_EQ(got, (std::vector<float>{kNegInf, kNegInf, kNegInf, 7.0f}));
  const std::vector<int32_t> out = {3};
  r.output_ids = out;
  EXPECT_EQ(s.sample(r).token, 2);
}

TEST(SamplerGreedy, MinTokensAlsoBlocksWhenSampling) {
  Sampler s;
  SamplingParams p;
  p.min_tokens = 3;
  p.stop_token_ids = {0};
  const std::vector<float> l = {5.0f, 0.0f, 0.0f, 5.0f};
  const std::vector<int32_t> eos = {3};
  SampleRequest r = request(l, p);
  r.eos_ids = eos;
  std::vector<double> dist(4);
  s.distribution(r, dist);
  EXPECT_EQ(dist[0], 0.0);
  EXPECT_EQ(dist[3], 0.0);
  EXPECT_DOUBLE_EQ(dist[1], 0.5);
  for (uint64_t step = 0; step < 200; ++step) {
    r.step = step;
    const int32_t t = s.sample(r).token;
    EXPECT_TRUE(t == 1 || t == 2) << t;
  }
}

// ------------------------------------------------------------------------------------------
// Penalties (vLLM's apply_penalties; all values below are exact in float32)

TEST(SamplerPenalties, RepetitionOverPromptAndOutput) {
  Sampler s;
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  const std::vector<float> l = {2.0f, -1.0f, 0.5f, -0.5f, 3.0f, 0.0f, -4.0f};
  const std::vector<int32_t> prompt = {0, 1, 0, 5};  // repeats count once
  const std::vector<int32_t> out = {2, 3, 3};
  SampleRequest r = request(l, p);
  r.prompt_ids = prompt;
  r.output_ids = out;
  std::vector<float> got(l.size());
  s.processed_logits(r, got);
  // > 0 divided, <= 0 multiplied; tokens 4 and 6 appear nowhere.
  EXPECT_EQ(got, (std::vector<float>{1.0f, -2.0f, 0.25f, -1.0f, 3.0f, 0.0f, -4.0f}));
  p.repetition_penalty = 0.5f;  // < 1 encourages repeats
  s.processed_logits(r, got);
  EXPECT_EQ(got, (std::vector<float>{4.0f, -0.5f, 1.0f, -0.25f, 3.0f, 0.0f, -4.0f}));
}

TEST(SamplerPenalties, PresenceAndFrequencyOnlyCountOutput) {
  Sampler s;
  SamplingParams p;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  const std::vector<float> l = {2.0f, -1.0f, 0.5f, -0.5f, 3.0f};
  const std::vector<int32_t> prompt = {0, 1, 4};
  const std::vector<int32_t> out = {2, 3, 3, 3};
  SampleRequest r = request(l, p);
  r.prompt_ids = prompt;
  r.output_ids = out;
  std::vector<float> got(l.size());
  s.processed_logits(r, got);
  // token 2: 0.5 - 0.25*1 - 0.5; token 3: -0.5 - 0.25*3 - 0.5; prompt tokens untouched.
  EXPECT_EQ(got, (std::vector<float>{2.0f, -1.0f, -0.25f, -1.75f, 3.0f}));
  p.presence_penalty = -1.0f;  // negative: encourages
  p.frequency_penalty = -0.5f;
  s.processed_logits(r, got);
  EXPECT_EQ(got, (std::vector<float>{2.0f, -1.0f, 2.0f, 2.0f, 3.0f}));
}

TEST(SamplerPenalties, AllThreeInVllmOrder) {
  Sampler s;
  SamplingParams p;
  p.repetition_penalty = 1.5f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  const std::vector<float> l = {3.0f, -1.0f, 0.75f, 6.0f};
  const std::vector<int32_t> prompt = {0};
  const std::vector<int32_t> out = {1, 1, 2};
  SampleRequest r = request(l, p);
  r.prompt_ids = prompt;
  r.output_ids = out;
  std::vector<float> got(l.size());
  s.processed_logits(r, got);
  // 0: 3/1.5 = 2 (prompt only); 1: -1*1.5 - 0.25*2 - 0.5 = -2.5; 2: 0.75/1.5 - 0.25 - 0.5 = -0.25.
  EXPECT_EQ(got, (std::vector<float>{2.0f, -2.5f, -0.25f, 6.0f}));
  EXPECT_EQ(s.sample(request(l, greedy())).token, 3);
}

TEST(SamplerPenalties, CountsDoNotLeakBetweenCalls) {
  Sampler s;
  SamplingParams p;
  p.frequency_penalty = 1.0f;
  const std::vector<float> l = {0.0f, 0.0f, 0.0f};
  const std::vector<int32_t> out1 = {0, 0, 1}, out2 = {2};
  SampleRequest r = request(l, p);
  r.output_ids = out1;
  std::vector<float> got(3);
  s.processed_logits(r, got);
  EXPECT_EQ(got, (std::vector<float>{-2.0f, -1.0f, 0.0f}));
  r.output_ids = out2;
  s.processed_logits(r, got);
  EXPECT_EQ(got, (std::vector<float>{0.0f, 0.0f, -1.0f}));
}

TEST(SamplerPenalties, GreedyUsesPenalisedLogits) {
  Sampler s;
  SamplingParams p = greedy();
  p.presence_penalty = 1.0f;
  const std::vector<float> l = {2.0f, 1.5f};
  const std::vector<int32_t> out = {0};
  SampleRequest r = request(l, p);
  r.output_ids = out;
  EXPECT_EQ(s.sample(r).token, 1);
}

// ------------------------------------------------------------------------------------------
// Filters: exact kept sets

TEST(SamplerFilters, TopPKeepsTheCrossingTokenAndBreaksTiesById) {
  Sampler s;
  SamplingParams p;
  p.top_p = 0.5f;
  // probabilities 0.4, 0.3, 0.2, 0.1 (ids shuffled)
  const std::vector<float> l = {std::log(0.2f), std::log(0.4f), std::log(0.1f), std::log(0.3f)};
  std::vector<double> d(4);
  s.distribution(request(l, p), d);
  EXPECT_EQ(d[0], 0.0);
  EXPECT_EQ(d[2], 0.0);
  EXPECT_NEAR(d[1], 0.4 / 0.7, 1e-7);
  EXPECT_NEAR(d[3], 0.3 / 0.7, 1e-7);
  // Tie: ids 1 and 3 have equal mass 0.25 after id 0's 0.5; top_p 0.6 needs only one: id 1.
  const std::vector<float> t = {std::log(0.5f), std::log(0.25f), kNegInf, std::log(0.25f)};
  p.top_p = 0.6f;
  s.distribution(request(t, p), d);
  EXPECT_EQ(d, (std::vector<double>{d[0], d[1], 0.0, 0.0}));
  EXPECT_NEAR(d[0], 2.0 / 3.0, 1e-7);
}

TEST(SamplerFilters, TopKKeepsTiesWithTheKth) {
  Sampler s;
  SamplingParams p;
  p.top_k = 2;
  const std::vector<float> l = {1.0f, 3.0f, 2.0f, 2.0f, 0.0f};
  std::vector<double> d(5);
  s.distribution(request(l, p), d);
  EXPECT_EQ(d[0], 0.0);
  EXPECT_EQ(d[4], 0.0);
  EXPECT_GT(d[2], 0.0) << "vLLM masks logits < k-th value: ties stay";
  EXPECT_GT(d[3], 0.0);
  p.top_k = 5;  // == vocab: off
  s.distribution(request(l, p), d);
  EXPECT_GT(d[4], 0.0);
  p.top_k = -1;
  s.distribution(request(l, p), d);
  EXPECT_GT(d[4], 0.0);
}

TEST(SamplerFilters, MinPIsRelativeToTheMax) {
  Sampler s;
  SamplingParams p;
  p.min_p = 0.25f;
  // probability ratios to the max: 1, 0.5, 0.3, 0.2
  const std::vector<float> l = {std::log(0.2f), std::log(1.0f), std::log(0.5f), std::log(0.3f)};
  std::vector<double> d(4);
  s.distribution(request(l, p), d);
  EXPECT_EQ(d[0], 0.0);
  EXPECT_NEAR(d[1], 1.0 / 1.8, 1e-7);
  EXPECT_NEAR(d[2], 0.5 / 1.8, 1e-7);
  EXPECT_NEAR(d[3], 0.3 / 1.8, 1e-7);
}

TEST(SamplerFilters, MinPRunsBeforeTopP) {
  // vLLM v1: min-p (an argmax-invariant processor) before top-k/top-p. probs 0.5, 0.2, 0.15,
  // 0.1, 0.05; min_p 0.25 drops 0.1 and 0.05, so top-p 0.8 sees 0.5/0.85, 0.2/0.85 (cum
  // 0.82 >= 0.8): keeps two. top-p first would have kept three (0.5+0.2 < 0.8).
  Sampler s;
  SamplingParams p;
  p.min_p = 0.25f;
  p.top_p = 0.8f;
  const std::vector<float> l = {std::log(0.5f), std::log(0.2f), std::log(0.15f), std::log(0.1f), std::log(0.05f)};
  std::vector<double> d(5);
  s.distribution(request(l, p), d);
  EXPECT_GT(d[0], 0.0);
  EXPECT_GT(d[1], 0.0);
  EXPECT_EQ(d[2], 0.0);
  EXPECT_EQ(d[3], 0.0);
  EXPECT_EQ(d[4], 0.0);
}

// ------------------------------------------------------------------------------------------
// Determinism

TEST(SamplerDeterminism, SameSeedAndStepSameToken) {
  Sampler a, b;
  SamplingParams p;
  const std::vector<float> l = {0.0f, 0.5f, -0.5f, 1.0f, 0.25f, -1.0f, 0.75f, 0.1f};
  int distinct_changes = 0;
  int32_t prev = -1;
  for (uint64_t step = 0; step < 1000; ++step) {
    const int32_t ta = a.sample(request(l, p, 42, step)).token;
    EXPECT_EQ(ta, b.sample(request(l, p, 42, step)).token);
    EXPECT_EQ(ta, a.sample(request(l, p, 42, step)).token);
    distinct_changes += ta != prev;
    prev = ta;
  }
  EXPECT_GT(distinct_changes, 500) << "consecutive steps must draw fresh numbers";
}

TEST(SamplerDeterminism, DifferentSeedsAndStreamsDiffer) {
  Sampler s;
  SamplingParams p;
  const std::vector<float> flat(16, 0.0f);
  int seed_diff = 0, stream_diff = 0;
  for (uint64_t step = 0; step < 400; ++step) {
    SampleRequest r = request(flat, p, 1, step);
    const int32_t base = s.sample(r).token;
    r.seed = 2;
    seed_diff += s.sample(r).token != base;
    r.seed = 1;
    r.stream = 1;
    stream_diff += s.sample(r).token != base;
  }
  // Independent uniform draws over 16 tokens agree 1/16 of the time.
  EXPECT_GT(seed_diff, 340);
  EXPECT_GT(stream_diff, 340);
}

TEST(SamplerDeterminism, BatchEqualsEachRowAloneWithAnyThreads) {
  constexpr int64_t kVocab = 3000;
  constexpr int kRows = 40;
  std::vector<std::vector<float>> logits(kRows, std::vector<float>(kVocab));
  for (int r = 0; r < kRows; ++r)
    for (int64_t i = 0; i < kVocab; ++i)
      logits[static_cast<size_t>(r)][static_cast<size_t>(i)] =
          2.0f * core::normal01(static_cast<uint64_t>(r), static_cast<uint64_t>(i));
  std::vector<SamplingParams> params(kRows);
  std::vector<std::vector<int32_t>> prompts(kRows), outs(kRows);
  const std::vector<int32_t> eos = {7};
  for (int r = 0; r < kRows; ++r) {
    SamplingParams& p = params[static_cast<size_t>(r)];
    p.temperature = r % 5 == 0 ? 0.0f : 0.3f + 0.1f * static_cast<float>(r % 9);
    p.top_k = r % 3 == 0 ? 50 : 0;
    p.top_p = r % 4 == 1 ? 0.9f : 1.0f;
    p.min_p = r % 6 == 2 ? 0.05f : 0.0f;
    p.repetition_penalty = r % 2 == 0 ? 1.2f : 1.0f;
    p.presence_penalty = r % 7 == 3 ? 0.5f : 0.0f;
    p.frequency_penalty = r % 5 == 4 ? 0.3f : 0.0f;
    p.min_tokens = r % 8 == 0 ? 4 : 0;
    if (r % 3 == 2) p.logprobs = r % 6;
    for (int i = 0; i < 20 + r; ++i) prompts[static_cast<size_t>(r)].push_back(static_cast<int32_t>((i * 131 + r) % kVocab));
    for (int i = 0; i < r % 11; ++i) outs[static_cast<size_t>(r)].push_back(static_cast<int32_t>((i * 17 + 3 * r) % kVocab));
  }
  std::vector<SampleRequest> reqs(kRows);
  for (int r = 0; r < kRows; ++r) {
    const auto i = static_cast<size_t>(r);
    reqs[i] = request(logits[i], params[i], 1000 + static_cast<uint64_t>(r % 4), static_cast<uint64_t>(r % 11));
    reqs[i].prompt_ids = prompts[i];
    reqs[i].output_ids = outs[i];
    reqs[i].eos_ids = eos;
  }

  std::vector<SampleResult> alone(kRows);
  for (int r = 0; r < kRows; ++r) {
    Sampler fresh;
    alone[static_cast<size_t>(r)] = fresh.sample(reqs[static_cast<size_t>(r)]);
  }
  auto same = [](const SampleResult& a, const SampleResult& b) {
    if (a.token != b.token || a.logprob.has_value() != b.logprob.has_value()) return false;
    if (!a.logprob) return true;
    if (std::memcmp(&a.logprob->logprob, &b.logprob->logprob, sizeof(float)) != 0) return false;
    if (a.logprob->top.size() != b.logprob->top.size()) return false;
    for (size_t i = 0; i < a.logprob->top.size(); ++i)
      if (a.logprob->top[i].first != b.logprob->top[i].first ||
          std::memcmp(&a.logprob->top[i].second, &b.logprob->top[i].second, sizeof(float)) != 0)
        return false;
    return true;
  };

  core::ThreadPool pool1(1), pool2(2);
  for (core::ThreadPool* pool : {static_cast<core::ThreadPool*>(nullptr), &pool1, &pool2}) {
    Sampler s;
    std::vector<SampleResult> got(kRows);
    s.sample_batch(reqs, got, pool);
    for (int r = 0; r < kRows; ++r)
      EXPECT_TRUE(same(got[static_cast<size_t>(r)], alone[static_cast<size_t>(r)]))
          << "row " << r << " pool " << (pool ? pool->size() : 0);
    // Again with the same Sampler (reused scratch) on a reversed batch.
    std::vector<SampleRequest> rev(reqs.rbegin(), reqs.rend());
    s.sample_batch(rev, got, pool);
    for (int r = 0; r < kRows; ++r)
      EXPECT_TRUE(same(got[static_cast<size_t>(kRows - 1 - r)], alone[static_cast<size_t>(r)])) << "reversed row " << r;
  }
  std::vector<SampleResult> got(kRows);
  sample_batch(reqs, got, &pool2);
  for (int r = 0; r < kRows; ++r) EXPECT_TRUE(same(got[static_cast<size_t>(r)], alone[static_cast<size_t>(r)]));

  // The batch is not trivial: greedy and sampled rows both present, tokens vary.
  std::vector<int32_t> tokens;
  for (const auto& a : alone) tokens.push_back(a.token);
  std::sort(tokens.begin(), tokens.end());
  EXPECT_GT(std::unique(tokens.begin(), tokens.end()) - tokens.begin(), 10);
}

// ------------------------------------------------------------------------------------------
// Logprobs

TEST(SamplerLogprobs, RawLogSoftmaxAndTopN) {
  constexpr int64_t kVocab = 1000;
  std::vector<float> l(kVocab);
  for (int64_t i = 0; i < kVocab; ++i)
    l[static_cast<size_t>(i)] = std::clamp(2.0f * core::normal01(5, static_cast<uint64_t>(i)), -8.0f, 8.0f);
  l[10] = l[20] = l[30] = 9.0f;  // a three-way tie at the top
  l[500] = 8.5f;
  const std::vector<double> ref = double_log_softmax(l);

  SamplingParams p;
  p.logprobs = 5;
  p.temperature = 0.5f;  // neither temperature nor penalties touch the raw logprobs
  p.repetition_penalty = 1.7f;
  p.presence_penalty = 1.0f;
  const std::vector<int32_t> out = {10, 11, 500};
  Sampler s;
  for (uint64_t step = 0; step < 20; ++step) {
    SampleRequest r = request(l, p, 9, step);
    r.output_ids = out;
    const SampleResult res = s.sample(r);
    ASSERT_TRUE(res.logprob.has_value());
    const TokenLogprob& lp = *res.logprob;
    EXPECT_EQ(lp.token_id, res.token);
    EXPECT_NEAR(lp.logprob, ref[static_cast<size_t>(res.token)], 1e-6);
    ASSERT_EQ(lp.top.size(), 5u);
    const std::vector<int32_t> want_ids = {10, 20, 30, 500, lp.top[4].first};
    for (size_t k = 0; k < 5; ++k) {
      EXPECT_EQ(lp.top[k].first, want_ids[k]) << k;
      EXPECT_NEAR(lp.top[k].second, ref[static_cast<size_t>(lp.top[k].first)], 1e-6);
      if (k > 0) {
        EXPECT_GE(lp.top[k - 1].second, lp.top[k].second);
      }
    }
    // The fifth is the best of the rest.
    double best_rest = -INFINITY;
    for (int64_t i = 0; i < kVocab; ++i)
      if (i != 10 && i != 20 && i != 30 && i != 500) best_rest = std::max(best_rest, ref[static_cast<size_t>(i)]);
    EXPECT_NEAR(lp.top[4].second, best_rest, 1e-6);
  }
  std::vector<double> mine(kVocab);
  log_softmax(l, mine);
  for (int64_t i = 0; i < kVocab; ++i) EXPECT_NEAR(mine[static_cast<size_t>(i)], ref[static_cast<size_t>(i)], 1e-9);
}

TEST(SamplerLogprobs, ZeroMeansChosenOnlyAndUnsetMeansNone) {
  Sampler s;
  SamplingParams p = greedy();
  const std::vector<float> l = {0.0f, 1.0f, 2.0f};
  EXPECT_FALSE(s.sample(request(l, p)).logprob.has_value());
  p.logprobs = 0;
  const SampleResult res = s.sample(request(l, p));
  ASSERT_TRUE(res.logprob.has_value());
  EXPECT_EQ(res.logprob->token_id, 2);
  EXPECT_TRUE(res.logprob->top.empty());
  EXPECT_NEAR(res.logprob->logprob, double_log_softmax(l)[2], 1e-6);
  p.logprobs = 20;  // more than the vocabulary: all of it
  EXPECT_EQ(s.sample(request(l, p)).logprob->top.size(), 3u);
}

// ------------------------------------------------------------------------------------------
// RNG

TEST(SamplerRng, PhiloxKnownAnswers) {
  // Random123's kat_vectors for philox4x32_10.
  using A4 = std::array<uint32_t, 4>;
  EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, {0, 0}), (A4{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  EXPECT_EQ(philox4x32_10({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu}),
            (A4{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  EXPECT_EQ(philox4x32_10({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u}),
            (A4{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

TEST(SamplerRng, UniformIsInRangeAndKeyedByAllInputs) {
  double sum = 0;
  for (uint64_t i = 0; i < 100000; ++i) {
    const double u = draw_uniform(123, i);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
  }
  EXPECT_NEAR(sum / 100000, 0.5, 0.005);
  const double u = draw_uniform(1, 2, 3);
  EXPECT_EQ(u, draw_uniform(1, 2, 3));
  EXPECT_NE(u, draw_uniform(2, 2, 3));
  EXPECT_NE(u, draw_uniform(1, 3, 3));
  EXPECT_NE(u, draw_uniform(1, 2, 4));
  EXPECT_NE(draw_uniform(1, 1ull << 32), draw_uniform(1, 0));  // the step's high word counts
}
