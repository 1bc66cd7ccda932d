// Test helper: the chi-square test of observed counts against expected probabilities.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

namespace deepinfer::testing {

// The chi-square survival function: Q(df/2, x/2), the regularized upper incomplete gamma.
inline double upper_gamma_q(double a, double x) {
  if (x <= 0.0) return 1.0;
  const double log_prefix = -x + a * std::log(x) - std::lgamma(a);
  if (x < a + 1.0) {  // series for P(a, x)
    double term = 1.0 / a, sum = term;
    for (int n = 1; n < 10000 && std::fabs(term) > std::fabs(sum) * 1e-16; ++n) {
      term *= x / (a + n);
      sum += term;
    }
    return 1.0 - sum * std::exp(log_prefix);
  }
  // Continued fraction for Q(a, x) (modified Lentz).
  const double tiny = 1e-300;
  double b = x + 1.0 - a, c = 1.0 / tiny, d = 1.0 / b, h = d;
  for (int i = 1; i < 10000; ++i) {
    const double an = -i * (i - a);
    b += 2.0;
    d = an * d + b;
    if (std::fabs(d) < tiny) d = tiny;
    c = b + an / c;
    if (std::fabs(c) < tiny) c = tiny;
    d = 1.0 / d;
    const double delta = d * c;
    h *= delta;
    if (std::fabs(delta - 1.0) < 1e-15) break;
  }
  return std::exp(log_prefix) * h;
}

inline double chi2_sf(double chi2, int df) { return upper_gamma_q(0.5 * df, 0.5 * chi2); }

struct ChiSquare {
  double stat = 0, p_value = 1;
  int bins = 0;           // cells compared (cells expected below min_expected pooled into one)
  int64_t impossible = 0; // draws in cells of probability 0
};

// counts[i] draws of n in cell i against probabilities expected[i] (summing to 1). Cells expected
// fewer than min_expected times are pooled, so the statistic stays chi-square distributed.
inline ChiSquare chi_square(const std::vector<int64_t>& counts, const std::vector<double>& expected, int64_t n,
                            double min_expected = 5.0) {
  ChiSquare r;
  double pooled_e = 0, pooled_o = 0;
  auto add = [&](double o, double e) {
    r.stat += (o - e) * (o - e) / e;
    ++r.bins;
  };
  for (size_t i = 0; i < counts.size(); ++i) {
    const double e = expected[i] * static_cast<double>(n), o = static_cast<double>(counts[i]);
    if (expected[i] == 0.0) {
      r.impossible += counts[i];
    } else if (e < min_expected) {
      pooled_e += e;
      pooled_o += o;
    } else {
      add(o, e);
    }
  }
  if (pooled_e > 0) add(pooled_o, pooled_e);
  r.p_value = r.bins >= 2 ? chi2_sf(r.stat, r.bins - 1) : 1.0;
  return r;
}

}  // namespace deepinfer::testing
