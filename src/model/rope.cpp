#include "model/rope.h"

#include <algorithm>
#include <cmath>

namespace deepinfer::model {

namespace {
// float32 base ** (2i/dim), correctly rounded from a double evaluation.
float pos_freq(double base, int64_t i2, int64_t dim) {
  float e = static_cast<float>(i2) / static_cast<float>(dim);
  return static_cast<float>(std::pow(base, static_cast<double>(e)));
}
}  // namespace

std::vector<float> rope_inv_freq(const loader::RopeParams& p, int64_t rope_dim, int64_t max_position_embeddings) {
  const int64_t half = rope_dim / 2;
  std::vector<float> inv(static_cast<size_t>(half));
  if (p.rope_type != "yarn") {
    for (int64_t i = 0; i < half; ++i) inv[i] = 1.0f / pos_freq(p.rope_theta, 2 * i, rope_dim);
    return inv;
  }
  const double orig = p.original_max_position_embeddings;
  const double factor = p.has_factor ? p.factor : static_cast<double>(max_position_embeddings) / orig;
  const double base = p.rope_theta;
  auto corr_dim = [&](double rot) {
    return (static_cast<double>(rope_dim) * std::log(orig / (rot * 2.0 * M_PI))) / (2.0 * std::log(base));
  };
  double low = corr_dim(p.beta_fast), high = corr_dim(p.beta_slow);
  if (p.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(rope_dim - 1));
  if (low == high) high += 0.001;
  const float ffactor = static_cast<float>(factor);
  for (int64_t i = 0; i < half; ++i) {
    float pf = pos_freq(base, 2 * i, rope_dim);
    float extrap = 1.0f / pf;
    float interp = 1.0f / (ffactor * pf);
    float ramp = (static_cast<float>(i) - static_cast<float>(low)) / static_cast<float>(high - low);
    ramp = std::clamp(ramp, 0.0f, 1.0f);
    float extrap_factor = 1.0f - ramp;
    inv[i] = interp * (1.0f - extrap_factor) + extrap * extrap_factor;
  }
  return inv;
}

void RopeTable::compute(const int64_t* positions, int64_t n, std::vector<float>* cos, std::vector<float>* sin) const {
  const size_t half = inv_freq.size();
  cos->resize(static_cast<size_t>(n) * half);
  sin->resize(static_cast<size_t>(n) * half);
  for (int64_t r = 0; r < n; ++r) {
    const float pos = static_cast<float>(positions[r]);
    for (size_t i = 0; i < half; ++i) {
      const float ang = pos * inv_freq[i];
      (*cos)[r * half + i] = static_cast<float>(std::cos(static_cast<double>(ang)));
      (*sin)[r * half + i] = static_cast<float>(std::sin(static_cast<double>(ang)));
    }
  }
}

}  // namespace deepinfer::model
