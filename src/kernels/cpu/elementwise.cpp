// Row-wise small ops: SwiGLU with clamps, compressor pooling (RMSNorm and RoPE: norm.cpp).
#include <algorithm>
#include <cmath>

#include "kernels/cpu/cpu_ops.h"

namespace deepinfer::kernels::cpu {

void swiglu(core::ThreadPool& pool, const SwigluArgs& a) {
  pool.parallel_for(a.rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* g = a.gate + r * a.inter;
      const float* u = a.up + r * a.inter;
      float* o = a.out + r * a.inter;
      const float wt = a.weight ? a.weight[r] : 1.0f;
      for (int64_t i = 0; i < a.inter; ++i) {
        float gv = g[i], uv = u[i];
        if (a.limit > 0) {
          uv = std::clamp(uv, -a.limit, a.limit);
          gv = std::min(gv, a.limit);
        }
        float act = gv / (1.0f + std::exp(-gv));
        float y = act * uv;
        o[i] = a.weight ? wt * y : y;
      }
    }
  }, 4);
}

void compress_pool(core::ThreadPool& pool, const CompressPoolArgs& a) {
  pool.parallel_for(a.groups, [&](int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1; ++g) {
      const float* kv = a.kv + g * a.ratio * a.dim;
      const float* gt = a.gate + g * a.ratio * a.dim;
      float* out = a.out + g * a.dim;
      for (int64_t c = 0; c < a.dim; ++c) {
        float mx = -INFINITY;
        for (int64_t r = 0; r < a.ratio; ++r) mx = std::max(mx, gt[r * a.dim + c]);
        float den = 0.0f;
        for (int64_t r = 0; r < a.ratio; ++r) den += std::exp(gt[r * a.dim + c] - mx);
        float acc = 0.0f;
        for (int64_t r = 0; r < a.ratio; ++r) acc += kv[r * a.dim + c] * (std::exp(gt[r * a.dim + c] - mx) / den);
        out[c] = acc;
      }
    }
  }, 1);
}

}  // namespace deepinfer::kernels::cpu
