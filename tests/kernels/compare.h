// How the kernel tests compare two backends' float outputs.
//
// rel_err: max |a - b| over max |a|, where a NaN in one and not the other counts as infinite
// (a is the reference). finite_rel_err: the same over finite entries, while infinite or NaN
// entries must match exactly (and sizes must agree).
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

namespace deepinfer::kernel_tests {

inline double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0, d = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    m = std::max(m, static_cast<double>(std::fabs(a[i])));
    double e = std::fabs(static_cast<double>(a[i]) - b[i]);
    if (std::isnan(a[i]) != std::isnan(b[i])) e = INFINITY;
    if (!std::isnan(a[i])) d = std::max(d, e);
  }
  return m > 0 ? d / m : d;
}

inline double finite_rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double m = 0, d = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isinf(a[i]) || std::isinf(b[i]) || std::isnan(a[i]) || std::isnan(b[i])) {
      if (!(a[i] == b[i])) return INFINITY;
      continue;
    }
    m = std::max(m, static_cast<double>(std::fabs(a[i])));
    d = std::max(d, std::fabs(static_cast<double>(a[i]) - b[i]));
  }
  return m > 0 ? d / m : d;
}

}  // namespace deepinfer::kernel_tests
