// Row normalisation and rotary embedding: RMSNorm, RoPE (interleaved pairs, rope_pairs).
#include <cmath>

#include "kernels/cpu/cpu_ops.h"

namespace deepinfer::kernels::cpu {

void rms_norm(core::ThreadPool& pool, const RmsNormArgs& a) {
  pool.parallel_for(a.rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* x = a.x + r * a.dim;
      float* y = a.y + r * a.dim;
      float ms = dot(x, x, a.dim) / static_cast<float>(a.dim);
      float inv = 1.0f / std::sqrt(ms + a.eps);
      for (int64_t i = 0; i < a.dim; ++i) y[i] = a.w ? a.w[i] * (x[i] * inv) : x[i] * inv;
    }
  }, 8);
}

void rope(core::ThreadPool& pool, const RopeArgs& a) {
  const int64_t half = a.rope_dim / 2, off = a.head_dim - a.rope_dim;
  pool.parallel_for(a.rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* c = a.cos + r * half;
      const float* s = a.sin + r * half;
      for (int64_t h = 0; h < a.heads; ++h) rope_pairs(a.x + (r * a.heads + h) * a.head_dim + off, c, s, a.rope_dim, a.inverse);
    }
  }, 4);
}
}  // namespace deepinfer::kernels::cpu
