// MoE router: scoring function, biased top-k selection, unbiased normalised weights.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/cpu_ops.h"

namespace deepinfer::kernels::cpu {

namespace {
// PyTorch softplus (beta 1, threshold 20: linear above).
inline float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }
}  // namespace

void router(core::ThreadPool& pool, const RouterArgs& a) {
  pool.parallel_for(a.rows, [&](int64_t r0, int64_t r1) {
    std::vector<float> sc(static_cast<size_t>(a.experts)), biased(static_cast<size_t>(a.experts));
    std::vector<int64_t> idx(static_cast<size_t>(a.experts));
    for (int64_t r = r0; r < r1; ++r) {
      const float* z = a.logits + r * a.experts;
      if (a.func == ScoringFunc::kSoftmax) {
        float mx = -INFINITY;
        for (int64_t e = 0; e < a.experts; ++e) mx = std::max(mx, z[e] / a.temp);
        float den = 0.0f;
        for (int64_t e = 0; e < a.experts; ++e) den += std::exp(z[e] / a.temp - mx);
        for (int64_t e = 0; e < a.experts; ++e) sc[e] = std::exp(z[e] / a.temp - mx) / den;
      } else {
        for (int64_t e = 0; e < a.experts; ++e) {
          float v = z[e] / a.temp;
          sc[e] = a.func == ScoringFunc::kSigmoid ? 1.0f / (1.0f + std::exp(-v)) : std::sqrt(softplus(v));
        }
      }
      for (int64_t e = 0; e < a.experts; ++e) biased[e] = sc[e] + (a.bias ? a.bias[e] : 0.0f);
      std::iota(idx.begin(), idx.end(), 0);
      std::partial_sort(idx.begin(), idx.begin() + a.top_k, idx.end(), [&](int64_t x, int64_t y) {
        return biased[x] > biased[y] || (biased[x] == biased[y] && x < y);
      });
      float sum = 0.0f;
      for (int64_t i = 0; i < a.top_k; ++i) sum += sc[idx[i]];
      for (int64_t i = 0; i < a.top_k; ++i) {
        float w = sc[idx[i]];
        if (a.normalize && a.top_k > 1) w = w / (sum + 1e-20f);
        a.ids[r * a.top_k + i] = static_cast<int32_t>(idx[i]);
        a.weights[r * a.top_k + i] = w * a.routed_scaling;
      }
    }
  }, 1);
}

void moe_permute(core::ThreadPool&, const MoePermuteArgs& a) {
  // Counting sort by expert, stable in the pair index.
  const int64_t R = a.n * a.k, E = a.experts;
  std::vector<int32_t> next(static_cast<size_t>(E) + 1, 0);
  for (int64_t i = 0; i < R; ++i) {
    DI_CHECK(a.ids[i] >= 0 && a.ids[i] < E, "router picked an expert outside [0, E)");
    ++next[static_cast<size_t>(a.ids[i]) + 1];
  }
  for (int64_t e = 0; e < E; ++e) next[e + 1] += next[e];
  std::copy(next.begin(), next.end(), a.offsets);
  for (int64_t i = 0; i < R; ++i) {
    const int32_t j = next[static_cast<size_t>(a.ids[i])]++;
    a.perm_token[j] = static_cast<int32_t>(i / a.k);
    a.perm_weight[j] = a.weights[i];
    a.slot_row[i] = j;
  }
  if (!a.shared) return;
  a.offsets[E + 1] = static_cast<int32_t>(R + a.n);
  for (int64_t t = 0; t < a.n; ++t) {
    a.perm_token[R + t] = static_cast<int32_t>(t);
    a.perm_weight[R + t] = 1.0f;
  }
}

}  // namespace deepinfer::kernels::cpu
