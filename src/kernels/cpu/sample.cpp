// Sampling on the CPU backend: DrawParams' rule (backend.h), one row at a time.
//
// The sums run in ascending id order and top-p is the sampler's (core::keep_top_p), so a row's
// token is bitwise the one sample::Sampler draws from the same raw row.
#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <utility>
#include <vector>

#include "core/logits.h"
#include "kernels/cpu/cpu_ops.h"

namespace deepinfer::kernels::cpu {

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Greedy: the largest value, ties to the lowest id; kNoToken when the row has a NaN or nothing
// above -inf.
int32_t argmax_row(const float* x, int64_t n) {
  int64_t best = kNoToken;
  float bv = -INFINITY;
  for (int64_t c = 0; c < n; ++c) {
    if (std::isnan(x[c])) return kNoToken;
    if (x[c] > bv) {
      bv = x[c];
      best = c;
    }
  }
  return static_cast<int32_t>(best);
}

struct Scratch {
  std::vector<double> w;             // [cols] kept weights
  std::vector<double> xs;            // finite x, for the k-th largest
  std::vector<core::Ranked> rank;    // [cols] survivors for top-p
};

// kNoToken for a row with a NaN or nothing above -inf.
int32_t draw_row(const float* l, int64_t n, const DrawParams& p, Scratch& s) {
  const int32_t imax = argmax_row(l, n);
  if (imax == kNoToken || !(p.temperature >= kDrawGreedyTemperature)) return imax;
  const float lmax = l[imax];
  const double temp = static_cast<double>(p.temperature);
  const bool inf_mode = lmax == INFINITY;  // +inf values share all the mass equally
  auto x_of = [&](float v) -> double {
    if (inf_mode) return v == INFINITY ? 0.0 : kNegInf;
    return static_cast<double>(v) / temp;
  };
  const double m = inf_mode ? 0.0 : static_cast<double>(lmax) / temp;

  // top-k: the k-th largest finite x (min-p keeps an upper set of x, so the k-th largest of
  // its survivors is this one whenever more than k survive).
  double kth = kNegInf;
  if (p.top_k > 0 && p.top_k < n) {
    s.xs.clear();
    for (int64_t i = 0; i < n; ++i) {
      const double x = x_of(l[i]);
      if (x > kNegInf) s.xs.push_back(x);
    }
    const auto k = static_cast<size_t>(p.top_k);
    if (s.xs.size() > k) {
      std::nth_element(s.xs.begin(), s.xs.begin() + static_cast<std::ptrdiff_t>(k - 1), s.xs.end(), std::greater<>());
      kth = s.xs[k - 1];
    }
  }
  s.w.resize(static_cast<size_t>(n));
  double* w = s.w.data();
  for (int64_t i = 0; i < n; ++i) {
    const double x = x_of(l[i]);
    w[i] = x > kNegInf && !(x - m < p.log_min_p) && x >= kth ? std::exp(x - m) : 0.0;
  }

  if (p.top_p < 1.0f) {
    s.rank.resize(static_cast<size_t>(n));
    core::keep_top_p(w, n, static_cast<double>(p.top_p), s.rank.data());
  }

  return static_cast<int32_t>(core::inverse_cdf(w, n, p.u));
}

}  // namespace

void sample_rows(core::ThreadPool& pool, const SampleRowsArgs& a) {
  pool.parallel_for(a.rows, [&](int64_t r0, int64_t r1) {
    Scratch s;
    std::vector<double> lp;
    for (int64_t r = r0; r < r1; ++r) {
      const DrawParams p = a.params ? a.params[r] : DrawParams{};
      const float* row = a.x + r * a.cols;
      const int32_t tok = draw_row(row, a.cols, p, s);
      a.ids[r] = tok;
      if (p.logprobs < 0 || !a.logprob) continue;
      lp.resize(static_cast<size_t>(a.cols));
      core::log_softmax(std::span<const float>(row, static_cast<size_t>(a.cols)), lp);
      a.logprob[r] = tok >= 0 ? static_cast<float>(lp[static_cast<size_t>(tok)]) : -INFINITY;
      const auto top = core::top_n(lp, std::min<int64_t>(p.logprobs, a.max_logprobs));
      for (int64_t j = 0; j < a.max_logprobs; ++j) {
        const bool in = j < static_cast<int64_t>(top.size());
        a.top_ids[r * a.max_logprobs + j] = in ? top[static_cast<size_t>(j)].first : -1;
        a.top_logprobs[r * a.max_logprobs + j] = in ? static_cast<float>(top[static_cast<size_t>(j)].second) : 0.0f;
      }
    }
  }, 1);
}

}  // namespace deepinfer::kernels::cpu
