#include "spec/verify_schedule.h"

#include <algorithm>
#include <cmath>

namespace deepinfer::spec {

namespace {
int bucket_of(int64_t rows) {
  int b = 0;
  while (b + 1 < MeasuredStepCost::kBuckets && (int64_t{1} << (b + 1)) <= rows) ++b;
  return b;
}
}  // namespace

void MeasuredStepCost::record(int64_t rows, double seconds) {
  if (rows < 1 || !(seconds >= 0) || !std::isfinite(seconds)) return;
  Bucket& b = buckets_[static_cast<size_t>(bucket_of(rows))];
  const double r = static_cast<double>(rows);
  if (b.steps == 0) {
    b.rows = r;
    b.seconds = seconds;
  } else {
    b.rows += alpha_ * (r - b.rows);
    b.seconds += alpha_ * (seconds - b.seconds);
  }
  ++b.steps;
}

double MeasuredStepCost::seconds(int64_t rows) const {
  std::vector<const Bucket*> pts;
  for (const Bucket& b : buckets_)
    if (b.steps > 0) pts.push_back(&b);
  if (pts.empty()) return 1.0;
  if (pts.size() == 1) return pts[0]->seconds;
  const double r = static_cast<double>(rows);
  // Inside the measured range: between the two means around r (means ascend with the buckets).
  for (size_t i = 0; i + 1 < pts.size(); ++i) {
    const Bucket &a = *pts[i], &b = *pts[i + 1];
    if (r >= a.rows && r <= b.rows) {
      const double w = b.rows > a.rows ? (r - a.rows) / (b.rows - a.rows) : 0.0;
      return a.seconds + w * (b.seconds - a.seconds);
    }
  }
  // Outside: from the nearest mean along the fitted slope.
  double mr = 0, ms = 0;
  for (const Bucket* p : pts) mr += p->rows, ms += p->seconds;
  mr /= static_cast<double>(pts.size());
  ms /= static_cast<double>(pts.size());
  double num = 0, den = 0;
  for (const Bucket* p : pts) num += (p->rows - mr) * (p->seconds - ms), den += (p->rows - mr) * (p->rows - mr);
  const double slope = den > 0 ? std::max(0.0, num / den) : 0.0;
  const Bucket& edge = r < pts.front()->rows ? *pts.front() : *pts.back();
  return std::max(edge.seconds + slope * (r - edge.rows), edge.seconds * 1e-3);
}

std::vector<int64_t> verify_lengths(std::span<const std::vector<float>> confidence, int64_t base_rows, int64_t decoding,
                                    const StepCost& cost) {
  struct Candidate {
    double survival;
    size_t seq;
    int64_t pos;  // 0-based: admitting it verifies pos + 1 drafts
  };
  std::vector<Candidate> cands;
  for (size_t s = 0; s < confidence.size(); ++s) {
    double a = 1.0;
    for (size_t j = 0; j < confidence[s].size(); ++j) {
      const float c = confidence[s][j];
      a *= std::isnan(c) ? 0.0 : std::clamp(static_cast<double>(c), 0.0, 1.0);
      cands.push_back({a, s, static_cast<int64_t>(j)});
    }
  }
  // Best first; ties by sequence then position, so a sequence's positions come in order (its
  // survivals never increase along the draft).
  std::stable_sort(cands.begin(), cands.end(), [](const Candidate& x, const Candidate& y) { return x.survival > y.survival; });
  std::vector<int64_t> k(confidence.size(), 0);
  int64_t rows = std::max<int64_t>(base_rows, 1);
  double tau = static_cast<double>(std::max<int64_t>(decoding, 0));
  double best = tau / cost.seconds(rows);
  for (const Candidate& c : cands) {
    const double t = cost.seconds(rows + 1);
    const double theta = (tau + c.survival) / t;
    if (!(theta > best)) break;
    best = theta;
    tau += c.survival;
    ++rows;
    k[c.seq] = std::max(k[c.seq], c.pos + 1);
  }
  return k;
}

bool DraftGate::draft(int64_t n, int64_t decoding, const StepCost& cost) {
  if (!seen_ || n <= 0 || decoding <= 0) return true;
  const double d = static_cast<double>(decoding), nd = static_cast<double>(n);
  const double rows = d + verified_ * nd;
  const double with = (d + accepted_ * nd) / (seconds_ * nd + cost.seconds(static_cast<int64_t>(std::ceil(rows))));
  const double without = d / cost.seconds(decoding);
  if (with >= without || ++skipped_ >= kProbeEvery) {
    skipped_ = 0;
    return true;
  }
  return false;
}

void DraftGate::record(int64_t n, double seconds, int64_t verified, int64_t accepted) {
  if (n <= 0 || !(seconds >= 0) || !std::isfinite(seconds)) return;
  const double nd = static_cast<double>(n), a = static_cast<double>(accepted) / nd, r = static_cast<double>(verified) / nd,
               s = seconds / nd;
  if (!seen_) {
    accepted_ = a, verified_ = r, seconds_ = s;
    seen_ = true;
    return;
  }
  accepted_ += alpha_ * (a - accepted_);
  verified_ += alpha_ * (r - verified_);
  seconds_ += alpha_ * (s - seconds_);
}

}  // namespace deepinfer::spec
