// Sampler statistics: 100,000 draws at consecutive steps per case, compared with the expected
// distribution (an independent full-sort reference) by a chi-square test; filtered-out tokens
// must never be drawn.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <ostream>
#include <string>
#include <vector>

#include "sample/chi_square.h"
#include "sample/sampler.h"

using namespace deepinfer;
using namespace deepinfer::sample;
using deepinfer::testing::chi2_sf;

namespace {

// ---- an independent reference of steps (3)-(4): full sorts, no shortcuts ----

std::vector<double> reference_distribution(const std::vector<float>& logits, const SamplingParams& p) {
  const size_t n = logits.size();
  std::vector<double> x(n), prob(n);
  for (size_t i = 0; i < n; ++i) x[i] = static_cast<double>(logits[i]) / static_cast<double>(p.temperature);
  const double m = *std::max_element(x.begin(), x.end());
  double z = 0;
  for (size_t i = 0; i < n; ++i) z += std::exp(x[i] - m);
  for (size_t i = 0; i < n; ++i) prob[i] = std::exp(x[i] - m) / z;
  const double pmax = *std::max_element(prob.begin(), prob.end());
  std::vector<bool> keep(n, true);
  for (size_t i = 0; i < n; ++i)
    if (prob[i] < static_cast<double>(p.min_p) * pmax) keep[i] = false;  // min-p
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return prob[a] > prob[b]; });
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < n) {
    std::vector<double> kept_x;
    for (size_t i : order)
      if (keep[i]) kept_x.push_back(x[i]);
    if (kept_x.size() > static_cast<size_t>(p.top_k)) {
      const double kth = kept_x[static_cast<size_t>(p.top_k) - 1];
      for (size_t i = 0; i < n; ++i)
        if (x[i] < kth) keep[i] = false;
    }
  }
  double mass = 0;
  for (size_t i = 0; i < n; ++i)
    if (keep[i]) mass += prob[i];
  if (p.top_p < 1.0f) {
    double before = 0;
    bool dropping = false;
    for (size_t i : order) {
      if (!keep[i]) continue;
      // Test rows stay clear of the boundary, so rounding cannot flip a decision.
      if (!dropping) {
        EXPECT_GT(std::fabs(before / mass - static_cast<double>(p.top_p)), 1e-9);
      }
      if (!dropping && before / mass < static_cast<double>(p.top_p)) {
        before += prob[i];
      } else {
        dropping = true;
        keep[i] = false;
      }
    }
  }
  std::vector<double> out(n, 0.0);
  double kept_mass = 0;
  for (size_t i = 0; i < n; ++i)
    if (keep[i]) kept_mass += prob[i];
  for (size_t i = 0; i < n; ++i)
    if (keep[i]) out[i] = prob[i] / kept_mass;
  return out;
}

// vocab 16, weights spread over two orders of magnitude, not sorted by id.
std::vector<float> designed_logits() {
  const double w[16] = {4, 30, 0.5, 15, 1, 20, 0.1, 8, 2, 6, 0.3, 10, 3, 0.05, 1.5, 0.2};
  std::vector<float> l(16);
  for (int i = 0; i < 16; ++i) l[static_cast<size_t>(i)] = static_cast<float>(std::log(w[i]));
  return l;
}

struct StatCase {
  const char* name;
  float temperature;
  int top_k;
  float top_p;
  float min_p;
};

void PrintTo(const StatCase& c, std::ostream* os) { *os << c.name; }

}  // namespace

class SamplerStatistics : public ::testing::TestWithParam<StatCase> {};

TEST_P(SamplerStatistics, ChiSquareAgainstExpected) {
  const StatCase& c = GetParam();
  SamplingParams p;
  p.temperature = c.temperature;
  p.top_k = c.top_k;
  p.top_p = c.top_p;
  p.min_p = c.min_p;
  const std::vector<float> l = designed_logits();
  const std::vector<double> expected = reference_distribution(l, p);

  Sampler s;
  std::vector<double> dist(l.size());
  SampleRequest one;
  one.logits = l;
  one.params = &p;
  s.distribution(one, dist);
  for (size_t i = 0; i < l.size(); ++i) EXPECT_NEAR(dist[i], expected[i], 1e-9) << c.name << " token " << i;

  constexpr int kDraws = 100000;
  std::vector<int64_t> counts(l.size(), 0);
  SampleRequest r;
  r.logits = l;
  r.params = &p;
  r.seed = 20240611;
  for (int i = 0; i < kDraws; ++i) {
    r.step = static_cast<uint64_t>(i);
    ++counts[static_cast<size_t>(s.sample(r).token)];
  }
  double chi2 = 0;
  int bins = 0;
  for (size_t i = 0; i < l.size(); ++i) {
    if (expected[i] == 0.0) {
      EXPECT_EQ(counts[i], 0) << c.name << ": token " << i << " is filtered out but was drawn";
      continue;
    }
    const double e = expected[i] * kDraws;
    chi2 += (static_cast<double>(counts[i]) - e) * (static_cast<double>(counts[i]) - e) / e;
    ++bins;
  }
  ASSERT_GE(bins, 2) << c.name;
  const double pval = chi2_sf(chi2, bins - 1);
  RecordProperty("chi2_p_value", std::to_string(pval));
  EXPECT_GT(pval, 1e-3) << c.name << ": chi2 " << chi2 << " over " << bins << " bins";
}

INSTANTIATE_TEST_SUITE_P(Cases, SamplerStatistics,
                         ::testing::Values(StatCase{"T0.7", 0.7f, 0, 1.0f, 0.0f},
                                           StatCase{"T1.3", 1.3f, 0, 1.0f, 0.0f},
                                           StatCase{"topk5", 1.0f, 5, 1.0f, 0.0f},
                                           StatCase{"topp0.9", 1.0f, 0, 0.9f, 0.0f},
                                           StatCase{"minp0.1", 1.0f, 0, 1.0f, 0.1f},
                                           StatCase{"combo", 0.9f, 10, 0.9f, 0.02f}),
                         [](const ::testing::TestParamInfo<StatCase>& i) {
                           std::string n = i.param.name;
                           std::replace(n.begin(), n.end(), '.', '_');
                           return n;
                         });

TEST(SamplerStatisticsHelpers, ChiSquareSurvivalMatchesTables) {
  EXPECT_NEAR(chi2_sf(3.841458820694124, 1), 0.05, 1e-9);
  EXPECT_NEAR(chi2_sf(18.307038053275146, 10), 0.05, 1e-9);
  EXPECT_NEAR(chi2_sf(23.209251158954356, 10), 0.01, 1e-9);
  EXPECT_NEAR(chi2_sf(2.0, 2), std::exp(-1.0), 1e-12);  // df 2: exp(-x/2)
  EXPECT_NEAR(chi2_sf(0.5, 4), std::exp(-0.25) * 1.25, 1e-12);
  EXPECT_EQ(chi2_sf(0.0, 3), 1.0);
}


TEST(SamplerFilters, MatchReferenceOnALargerVocab) {
  // 5000 tokens: top-p ranks thousands (several growth rounds), top-k selects among thousands.
  std::vector<float> l(5000);
  for (size_t i = 0; i < l.size(); ++i)
    l[i] = static_cast<float>(2.0 * std::sin(0.7 * static_cast<double>(i)) + 0.001 * static_cast<double>(i % 97));
  struct Case {
    float temperature;
    int top_k;
    float top_p;
    float min_p;
  };
  for (const Case c : {Case{1.0f, 0, 0.9f, 0.0f}, Case{0.8f, 1500, 1.0f, 0.0f}, Case{1.2f, 2000, 0.75f, 0.01f},
                       Case{1.0f, 0, 0.3f, 0.0f}}) {
    SamplingParams p;
    p.temperature = c.temperature;
    p.top_k = c.top_k;
    p.top_p = c.top_p;
    p.min_p = c.min_p;
    const std::vector<double> expected = reference_distribution(l, p);
    Sampler s;
    SampleRequest r;
    r.logits = l;
    r.params = &p;
    std::vector<double> got(l.size());
    s.distribution(r, got);
    size_t kept = 0;
    for (size_t i = 0; i < l.size(); ++i) {
      kept += expected[i] > 0;
      ASSERT_EQ(got[i] > 0, expected[i] > 0) << "token " << i << " top_k " << c.top_k << " top_p " << c.top_p;
      EXPECT_NEAR(got[i], expected[i], 1e-12);
    }
    EXPECT_GT(kept, 300u);
    EXPECT_LT(kept, l.size());
  }
}
