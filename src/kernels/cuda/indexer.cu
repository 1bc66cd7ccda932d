// CUDA: indexer scores. A tile of (query, head) rows x keys per CTA, the 32-deep
// chunks of the dot dimension staged in shared memory, then the per-(query, key) sum over heads
// in head order, as the reference. The first version (a thread per (query, key)) stays as the
// fallback for the shapes the tiled kernels do not take.
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
// Indexer scores: C[(s, h), t] = q[s, h] · k[t] on a BM x BN tile (256 threads, II x JJ each,
// rows ty + 16 ii, columns tx + 16 jj; BM = 16 II, BN = 16 JJ), then I[s, t] = Σ_h in order of
// ReLU(C) · scale · w. Every C is one fmaf chain over the dot dimension in order and every I
// one sum over the heads in order, whatever the tile: the wide tile (128 x 128) for many
// queries, the narrow one (32 x 64: one query of 32 heads, 64 keys) when a call or a batch's
// items hold one query each (decode), where the wide tile's rows were three quarters padding
// and its 128 keys per CTA left most SMs idle. The same bits either way.

constexpr int kIxBK = 32, kIxLD = kIxBK + 4, kIxThreads = 256;
template <int II, int JJ>
struct IxTile {
  static constexpr int BM = 16 * II, BN = 16 * JJ, CLD = BN + 1;
  static constexpr size_t smem = static_cast<size_t>(2 * (BM + BN) * kIxLD) * 4;
  static_assert(static_cast<size_t>(BM * CLD + BM) * 4 <= smem, "the epilogue fits the operand buffers");
};
using IxWide = IxTile<8, 8>;
using IxNarrow = IxTile<2, 4>;

// The tile (blockIdx.x, blockIdx.y) of one call's scores; a batch's grid covers its largest item,
// so a block past this item's keys or queries has nothing to do.
template <int II, int JJ>
__device__ __forceinline__ void indexer_tile(const IndexerScoreArgs& a, int bq, float* sm, int64_t* s_vmax_p) {
  using C = IxTile<II, JJ>;
  constexpr int BM = C::BM, BN = C::BN, CLD = C::CLD;
  int64_t& s_vmax = *s_vmax_p;
  float* As = sm;                  // [2][BM][LD]
  float* Bs = sm + 2 * BM * kIxLD;  // [2][BN][LD]
  const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
  const int64_t H = a.heads, s0 = static_cast<int64_t>(blockIdx.y) * bq, t0 = static_cast<int64_t>(blockIdx.x) * BN;
  if (s0 >= a.s || t0 >= a.t) return;
  const int nq = static_cast<int>(min(static_cast<int64_t>(bq), a.s - s0));
  if (tid == 0) {
    int64_t v = 0;
    for (int i = 0; i < nq; ++i) v = max(v, (a.q_pos[s0 + i] + 1) / a.ratio);
    s_vmax = v;
  }
  __syncthreads();
  if (t0 >= s_vmax) {  // no key of the tile is visible to any of its queries
    for (int o = tid; o < nq * BN; o += kIxThreads) {
      const int64_t tt = t0 + o % BN;
      if (tt < a.t) a.scores[(s0 + o / BN) * a.t + tt] = -INFINITY;
    }
    return;
  }
  const int64_t qrows = a.s * H;
  auto load = [&](int kc, int buf) {
    float* A = As + buf * BM * kIxLD;
    float* B = Bs + buf * BN * kIxLD;
    for (int idx = tid; idx < (BM + BN) * (kIxBK / 4); idx += kIxThreads) {
      const int r = idx >> 3, c4 = idx & 7;
      const int64_t c = static_cast<int64_t>(kc) * kIxBK + c4 * 4;
      if (r < BM) {
        const int64_t gr = s0 * H + r;
        const bool va = gr < qrows && c < a.dim;
        cp_async16_zfill(A + r * kIxLD + c4 * 4, va ? a.q + gr * a.dim + c : a.q, va ? 16 : 0);
      } else {
        const int64_t gt = t0 + (r - BM);
        const bool vb = gt < a.t && c < a.dim;
        cp_async16_zfill(B + (r - BM) * kIxLD + c4 * 4, vb ? a.k + gt * a.dim + c : a.k, vb ? 16 : 0);
      }
    }
    cp_async_commit();
  };

  float acc[II][JJ];
#pragma unroll
  for (int ii = 0; ii < II; ++ii)
#pragma unroll
    for (int jj = 0; jj < JJ; ++jj) acc[ii][jj] = 0.0f;
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
    const float* A = As + (kc & 1) * BM * kIxLD + ty * kIxLD;
    const float* B = Bs + (kc & 1) * BN * kIxLD + tx * kIxLD;
#pragma unroll 1  // unrolled further, the loads hoisted across iterations spill at 128 registers
    for (int kk = 0; kk < kIxBK; kk += 4) {
      float4 b[JJ];
#pragma unroll
      for (int jj = 0; jj < JJ; ++jj) b[jj] = *reinterpret_cast<const float4*>(B + jj * 16 * kIxLD + kk);
#pragma unroll
      for (int ii = 0; ii < II; ++ii) {
        const float4 av = *reinterpret_cast<const float4*>(A + ii * 16 * kIxLD + kk);
#pragma unroll
        for (int jj = 0; jj < JJ; ++jj) {
          acc[ii][jj] = fmaf(av.x, b[jj].x, acc[ii][jj]);
          acc[ii][jj] = fmaf(av.y, b[jj].y, acc[ii][jj]);
          acc[ii][jj] = fmaf(av.z, b[jj].z, acc[ii][jj]);
          acc[ii][jj] = fmaf(av.w, b[jj].w, acc[ii][jj]);
        }
      }
    }
    __syncthreads();
  }
  float* Cs = sm;            // [BM][CLD], over the operand buffers
  float* Ws = sm + BM * CLD;  // [BM] head weights of the tile's rows
#pragma unroll
  for (int ii = 0; ii < II; ++ii)
#pragma unroll
    for (int jj = 0; jj < JJ; ++jj) Cs[(ty + 16 * ii) * CLD + tx + 16 * jj] = acc[ii][jj];
  for (int r = tid; r < BM; r += kIxThreads) {
    const int64_t gr = s0 * H + r;
    Ws[r] = gr < qrows ? a.w[gr] : 0.0f;
  }
  __syncthreads();
  for (int o = tid; o < nq * BN; o += kIxThreads) {
    const int sl = o / BN, col = o % BN;
    const int64_t sq = s0 + sl, tt = t0 + col;
    if (tt >= a.t) continue;
    float res = -INFINITY;
    if (tt < (a.q_pos[sq] + 1) / a.ratio) {
      const float* cp = Cs + sl * H * CLD + col;
      const float* wp = Ws + sl * H;
      float acc2 = 0.0f;
      for (int64_t h = 0; h < H; ++h) acc2 += fmaxf(cp[h * CLD], 0.0f) * a.score_scale * wp[h];
      res = acc2;
    }
    a.scores[sq * a.t + tt] = res;
  }
}

template <int II, int JJ>
__global__ void __launch_bounds__(kIxThreads, 2) indexer_tiled_k(IndexerScoreArgs a, int bq) {
  DI_PDL_ENTRY();
  extern __shared__ __align__(16) float sm[];
  __shared__ int64_t s_vmax;
  indexer_tile<II, JJ>(a, bq, sm, &s_vmax);
}
// A batch: item blockIdx.z.
template <int II, int JJ>
__global__ void __launch_bounds__(kIxThreads, 2) indexer_tiled_batch_k(const IndexerScoreArgs* items, int bq) {
  DI_PDL_ENTRY();
  extern __shared__ __align__(16) float sm[];
  __shared__ int64_t s_vmax;
  indexer_tile<II, JJ>(items[blockIdx.z], bq, sm, &s_vmax);
}

// The tiled kernels' conditions: heads dividing the wide tile's 128 rows, dim a multiple of 4,
// 16-byte aligned q and k; returns the queries per wide tile (0: not eligible).
int64_t tiled_rows(const IndexerScoreArgs& a) {
  const int64_t bq = a.heads > 0 && a.heads <= IxWide::BM && IxWide::BM % a.heads == 0 ? IxWide::BM / a.heads : 0;
  const bool ok = bq > 0 && a.dim > 0 && a.dim % 4 == 0 && aligned16(a.q) && aligned16(a.k) &&
                  ceil_div(a.s, bq) <= 65535;
  return ok ? bq : 0;
}
// The narrow tile for a launch whose calls hold one query each, when the heads fill its rows.
bool narrow_tile(int64_t max_s, int64_t heads) { return max_s == 1 && heads == IxNarrow::BM; }

// The scores of n calls (grid z; one call: n = 1, kern the single kernel) at the tile C.
template <class C, class Kern, class Arg>
void launch_indexer(Kern kern, const Arg& arg, int64_t bq, int64_t max_s, int64_t max_t, int64_t n, Stream s) {
  opt_in_smem(kern, C::smem);
  const dim3 g(static_cast<unsigned>(ceil_div(max_t, C::BN)), static_cast<unsigned>(ceil_div(max_s, bq)), static_cast<unsigned>(n));
  launch_k(kern, g, kIxThreads, C::smem, s, arg, static_cast<int>(bq));
  DI_CUDA_LAUNCHED();
}

}  // namespace

void indexer_scores(const IndexerScoreArgs& a, Stream s) {
  if (a.s * a.t == 0) return;
  const int64_t bq = tiled_rows(a);
  if (bq > 0) {
    if (narrow_tile(a.s, a.heads)) return launch_indexer<IxNarrow>(indexer_tiled_k<2, 4>, a, 1, a.s, a.t, 1, s);
    return launch_indexer<IxWide>(indexer_tiled_k<8, 8>, a, bq, a.s, a.t, 1, s);
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

void indexer_scores_batch(const IndexerScoreArgs* host_items, const IndexerScoreArgs* dev_items, int64_t n, Stream s) {
  int64_t max_s = 0, max_t = 0;
  for (int64_t i = 0; i < n; ++i) {
    max_s = std::max(max_s, host_items[i].s);
    max_t = std::max(max_t, host_items[i].t);
  }
  if (max_s * max_t == 0) return;
  if (narrow_tile(max_s, host_items[0].heads))
    return launch_indexer<IxNarrow>(indexer_tiled_batch_k<2, 4>, dev_items, 1, max_s, max_t, n, s);
  launch_indexer<IxWide>(indexer_tiled_batch_k<8, 8>, dev_items, tiled_rows(host_items[0]), max_s, max_t, n, s);
}
}  // namespace deepinfer::kernels::cuda
