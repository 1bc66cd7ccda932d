// Hyper-connection (mHC) mixes: the per-site coefficients with Sinkhorn, collapse, expand.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_ops.h"

namespace deepinfer::kernels::cpu {

namespace {
inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
}  // namespace

void hc_mixes(core::ThreadPool& pool, const HcMixesArgs& a) {
  const int64_t hc = a.hc, width = hc * a.dim, nmix = (2 + hc) * hc;
  pool.parallel_for(a.rows, [&](int64_t r0, int64_t r1) {
    std::vector<float> m(static_cast<size_t>(nmix)), c(static_cast<size_t>(hc * hc));
    for (int64_t r = r0; r < r1; ++r) {
      const float* x = a.x + r * width;
      // Unweighted RMS over the whole flattened hc·dim row; the linear is applied to the
      // normalised row (x·inv)·fn, computed as (x·fn)·inv — the same up to rounding, as
      // the official code does it.
      float inv = 1.0f / std::sqrt(dot(x, x, width) / static_cast<float>(width) + a.norm_eps);
      for (int64_t i = 0; i < nmix; ++i) m[i] = dot(x, a.fn + i * width, width) * inv;
      float* pre = a.pre + r * hc;
      float* post = a.post + r * hc;
      for (int64_t k = 0; k < hc; ++k) {
        pre[k] = sigmoid(m[k] * a.scale[0] + a.base[k]) + a.hc_eps;
        post[k] = 2.0f * sigmoid(m[hc + k] * a.scale[1] + a.base[hc + k]);
      }
      // comb logits, row-major [j][k]; softmax over k, +eps, then column normalisation.
      for (int64_t j = 0; j < hc; ++j) {
        float* row = c.data() + j * hc;
        float mx = -INFINITY;
        for (int64_t k = 0; k < hc; ++k) {
          row[k] = m[2 * hc + j * hc + k] * a.scale[2] + a.base[2 * hc + j * hc + k];
          mx = std::max(mx, row[k]);
        }
        float den = 0.0f;
        for (int64_t k = 0; k < hc; ++k) den += std::exp(row[k] - mx);
        for (int64_t k = 0; k < hc; ++k) row[k] = std::exp(row[k] - mx) / den + a.hc_eps;
      }
      auto col_norm = [&] {
        for (int64_t k = 0; k < hc; ++k) {
          float s = 0.0f;
          for (int64_t j = 0; j < hc; ++j) s += c[j * hc + k];
          for (int64_t j = 0; j < hc; ++j) c[j * hc + k] /= (s + a.hc_eps);
        }
      };
      auto row_norm = [&] {
        for (int64_t j = 0; j < hc; ++j) {
          float s = 0.0f;
          for (int64_t k = 0; k < hc; ++k) s += c[j * hc + k];
          for (int64_t k = 0; k < hc; ++k) c[j * hc + k] /= (s + a.hc_eps);
        }
      };
      col_norm();
      for (int64_t it = 0; it + 1 < a.sinkhorn_iters; ++it) {
        row_norm();
        col_norm();
      }
      std::copy(c.begin(), c.end(), a.comb + r * hc * hc);
    }
  }, 1);
}

void hc_collapse(core::ThreadPool& pool, const HcCollapseArgs& a) {
  pool.parallel_for(a.rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* x = a.x + r * a.hc * a.dim;
      const float* p = a.pre + r * a.hc;
      float* y = a.y + r * a.dim;
      for (int64_t d = 0; d < a.dim; ++d) {
        float s = 0.0f;
        for (int64_t k = 0; k < a.hc; ++k) s += p[k] * x[k * a.dim + d];
        y[d] = s;
      }
    }
  }, 4);
}

void hc_expand(core::ThreadPool& pool, const HcExpandArgs& a) {
  pool.parallel_for(a.rows, [&](int64_t r0, int64_t r1) {
    std::vector<float> res(static_cast<size_t>(a.hc));
    for (int64_t r = r0; r < r1; ++r) {
      float* x = a.x + r * a.hc * a.dim;
      const float* y = a.y + r * a.dim;
      const float* post = a.post + r * a.hc;
      const float* c = a.comb + r * a.hc * a.hc;
      for (int64_t d = 0; d < a.dim; ++d) {
        for (int64_t j = 0; j < a.hc; ++j) res[j] = x[j * a.dim + d];
        for (int64_t k = 0; k < a.hc; ++k) {
          float mixed = 0.0f;
          for (int64_t j = 0; j < a.hc; ++j) mixed += c[j * a.hc + k] * res[j];
          x[k * a.dim + d] = post[k] * y[d] + mixed;
        }
      }
    }
  }, 4);
}

void engram_gate(core::ThreadPool& pool, const EngramGateArgs& a) {
  const int64_t D = a.dim;
  const float inv_sqrt_d = 1.0f / std::sqrt(static_cast<float>(D));
  pool.parallel_for(a.rows, [&](int64_t r0, int64_t r1) {
    std::vector<float> hw(static_cast<size_t>(D));
    for (int64_t r = r0; r < r1; ++r) {
      const float* kv = a.kv + r * (a.hc + 1) * D;
      const float* value = kv + a.hc * D;
      for (int64_t k = 0; k < a.hc; ++k) {
        float* x = a.x + (r * a.hc + k) * D;
        const float* key = kv + k * D;
        const float* w = a.w + k * D;
        const float rstd = (1.0f / std::sqrt(dot(x, x, D) / static_cast<float>(D) + a.eps)) *
                           (1.0f / std::sqrt(dot(key, key, D) / static_cast<float>(D) + a.eps));
        for (int64_t d = 0; d < D; ++d) hw[d] = x[d] * w[d];
        const float dt = dot(hw.data(), key, D) * rstd * inv_sqrt_d;
        const float g = sigmoid(std::copysign(std::sqrt(std::max(std::fabs(dt), 1e-6f)), dt));
        for (int64_t d = 0; d < D; ++d) x[d] += g * value[d];
      }
    }
  }, 4);
}

}  // namespace deepinfer::kernels::cpu
