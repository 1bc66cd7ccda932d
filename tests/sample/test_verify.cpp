// Draft verification (sample/verify.h): deterministic drafts are kept while they equal the
// target's draws; with probabilistic drafts the rejection rule gives the target's distribution:
// four tokens generated in verification rounds of k drafts, over 60,000 seeded runs, against
// the exact product of the target's conditionals (chi-square), for several sampling settings;
// the same test rejects the draft's own distribution, so it can tell them apart.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/rng.h"
#include "sample/chi_square.h"
#include "sample/rng.h"
#include "sample/sampler.h"
#include "sample/verify.h"

using namespace deepinfer;
using namespace deepinfer::sample;

namespace {

constexpr int64_t kVocab = 4, kTokens = 4;

uint64_t prefix_key(const std::vector<int64_t>& prefix, uint64_t salt) {
  uint64_t h = core::splitmix64(salt);
  for (int64_t t : prefix) h = core::splitmix64(h ^ static_cast<uint64_t>(t + 1));
  return h;
}

// The target's raw logits after a prefix: a fixed function of the prefix.
std::vector<float> target_logits(const std::vector<int64_t>& prefix) {
  std::vector<float> l(kVocab);
  uint64_t h = prefix_key(prefix, 1);
  for (auto& v : l) {
    h = core::splitmix64(h);
    v = static_cast<float>(static_cast<double>(h >> 11) * 0x1.0p-53 * 4.0 - 2.0);
  }
  return l;
}

// The draft's distribution after a prefix: another fixed function, every token possible.
std::vector<float> draft_probs(const std::vector<int64_t>& prefix) {
  std::vector<float> q(kVocab);
  uint64_t h = prefix_key(prefix, 2);
  float total = 0;
  for (auto& v : q) {
    h = core::splitmix64(h);
    v = 0.05f + static_cast<float>(static_cast<double>(h >> 11) * 0x1.0p-53);
    total += v;
  }
  for (auto& v : q) v /= total;
  return q;
}

int64_t draw_from(const std::vector<float>& q, double u) {
  double acc = 0;
  for (int64_t i = 0; i < kVocab; ++i) {
    acc += q[static_cast<size_t>(i)];
    if (u < acc) return i;
  }
  return kVocab - 1;
}

std::vector<int32_t> ids32(const std::vector<int64_t>& v) { return std::vector<int32_t>(v.begin(), v.end()); }

// The target's distribution after a prefix under params (the sampler's steps (1)-(4)).
std::vector<double> target_dist(Sampler& s, const SamplingParams& p, const std::vector<int64_t>& prefix) {
  const std::vector<float> l = target_logits(prefix);
  const std::vector<int32_t> out = ids32(prefix);
  SampleRequest r;
  r.logits = l;
  r.params = &p;
  r.output_ids = out;
  std::vector<double> d(kVocab);
  s.distribution(r, d);
  return d;
}

// kTokens tokens of one seeded run: rounds of up to k probabilistic drafts (never past the
// last token, as the engine caps them), each verified against the target's rows.
std::vector<int64_t> generate(Sampler& s, const SamplingParams& p, uint64_t seed, int64_t k) {
  std::vector<int64_t> out;
  while (static_cast<int64_t>(out.size()) < kTokens) {
    const int64_t pos = static_cast<int64_t>(out.size());
    const int64_t n = std::min(k, kTokens - pos - 1);
    std::vector<int64_t> draft, prefix = out;
    std::vector<float> q;
    for (int64_t j = 0; j < n; ++j) {
      const std::vector<float> qj = draft_probs(prefix);
      const int64_t d = draw_from(qj, draw_uniform(core::splitmix64(seed ^ 0xd4a7u), static_cast<uint64_t>(pos + j)));
      q.insert(q.end(), qj.begin(), qj.end());
      draft.push_back(d);
      prefix.push_back(d);
    }
    std::vector<std::vector<float>> logits;
    std::vector<std::vector<int32_t>> outs;
    std::vector<int64_t> ctx = out;
    for (int64_t j = 0; j <= n; ++j) {
      logits.push_back(target_logits(ctx));
      outs.push_back(ids32(ctx));
      if (j < n) ctx.push_back(draft[static_cast<size_t>(j)]);
    }
    std::vector<SampleRequest> rows(static_cast<size_t>(n + 1));
    for (size_t j = 0; j < rows.size(); ++j) {
      rows[j].logits = logits[j];
      rows[j].params = &p;
      rows[j].seed = seed;
      rows[j].step = static_cast<uint64_t>(pos) + j;
      rows[j].output_ids = outs[j];
    }
    const Verdict v = verify_probabilistic(s, rows, draft, q);
    EXPECT_LE(v.accepted, n);
    out.insert(out.end(), draft.begin(), draft.begin() + v.accepted);
    out.push_back(v.token);
  }
  out.resize(kTokens);
  return out;
}

size_t cell(const std::vector<int64_t>& t) {
  size_t c = 0;
  for (int64_t x : t) c = c * kVocab + static_cast<size_t>(x);
  return c;
}

// The exact joint distribution of kTokens tokens: the product of the target's conditionals.
std::vector<double> exact_joint(Sampler& s, const SamplingParams& p) {
  std::vector<double> e(static_cast<size_t>(std::pow(kVocab, kTokens)), 0.0);
  for (size_t c = 0; c < e.size(); ++c) {
    std::vector<int64_t> t(kTokens);
    for (int64_t i = kTokens - 1, x = static_cast<int64_t>(c); i >= 0; --i, x /= kVocab) t[static_cast<size_t>(i)] = x % kVocab;
    double pr = 1;
    for (int64_t i = 0; i < kTokens; ++i)
      pr *= target_dist(s, p, std::vector<int64_t>(t.begin(), t.begin() + i))[static_cast<size_t>(t[static_cast<size_t>(i)])];
    e[c] = pr;
  }
  return e;
}

struct Case {
  std::string name;
  float temperature;
  int top_k;
  float frequency_penalty;
};

class ProbabilisticDrafts : public ::testing::TestWithParam<Case> {};

}  // namespace

TEST(Verify, AcceptedPrefixStopsAtTheFirstDifference) {
  const std::vector<int64_t> draft{4, 7, 1};
  EXPECT_EQ(accepted_prefix(draft, std::vector<int32_t>{4, 7, 1, 9}), 3);
  EXPECT_EQ(accepted_prefix(draft, std::vector<int32_t>{4, 7, 2, 1}), 2);
  EXPECT_EQ(accepted_prefix(draft, std::vector<int32_t>{3, 7, 1, 9}), 0);
  EXPECT_EQ(accepted_prefix({}, std::vector<int32_t>{5}), 0);
}

TEST_P(ProbabilisticDrafts, OutputIsDistributedAsTheTargets) {
  const Case& c = GetParam();
  SamplingParams p;
  p.temperature = c.temperature;
  p.top_k = c.top_k;
  p.frequency_penalty = c.frequency_penalty;
  Sampler s;
  const std::vector<double> expected = exact_joint(s, p);
  constexpr int64_t kRuns = 60000;
  for (int64_t k : {1, 3}) {
    std::vector<int64_t> counts(expected.size(), 0);
    for (int64_t run = 0; run < kRuns; ++run) ++counts[cell(generate(s, p, static_cast<uint64_t>(1000 + run), k))];
    const auto chi = deepinfer::testing::chi_square(counts, expected, kRuns);
    EXPECT_EQ(chi.impossible, 0) << c.name << ", k " << k << ": a token the target cannot draw";
    EXPECT_GT(chi.p_value, 1e-3) << c.name << ", k " << k << ": chi2 " << chi.stat << " over " << chi.bins << " cells";
  }
  // The test tells the draft's own distribution from the target's.
  std::vector<int64_t> drafted(expected.size(), 0);
  for (int64_t run = 0; run < kRuns; ++run) {
    std::vector<int64_t> t;
    for (int64_t i = 0; i < kTokens; ++i)
      t.push_back(draw_from(draft_probs(t), draw_uniform(static_cast<uint64_t>(run), static_cast<uint64_t>(i))));
    ++drafted[cell(t)];
  }
  const auto chi = deepinfer::testing::chi_square(drafted, expected, kRuns);
  EXPECT_TRUE(chi.impossible > 0 || chi.p_value < 1e-9) << c.name << ": the draft's distribution passes for the target's";
}

INSTANTIATE_TEST_SUITE_P(Cases, ProbabilisticDrafts,
                         ::testing::Values(Case{"T1", 1.0f, 0, 0.0f}, Case{"T0_7_topk3", 0.7f, 3, 0.0f},
                                           Case{"T1_frequency_penalty", 1.0f, 0, 0.8f}),
                         [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });

TEST(Verify, GreedyTargetKeepsOnlyTheArgmaxChain) {
  SamplingParams p;
  p.temperature = 0;
  Sampler s;
  std::vector<int64_t> chain;
  for (int64_t i = 0; i < kTokens; ++i) {
    const std::vector<double> d = target_dist(s, p, chain);
    chain.push_back(std::max_element(d.begin(), d.end()) - d.begin());
  }
  for (uint64_t run = 0; run < 2000; ++run) ASSERT_EQ(generate(s, p, run, 2), chain) << "run " << run;
}
