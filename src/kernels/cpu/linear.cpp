// Matrix products: y = x · wᵀ with the weight in its stored [out, in] layout.
#include <algorithm>
#include <vector>

#include "core/error.h"

#include "kernels/cpu/cpu_ops.h"

namespace deepinfer::kernels::cpu {

namespace {

constexpr int kLanes = 16;

inline float reduce_lanes(float* acc) {
  for (int w = kLanes / 2; w > 0; w /= 2)
    for (int i = 0; i < w; ++i) acc[i] += acc[i + w];
  return acc[0];
}

// Four rows of x against two weight rows; each of the 8 outputs gets exactly the arithmetic
// of dot() (same lanes, same order), so blocking never changes a result.
__attribute__((target_clones("avx512f", "avx2", "default")))
void dot4x2(const float* const* x, const float* w0, const float* w1, int64_t k, float* out0, float* out1) {
  float a[4][kLanes] = {}, b[4][kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= k; i += kLanes) {
    for (int r = 0; r < 4; ++r) {
      for (int j = 0; j < kLanes; ++j) {
        const float xv = x[r][i + j];
        a[r][j] += xv * w0[i + j];
        b[r][j] += xv * w1[i + j];
      }
    }
  }
  for (int r = 0; r < 4; ++r)
    for (int j = 0; i + j < k; ++j) {
      a[r][j] += x[r][i + j] * w0[i + j];
      b[r][j] += x[r][i + j] * w1[i + j];
    }
  for (int r = 0; r < 4; ++r) {
    out0[r] = reduce_lanes(a[r]);
    out1[r] = reduce_lanes(b[r]);
  }
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
  DI_CHECK(a.w.cols == a.k && a.w_row0 + a.n <= a.w.rows, "matmul: weight view does not match the product");
  const float* wf = a.w.f32();
  // Parallel over output columns (weight rows): each weight row is read once per block of
  // 64 input rows; decode (m = 1) streams the weight exactly once. Quantised rows are
  // dequantised into a per-thread buffer first (exact), so every format gives the bits of
  // the float path.
  constexpr int64_t kRowBlock = 64;
  // Small products run on the calling thread: waking workers costs more than they save.
  const int64_t min_cols = a.m * a.n * a.k < (int64_t{1} << 18) ? a.n : 16;
  // Fewer than 4 input rows (decode): quantised rows are consumed directly, fused.
  const bool fused = !wf && a.m < 4 && a.w.format != WeightFormat::kBF16;
  pool.parallel_for(a.n, [&](int64_t n0, int64_t n1) {
    if (fused) {
      std::vector<float> buf(static_cast<size_t>(a.k));
      for (int64_t n = n0; n < n1; ++n)
        for (int64_t m = 0; m < a.m; ++m)
          if (!dot_quantized(a.x + m * ldx, a.w, a.w_row0 + n, &a.y[m * ldy + n])) {
            dequant_row(a.w, a.w_row0 + n, buf.data());
            a.y[m * ldy + n] = dot(a.x + m * ldx, buf.data(), a.k);
          }
      return;
    }
    std::vector<float> buf0, buf1;
    if (!wf) {
      buf0.resize(static_cast<size_t>(a.k));
      buf1.resize(static_cast<size_t>(a.k));
    }
    auto row = [&](int64_t n, std::vector<float>& buf) -> const float* {
      if (wf) return wf + (a.w_row0 + n) * a.k;
      dequant_row(a.w, a.w_row0 + n, buf.data());
      return buf.data();
    };
    for (int64_t mb = 0; mb < a.m; mb += kRowBlock) {
      const int64_t me = std::min(a.m, mb + kRowBlock);
      int64_t n = n0;
      for (; n + 2 <= n1; n += 2) {
        const float* w0 = row(n, buf0);
        const float* w1 = row(n + 1, buf1);
        int64_t m = mb;
        for (; m + 4 <= me; m += 4) {
          const float* xs[4] = {a.x + m * ldx, a.x + (m + 1) * ldx, a.x + (m + 2) * ldx, a.x + (m + 3) * ldx};
          float o0[4], o1[4];
          dot4x2(xs, w0, w1, a.k, o0, o1);
          for (int r = 0; r < 4; ++r) {
            a.y[(m + r) * ldy + n] = o0[r];
            a.y[(m + r) * ldy + n + 1] = o1[r];
          }
        }
        for (; m < me; ++m) {
          a.y[m * ldy + n] = dot(a.x + m * ldx, w0, a.k);
          a.y[m * ldy + n + 1] = dot(a.x + m * ldx, w1, a.k);
        }
      }
      for (; n < n1; ++n) {
        const float* w0 = row(n, buf0);
        for (int64_t m = mb; m < me; ++m) a.y[m * ldy + n] = dot(a.x + m * ldx, w0, a.k);
      }
    }
  }, min_cols);
}

}  // namespace deepinfer::kernels::cpu
