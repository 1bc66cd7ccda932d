// Confidence-scheduled verification (spec/verify_schedule.h): the greedy choice of each
// sequence's verification length against given step-time curves (flat: every draft; linear
// without a fixed cost: none; a fixed cost: a prefix that depends on the confidences and backs
// off as the batch grows; candidates of several sequences admitted in survival order), checked
// against an exhaustive search on small cases, and the online curve (buckets, EWMA,
// interpolation, extrapolation).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "spec/verify_schedule.h"

using namespace deepinfer;
using spec::FixedStepCost;
using spec::MeasuredStepCost;
using spec::verify_lengths;

namespace {

using Conf = std::vector<std::vector<float>>;

// The best expected tokens per second over every choice of lengths (exhaustive), to compare the
// greedy choice's value with.
double best_ratio(const Conf& c, int64_t base, int64_t decoding, const spec::StepCost& cost) {
  std::vector<int64_t> k(c.size(), 0);
  double best = 0;
  std::function<void(size_t)> go = [&](size_t s) {
    if (s == c.size()) {
      double tau = static_cast<double>(decoding);
      int64_t rows = base;
      for (size_t i = 0; i < c.size(); ++i) {
        double a = 1;
        for (int64_t j = 0; j < k[i]; ++j) tau += (a *= c[i][static_cast<size_t>(j)]);
        rows += k[i];
      }
      best = std::max(best, tau / cost.seconds(rows));
      return;
    }
    for (k[s] = 0; k[s] <= static_cast<int64_t>(c[s].size()); ++k[s]) go(s + 1);
    k[s] = 0;
  };
  go(0);
  return best;
}

double ratio_of(const Conf& c, const std::vector<int64_t>& k, int64_t base, int64_t decoding, const spec::StepCost& cost) {
  double tau = static_cast<double>(decoding);
  int64_t rows = base;
  for (size_t i = 0; i < c.size(); ++i) {
    double a = 1;
    for (int64_t j = 0; j < k[i]; ++j) tau += (a *= c[i][static_cast<size_t>(j)]);
    rows += k[i];
  }
  return tau / cost.seconds(rows);
}

}  // namespace

TEST(VerifySchedule, AFlatCurveVerifiesEveryDraft) {
  const FixedStepCost flat([](int64_t) { return 0.02; });
  const Conf c{{0.9f, 0.5f, 0.1f, 0.01f, 0.001f}, {0.2f, 0.2f}, {0.99f}};
  EXPECT_EQ(verify_lengths(c, 3, 3, flat), (std::vector<int64_t>{5, 2, 1}));
  EXPECT_EQ(verify_lengths(Conf{}, 0, 0, flat), std::vector<int64_t>{});
}

TEST(VerifySchedule, RowsWithoutAFixedCostAreNeverWorthADraft) {
  const FixedStepCost linear([](int64_t r) { return static_cast<double>(r); });
  EXPECT_EQ(verify_lengths(Conf{{0.99f, 0.99f}, {0.9f}}, 2, 2, linear), (std::vector<int64_t>{0, 0}));
}

// T = 5 + rows, one sequence: admitting survival a pays while a > tau / T. Survivals 0.99,
// 0.98, 0.098, ...: the first two pay (0.99 > 1 / 6, 0.98 > 1.99 / 7), the third does not
// (0.098 < 2.97 / 8), and nothing after it is looked at.
TEST(VerifySchedule, AFixedCostKeepsTheConfidentPrefix) {
  const FixedStepCost cost([](int64_t r) { return 5.0 + static_cast<double>(r); });
  EXPECT_EQ(verify_lengths(Conf{{0.99f, 0.99f, 0.1f, 0.9f, 0.9f}}, 1, 1, cost), std::vector<int64_t>{2});
  // Among 300 decoding sequences tau / T is 300 / 305: a draft of survival 0.95 does not pay.
  EXPECT_EQ(verify_lengths(Conf{{0.95f, 0.95f}}, 300, 300, cost), std::vector<int64_t>{0});
}

// A batch that grows backs off: the same drafts under T = 40 + rows verify fewer tokens per
// sequence at 64 sequences than at 4, and none at 512.
TEST(VerifySchedule, SpeculationBacksOffAsTheBatchGrows) {
  const FixedStepCost cost([](int64_t r) { return 40.0 + static_cast<double>(r); });
  auto total = [&](int64_t n) {
    const Conf c(static_cast<size_t>(n), std::vector<float>{0.9f, 0.8f, 0.7f, 0.6f, 0.5f});
    int64_t sum = 0;
    for (int64_t k : verify_lengths(c, n, n, cost)) sum += k;
    return static_cast<double>(sum) / static_cast<double>(n);
  };
  const double k4 = total(4), k64 = total(64), k512 = total(512);
  EXPECT_GT(k4, k64);
  EXPECT_GT(k64, 0.0);
  EXPECT_EQ(k512, 0.0);
}

// Candidates of several sequences in survival order: survivals 0.9, 0.81, 0.729 (A) and 0.5,
// 0.25 (B); rows are free up to 6 and dear after, so the first four are admitted.
TEST(VerifySchedule, CandidatesAreAdmittedBySurvival) {
  const FixedStepCost step([](int64_t r) { return r <= 6 ? 1.0 : 100.0; });
  EXPECT_EQ(verify_lengths(Conf{{0.9f, 0.9f, 0.9f}, {0.5f, 0.5f}}, 2, 2, step), (std::vector<int64_t>{3, 1}));
  // Out-of-range and NaN confidences are clamped (NaN: never kept).
  const FixedStepCost flat([](int64_t) { return 1.0; });
  EXPECT_EQ(verify_lengths(Conf{{1.5f, NAN, 0.5f}, {-1.0f}}, 2, 2, flat), (std::vector<int64_t>{1, 0}));
}

// On linear curves with a fixed cost the greedy choice is the exhaustive optimum (for a given
// number of rows the best survivals are best, and tau / T is unimodal in that number).
TEST(VerifySchedule, MatchesTheExhaustiveOptimumOnSmallCases) {
  uint64_t x = 12345;
  auto rnd = [&] {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>((x >> 40) & 0xffff) / 65536.0f;
  };
  for (int trial = 0; trial < 200; ++trial) {
    const double fixed = 1.0 + 20.0 * rnd(), slope = 0.2 + 2.0 * rnd();
    const FixedStepCost cost([=](int64_t r) { return fixed + slope * static_cast<double>(r); });
    Conf c(static_cast<size_t>(1 + trial % 3));
    for (auto& s : c) {
      s.resize(static_cast<size_t>(1 + (trial / 3) % 4));
      for (float& v : s) v = 0.05f + 0.95f * rnd();
    }
    const int64_t n = static_cast<int64_t>(c.size());
    const std::vector<int64_t> k = verify_lengths(c, n, n, cost);
    EXPECT_NEAR(ratio_of(c, k, n, n, cost), best_ratio(c, n, n, cost), 1e-9) << "trial " << trial;
  }
}

TEST(MeasuredStepCost, LearnsTheCurveFromSteps) {
  MeasuredStepCost m(0.5);
  EXPECT_EQ(m.seconds(1), 1.0);  // nothing measured: flat
  EXPECT_EQ(m.seconds(1000), 1.0);
  m.record(8, 2.0);
  EXPECT_EQ(m.seconds(1), 2.0);  // one bucket: flat at its mean
  EXPECT_EQ(m.seconds(500), 2.0);
  m.record(1, 1.0);
  EXPECT_DOUBLE_EQ(m.seconds(4), 1.0 + 3.0 / 7.0);  // between the means (1, 1 s) and (8, 2 s)
  // Past the last mean: along the fitted slope (two points: 1/7 s a row).
  EXPECT_DOUBLE_EQ(m.seconds(15), 2.0 + 7.0 / 7.0);
  // The EWMA: another step of 12 rows in the 8..15 bucket moves its mean half way.
  m.record(12, 4.0);
  EXPECT_DOUBLE_EQ(m.seconds(10), 3.0);  // the bucket's mean is now (10 rows, 3 s)
  // A flat or falling fit extrapolates flat; bad measurements are ignored.
  MeasuredStepCost f;
  f.record(2, 5.0);
  f.record(64, 4.0);
  EXPECT_EQ(f.seconds(1000), 4.0);
  f.record(0, 1.0);
  f.record(4, NAN);
  f.record(4, -1.0);
  EXPECT_DOUBLE_EQ(f.seconds(33), 5.0 - 31.0 / 62.0);
}

// The gate: before any round every step drafts; rounds that keep nothing while their draft
// round costs time stop the drafting but for one step in DraftGate::kProbeEvery; rounds whose
// kept tokens pay for the round (and its verify rows) keep every step drafting.
TEST(DraftGate, SkipsRoundsThatDoNotPayAndProbesAgain) {
  const FixedStepCost cost([](int64_t rows) { return 1.0 + 0.1 * static_cast<double>(rows); });
  spec::DraftGate unpaid;
  EXPECT_TRUE(unpaid.draft(4, 4, cost));
  unpaid.record(4, 0.4, 8, 0);  // 0.1 s a sequence's round, 2 rows verified, none kept
  int drafted = 0;
  for (int64_t s = 0; s < 4 * spec::DraftGate::kProbeEvery; ++s) drafted += unpaid.draft(4, 4, cost);
  EXPECT_EQ(drafted, 4);  // the probes alone
  spec::DraftGate paid;
  paid.record(4, 0.04, 8, 6);  // 0.01 s a round, 1.5 tokens kept a sequence
  for (int64_t s = 0; s < 2 * spec::DraftGate::kProbeEvery; ++s) EXPECT_TRUE(paid.draft(4, 4, cost)) << s;
  // Paying at one sequence (the step's fixed cost shared by fewer rows) but not at 64, where a
  // verify row costs nearly what the kept token gains and the round is 64 times dearer.
  spec::DraftGate g;
  g.record(1, 0.05, 2, 1);
  EXPECT_TRUE(g.draft(1, 1, cost));
  EXPECT_FALSE(g.draft(64, 64, cost));
}
