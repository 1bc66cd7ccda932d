// Matrix products: y = x · wᵀ with the weight in its stored [out, in] layout.
#include <algorithm>

#include "kernels/cpu/cpu_ops.h"

namespace deepinfer::kernels::cpu {

namespace {

constexpr int kLanes = 16;

inline float reduce_lanes(float* acc) {
  for (int w = kLanes / 2; w > 0; w /= 2)
    for (int i = 0; i < w; ++i) acc[i] += acc[i + w];
  return acc[0];
}

// Four rows of x against one weight row; each row's arithmetic is exactly that of dot().
__attribute__((target_clones("avx512f", "avx2", "default")))
void dot4(const float* x0, const float* x1, const float* x2, const float* x3, const float* w, int64_t k, float* out) {
  float a0[kLanes] = {}, a1[kLanes] = {}, a2[kLanes] = {}, a3[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= k; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      float wv = w[i + j];
      a0[j] += x0[i + j] * wv;
      a1[j] += x1[i + j] * wv;
      a2[j] += x2[i + j] * wv;
      a3[j] += x3[i + j] * wv;
    }
  }
  for (int j = 0; i + j < k; ++j) {
    float wv = w[i + j];
    a0[j] += x0[i + j] * wv;
    a1[j] += x1[i + j] * wv;
    a2[j] += x2[i + j] * wv;
    a3[j] += x3[i + j] * wv;
  }
  out[0] = reduce_lanes(a0);
  out[1] = reduce_lanes(a1);
  out[2] = reduce_lanes(a2);
  out[3] = reduce_lanes(a3);
}

}  // namespace

__attribute__((target_clones("avx512f", "avx2", "default")))
float dot(const float* a, const float* b, int64_t k) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= k; i += kLanes)
    for (int j = 0; j < kLanes; ++j) acc[j] += a[i + j] * b[i + j];
  for (int j = 0; i + j < k; ++j) acc[j] += a[i + j] * b[i + j];
  return reduce_lanes(acc);
}

void matmul(core::ThreadPool& pool, const MatmulArgs& a) {
  const int64_t ldx = a.ldx ? a.ldx : a.k, ldy = a.ldy ? a.ldy : a.n;
  if (a.m == 0 || a.n == 0) return;
  // Parallel over output columns (weight rows): each weight row is read once per block
  // of 4 input rows; decode (m = 1) streams the weight exactly once.
  constexpr int64_t kRowBlock = 64;
  pool.parallel_for(a.n, [&](int64_t n0, int64_t n1) {
    for (int64_t mb = 0; mb < a.m; mb += kRowBlock) {
      const int64_t me = std::min(a.m, mb + kRowBlock);
      for (int64_t n = n0; n < n1; ++n) {
        const float* w = a.w + n * a.k;
        int64_t m = mb;
        for (; m + 4 <= me; m += 4) {
          float o[4];
          dot4(a.x + m * ldx, a.x + (m + 1) * ldx, a.x + (m + 2) * ldx, a.x + (m + 3) * ldx, w, a.k, o);
          for (int r = 0; r < 4; ++r) a.y[(m + r) * ldy + n] = o[r];
        }
        for (; m < me; ++m) a.y[m * ldy + n] = dot(a.x + m * ldx, w, a.k);
      }
    }
  }, 16);
}

}  // namespace deepinfer::kernels::cpu
