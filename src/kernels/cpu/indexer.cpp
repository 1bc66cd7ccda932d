// Indexer scoring (the selections over its scores: select.cpp).
#include <algorithm>
#include <limits>

#include "kernels/cpu/cpu_ops.h"

namespace deepinfer::kernels::cpu {

namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
}  // namespace

void indexer_scores(core::ThreadPool& pool, const IndexerScoreArgs& a) {
  pool.parallel_for(a.s, [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s) {
      const int64_t visible = (a.q_pos[s] + 1) / a.ratio;
      float* out = a.scores + s * a.t;
      for (int64_t j = 0; j < a.t; ++j) {
        if (j >= visible) {
          out[j] = kNegInf;
          continue;
        }
        const float* k = a.k + j * a.dim;
        float acc = 0.0f;
        for (int64_t h = 0; h < a.heads; ++h) {
          float sc = std::max(dot(a.q + (s * a.heads + h) * a.dim, k, a.dim), 0.0f) * a.score_scale;
          acc += sc * a.w[s * a.heads + h];
        }
        out[j] = acc;
      }
    }
  }, 1);
}

}  // namespace deepinfer::kernels::cpu
