// CUDA: indexer scores. A 128 x 128 tile of (query, head) rows x keys per CTA, the 32-deep
// chunks of the dot dimension staged in shared memory, then the per-(query, key) sum over heads
// in head order, as the reference. The first version (a thread per (query, key)) stays as the
// fallback (DEEPINFER_CUDA_LEGACY=1 forces it).
#include <algorithm>
#include <cstdlib>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/tiling.cuh"

namespace deepinfer::kernels::cuda {

namespace {

using namespace detail;

__global__ void indexer_scores_k(IndexerScoreArgs a) {
  DI_PDL_ENTRY();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= a.s * a.t) return;
  const int64_t s = i / a.t, j = i % a.t;
  if (j >= (a.q_pos[s] + 1) / a.ratio) {
    a.scores[i] = -INFINITY;
    return;
  }
  float acc = 0.0f;
  for (int64_t h = 0; h < a.heads; ++h) {
    const float* q = a.q + (s * a.heads + h) * a.dim;
    const float* k = a.k + j * a.dim;
    float dt = 0.0f;
    for (int64_t c = 0; c < a.dim; ++c) dt += q[c] * k[c];
    acc += fmaxf(dt, 0.0f) * a.score_scale * a.w[s * a.heads + h];
  }
  a.scores[i] = acc;
}

// ---------------------------------------------------------------------------------------
// Indexer scores: C[(s, h), t] = q[s, h] · k[t] on a 128 x 128 tile (256 threads, 8 x 8 each,
// rows ty + 16 ii, columns tx + 16 jj), then I[s, t] = Σ_h in order of ReLU(C) · scale · w.

constexpr int kIxBM = 128, kIxBN = 128, kIxBK = 32, kIxLD = kIxBK + 4, kIxThreads = 256, kIxCLD = kIxBN + 1;
constexpr size_t kIxSmem = static_cast<size_t>(2 * (kIxBM + kIxBN) * kIxLD) * 4;
static_assert(static_cast<size_t>(kIxBM * kIxCLD + kIxBM) * 4 <= kIxSmem, "epilogue fits the operand buffers");

// The tile (blockIdx.x, blockIdx.y) of one call's scores; a batch's grid covers its largest item,
// so a block past this item's keys or queries has nothing to do.
__device__ __forceinline__ void indexer_tile(const IndexerScoreArgs& a, int bq, float* sm, int64_t* s_vmax_p) {
  int64_t& s_vmax = *s_vmax_p;
  float* As = sm;                       // [2][BM][LD]
  float* Bs = sm + 2 * kIxBM * kIxLD;   // [2][BN][LD]
  const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
  const int64_t H = a.heads, s0 = static_cast<int64_t>(blockIdx.y) * bq, t0 = static_cast<int64_t>(blockIdx.x) * kIxBN;
  if (s0 >= a.s || t0 >= a.t) return;
  const int nq = static_cast<int>(min(static_cast<int64_t>(bq), a.s - s0));
  if (tid == 0) {
    int64_t v = 0;
    for (int i = 0; i < nq; ++i) v = max(v, (a.q_pos[s0 + i] + 1) / a.ratio);
    s_vmax = v;
  }
  __syncthreads();
  if (t0 >= s_vmax) {  // no key of the tile is visible to any of its queries
    for (int o = tid; o < nq * kIxBN; o += kIxThreads) {
      const int64_t tt = t0 + o % kIxBN;
      if (tt < a.t) a.scores[(s0 + o / kIxBN) * a.t + tt] = -INFINITY;
    }
    return;
  }
  const int64_t qrows = a.s * H;
  auto load = [&](int kc, int buf) {
    float* A = As + buf * kIxBM * kIxLD;
    float* B = Bs + buf * kIxBN * kIxLD;
    for (int idx = tid; idx < kIxBM * (kIxBK / 4); idx += kIxThreads) {
      const int r = idx >> 3, c4 = idx & 7;
      const int64_t c = static_cast<int64_t>(kc) * kIxBK + c4 * 4;
      const int64_t gr = s0 * H + r, gt = t0 + r;
      const bool va = gr < qrows && c < a.dim, vb = gt < a.t && c < a.dim;
      cp_async16_zfill(A + r * kIxLD + c4 * 4, va ? a.q + gr * a.dim + c : a.q, va ? 16 : 0);
      cp_async16_zfill(B + r * kIxLD + c4 * 4, vb ? a.k + gt * a.dim + c : a.k, vb ? 16 : 0);
    }
    cp_async_commit();
  };

  float acc[8][8];
#pragma unroll
  for (int ii = 0; ii < 8; ++ii)
#pragma unroll
    for (int jj = 0; jj < 8; ++jj) acc[ii][jj] = 0.0f;
  const int nk = static_cast<int>((a.dim + kIxBK - 1) / kIxBK);
  load(0, 0);
  for (int kc = 0; kc < nk; ++kc) {
    if (kc + 1 < nk) {
      load(kc + 1, (kc + 1) & 1);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const float* A = As + (kc & 1) * kIxBM * kIxLD + ty * kIxLD;
    const float* B = Bs + (kc & 1) * kIxBN * kIxLD + tx * kIxLD;
#pragma unroll 1  // unrolled further, the loads hoisted across iterations spill at 128 registers
    for (int kk = 0; kk < kIxBK; kk += 4) {
      float4 b[8];
#pragma unroll
      for (int jj = 0; jj < 8; ++jj) b[jj] = *reinterpret_cast<const float4*>(B + jj * 16 * kIxLD + kk);
#pragma unroll
      for (int ii = 0; ii < 8; ++ii) {
        const float4 av = *reinterpret_cast<const float4*>(A + ii * 16 * kIxLD + kk);
#pragma unroll
        for (int jj = 0; jj < 8; ++jj) {
          acc[ii][jj] = fmaf(av.x, b[jj].x, acc[ii][jj]);
          acc[ii][jj] = fmaf(av.y, b[jj].y, acc[ii][jj]);
          acc[ii][jj] = fmaf(av.z, b[jj].z, acc[ii][jj]);
          acc[ii][jj] = fmaf(av.w, b[jj].w, acc[ii][jj]);
        }
      }
    }
    __syncthreads();
  }
  float* Cs = sm;                    // [BM][CLD], over the operand buffers
  float* Ws = sm + kIxBM * kIxCLD;   // [BM] head weights of the tile's rows
#pragma unroll
  for (int ii = 0; ii < 8; ++ii)
#pragma unroll
    for (int jj = 0; jj < 8; ++jj) Cs[(ty + 16 * ii) * kIxCLD + tx + 16 * jj] = acc[ii][jj];
  for (int r = tid; r < kIxBM; r += kIxThreads) {
    const int64_t gr = s0 * H + r;
    Ws[r] = gr < qrows ? a.w[gr] : 0.0f;
  }
  __syncthreads();
  for (int o = tid; o < nq * kIxBN; o += kIxThreads) {
    const int sl = o / kIxBN, col = o % kIxBN;
    const int64_t sq = s0 + sl, tt = t0 + col;
    if (tt >= a.t) continue;
    float res = -INFINITY;
    if (tt < (a.q_pos[sq] + 1) / a.ratio) {
      const float* cp = Cs + sl * H * kIxCLD + col;
      const float* wp = Ws + sl * H;
      float acc2 = 0.0f;
      for (int64_t h = 0; h < H; ++h) acc2 += fmaxf(cp[h * kIxCLD], 0.0f) * a.score_scale * wp[h];
      res = acc2;
    }
    a.scores[sq * a.t + tt] = res;
  }
}

__global__ void __launch_bounds__(kIxThreads, 2) indexer_tiled_k(IndexerScoreArgs a, int bq) {
  DI_PDL_ENTRY();
  extern __shared__ __align__(16) float sm[];
  __shared__ int64_t s_vmax;
  indexer_tile(a, bq, sm, &s_vmax);
}
// A batch: item blockIdx.z.
__global__ void __launch_bounds__(kIxThreads, 2) indexer_tiled_batch_k(const IndexerScoreArgs* items, int bq) {
  DI_PDL_ENTRY();
  extern __shared__ __align__(16) float sm[];
  __shared__ int64_t s_vmax;
  indexer_tile(items[blockIdx.z], bq, sm, &s_vmax);
}

// The tiled kernel's conditions: heads dividing its 128 rows, dim a multiple of 4, 16-byte
// aligned q and k; returns the queries per tile (0: not eligible).
int64_t tiled_rows(const IndexerScoreArgs& a) {
  const int64_t bq = a.heads > 0 && a.heads <= kIxBM && kIxBM % a.heads == 0 ? kIxBM / a.heads : 0;
  const bool ok = !legacy_forced() && bq > 0 && a.dim > 0 && a.dim % 4 == 0 && aligned16(a.q) && aligned16(a.k) &&
                  ceil_div(a.s, bq) <= 65535;
  return ok ? bq : 0;
}

}  // namespace

void indexer_scores(const IndexerScoreArgs& a, cudaStream_t s) {
  if (a.s * a.t == 0) return;
  const int64_t bq = tiled_rows(a);
  if (bq > 0) {
    opt_in_smem(indexer_tiled_k, kIxSmem);
    const dim3 g(static_cast<unsigned>(ceil_div(a.t, kIxBN)), static_cast<unsigned>(ceil_div(a.s, bq)));
    launch_k(indexer_tiled_k, g, kIxThreads, kIxSmem, s, a, static_cast<int>(bq));
    DI_CUDA_LAUNCHED();
    return;
  }
  launch_k(indexer_scores_k, grid(a.s * a.t), kThreads, 0, s, a);
  DI_CUDA_LAUNCHED();
}

bool indexer_scores_batch_fits(const IndexerScoreArgs* items, int64_t n) {
  if (n < 1 || n > 65535) return false;
  for (int64_t i = 0; i < n; ++i)
    if (tiled_rows(items[i]) == 0 || items[i].heads != items[0].heads) return false;
  return true;
}

void indexer_scores_batch(const IndexerScoreArgs* host_items, const IndexerScoreArgs* dev_items, int64_t n, cudaStream_t s) {
  int64_t max_s = 0, max_t = 0;
  for (int64_t i = 0; i < n; ++i) {
    max_s = std::max(max_s, host_items[i].s);
    max_t = std::max(max_t, host_items[i].t);
  }
  if (max_s * max_t == 0) return;
  const int64_t bq = tiled_rows(host_items[0]);
  opt_in_smem(indexer_tiled_batch_k, kIxSmem);
  const dim3 g(static_cast<unsigned>(ceil_div(max_t, kIxBN)), static_cast<unsigned>(ceil_div(max_s, bq)), static_cast<unsigned>(n));
  launch_k(indexer_tiled_batch_k, g, kIxThreads, kIxSmem, s, dev_items, static_cast<int>(bq));
  DI_CUDA_LAUNCHED();
}
}  // namespace deepinfer::kernels::cuda
