#include "core/logits.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace deepinfer::core {

namespace {
constexpr double kNegInf = -std::numeric_limits<double>::infinity();
constexpr double kPosInf = std::numeric_limits<double>::infinity();
}  // namespace

int64_t inverse_cdf(const double* w, int64_t n, double u) {
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) total += w[i];
  const double target = u * total;
  double cum = 0.0;
  int64_t last = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (w[i] > 0.0) {
      cum += w[i];
      last = i;
      if (cum > target) return i;
    }
  }
  return last;
}

void log_softmax(std::span<const float> logits, std::span<double> out) {
  DI_CHECK(out.size() == logits.size(), "log_softmax: output size differs from input");
  const size_t n = logits.size();
  auto val = [&](size_t i) { return std::isnan(logits[i]) ? kNegInf : static_cast<double>(logits[i]); };
  double m = kNegInf;
  size_t n_pos_inf = 0;
  for (size_t i = 0; i < n; ++i) {
    m = std::max(m, val(i));
    if (val(i) == kPosInf) ++n_pos_inf;
  }
  if (m == kNegInf) {
    std::fill(out.begin(), out.end(), kNegInf);
    return;
  }
  if (m == kPosInf) {
    const double share = -std::log(static_cast<double>(n_pos_inf));
    for (size_t i = 0; i < n; ++i) out[i] = val(i) == kPosInf ? share : kNegInf;
    return;
  }
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) sum += std::exp(val(i) - m);
  const double lse = m + std::log(sum);
  for (size_t i = 0; i < n; ++i) out[i] = val(i) - lse;
}

std::vector<std::pair<int32_t, double>> top_n(std::span<const double> lp, int64_t n) {
  n = std::min<int64_t>(std::max<int64_t>(n, 0), static_cast<int64_t>(lp.size()));
  std::vector<int32_t> ids;  // best first, kept sorted by insertion
  ids.reserve(static_cast<size_t>(n) + 1);
  if (n > 0)
    for (size_t i = 0; i < lp.size(); ++i) {
      if (static_cast<int64_t>(ids.size()) == n && !(lp[i] > lp[static_cast<size_t>(ids.back())])) continue;  // equal: the lower index is in
      size_t pos = ids.size();
      while (pos > 0 && lp[i] > lp[static_cast<size_t>(ids[pos - 1])]) --pos;
      ids.insert(ids.begin() + static_cast<std::ptrdiff_t>(pos), static_cast<int32_t>(i));
      if (static_cast<int64_t>(ids.size()) > n) ids.pop_back();
    }
  std::vector<std::pair<int32_t, double>> out;
  out.reserve(ids.size());
  for (int32_t id : ids) out.emplace_back(id, lp[static_cast<size_t>(id)]);
  return out;
}

void keep_top_p(double* w, int64_t n_w, double top_p, Ranked* cand) {
  double total = 0.0;
  size_t n = 0;
  for (int64_t i = 0; i < n_w; ++i) {
    total += w[i];
    if (w[i] > 0.0) cand[n++] = {w[i], static_cast<int32_t>(i)};
  }
  const double limit = top_p * total;
  size_t kept = 0, ranked = 0;
  double before = 0.0;  // mass of the tokens ranked before the current one
  while (kept < n && before < limit) {
    if (kept == ranked) {
      const size_t next = std::min(n, std::max<size_t>(256, ranked * 4));
      if (next < n) std::nth_element(cand + ranked, cand + next, cand + n, ranks_before);
      std::sort(cand + ranked, cand + next, ranks_before);
      ranked = next;
    }
    before += cand[kept].v;
    ++kept;
  }
  for (size_t j = kept; j < n; ++j) w[cand[j].id] = 0.0;
}

}  // namespace deepinfer::core
