// Confidence-scheduled verification: how many of each sequence's draft tokens a step verifies.
//
// Purpose: the drafter proposes up to K tokens per decoding sequence with a confidence c_j per
// token (the probability that token j is kept given that the ones before it are). Token j of
// sequence s survives verification with probability a_{s,j} = c_{s,1} * ... * c_{s,j}, and
// verifying it costs one more row in the step. verify_lengths chooses each sequence's k
// (0..its draft's length) to maximise the step's expected emitted tokens per second
// (spec/deepseek-v41-system.md section 4.3, Algorithm 1): every (sequence, position) candidate
// sorted by survival, best first, admitted one at a time while tau / T(rows) improves, where tau
// = one token per decoding sequence plus the admitted survivals and T is the step-time curve at
// the step's rows; a sequence verifies up to its deepest admitted position. Admission stops at
// the first candidate that does not improve the ratio.
// StepCost is the curve: MeasuredStepCost learns it online from the engine's steps (an EWMA of
// the step time per row-count bucket, interpolated, extrapolated by a line fitted to the
// buckets); FixedStepCost is a given function (tests, or a profile).
// DraftGate decides before the draft round whether a step drafts at all (below).
// Invariants: the choice depends only on the confidences, the row count and the curve (and the
// gate on the recent rounds); it changes which drafts are verified, never how a row is sampled.
// Threading: engine thread only.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace deepinfer::spec {

// Seconds a step of `rows` token rows takes.
class StepCost {
 public:
  virtual ~StepCost() = default;
  virtual double seconds(int64_t rows) const = 0;
  // A step of `rows` rows took `seconds` (a measured curve learns from it).
  virtual void record(int64_t rows, double seconds) { (void)rows, (void)seconds; }
};

// A fixed curve.
class FixedStepCost : public StepCost {
 public:
  explicit FixedStepCost(std::function<double(int64_t)> f) : f_(std::move(f)) {}
  double seconds(int64_t rows) const override { return f_(rows); }

 private:
  std::function<double(int64_t)> f_;
};

// The curve measured online. Steps fall into buckets by row count (1, 2-3, 4-7, ..., powers of
// two); each bucket keeps an exponentially weighted mean (weight `alpha` for the newest step) of
// its steps' rows and seconds. seconds(r) interpolates linearly between the buckets' means
// around r; outside them it follows a line fitted (least squares) to the means, with a slope of
// at least 0, from the nearest one. Before any step: 1 s whatever the rows (a flat curve: every
// draft is worth verifying until a slope is measured); with one bucket: flat at its mean.
class MeasuredStepCost : public StepCost {
 public:
  explicit MeasuredStepCost(double alpha = 0.2) : alpha_(alpha) {}
  double seconds(int64_t rows) const override;
  void record(int64_t rows, double seconds) override;
  static constexpr int kBuckets = 40;  // the last takes every larger step

 private:
  struct Bucket {
    double rows = 0, seconds = 0;
    int64_t steps = 0;
  };
  double alpha_;
  std::array<Bucket, kBuckets> buckets_{};
};

// Whether a step drafts at all. Drafting costs a draft round before any length is chosen, so
// when the recent rounds' kept tokens cannot pay for it, a step does better without drafts: with
// d decoding sequences of which n would draft, drafting is worth it while
//   (d + A n) / (D n + T(d + R n)) >= d / T(d),
// A, R and D the recent rounds' accepted tokens, verified draft rows and draft seconds per
// drafting sequence (exponentially weighted, weight `alpha` for the newest round) and T the
// step-time curve. Otherwise the step skips drafting, except every kProbeEvery-th skipped step,
// which drafts again so that A, R and D follow the text (acceptance changes along a sequence).
// Before any round is recorded every step drafts.
class DraftGate {
 public:
  explicit DraftGate(double alpha = 0.2) : alpha_(alpha) {}
  static constexpr int64_t kProbeEvery = 16;
  bool draft(int64_t n, int64_t decoding, const StepCost& cost);
  // A drafting step's round: n sequences drafted in `seconds`, `verified` of their tokens
  // verified and `accepted` kept.
  void record(int64_t n, double seconds, int64_t verified, int64_t accepted);

 private:
  double alpha_;
  bool seen_ = false;
  double accepted_ = 0, verified_ = 0, seconds_ = 0;  // per drafting sequence
  int64_t skipped_ = 0;
};

// Each sequence's verification length: confidence[s] holds sequence s's per-token confidences
// (its draft's length; values outside [0, 1] are clamped); base_rows are the step's rows
// without any draft (at least the decoding sequences' anchors), decoding the number of
// sequences that emit a token this step (each at least one). out[s] in [0, confidence[s].size()].
std::vector<int64_t> verify_lengths(std::span<const std::vector<float>> confidence, int64_t base_rows, int64_t decoding,
                                    const StepCost& cost);

}  // namespace deepinfer::spec
