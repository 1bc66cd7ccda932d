// CUDA: top-k selection, candidate blocks and the MoE router. topk_mask / candidate_blocks:
// one CTA per row, radix select (4 passes of 8 bits) of the k-th largest order-preserving key,
// then entries above it and the lowest-index ties. The first versions (a thread per row with k
// passes) stay as the fallback (DEEPINFER_CUDA_LEGACY=1 forces them).
#include <algorithm>
#include <cstdlib>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/tiling.cuh"

namespace deepinfer::kernels::cuda {

namespace {

using namespace detail;

// k best of v[0..n) (ties: lower index), -inf excluded, written as 1s into sel (0 elsewhere).
__device__ void select_topk(const float* v, int64_t n, int64_t k, uint8_t* sel, const uint8_t* restrict_to) {
  for (int64_t j = 0; j < n; ++j) sel[j] = 0;
  for (int64_t r = 0; r < k; ++r) {
    int64_t best = -1;
    float bv = -INFINITY;
    for (int64_t j = 0; j < n; ++j) {
      if (sel[j] || (restrict_to && !restrict_to[j])) continue;
      if (best < 0 || v[j] > bv) {
        best = j;
        bv = v[j];
      }
    }
    if (best < 0 || !(bv > -INFINITY)) break;
    sel[best] = 1;
  }
}

__global__ void topk_mask_k(TopkMaskArgs a) {
  const int64_t s = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (s >= a.s) return;
  select_topk(a.scores + s * a.t, a.t, a.k, a.selected + s * a.t, a.restrict_to ? a.restrict_to + s * a.t : nullptr);
}

__global__ void candidate_blocks_k(CandidateBlocksArgs a, float* block_scores, uint8_t* block_sel) {
  const int64_t s = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (s >= a.s) return;
  const int64_t nb = (a.t + a.block_size - 1) / a.block_size;
  float* bs = block_scores + s * nb;
  uint8_t* bsel = block_sel + s * nb;
  const float* sc = a.scores + s * a.t;
  for (int64_t b = 0; b < nb; ++b) {
    float m = -INFINITY;
    for (int64_t j = b * a.block_size; j < min(a.t, (b + 1) * a.block_size); ++j) m = fmaxf(m, sc[j]);
    bs[b] = m;
  }
  const int64_t len = (a.q_pos[s] + 1) / a.ratio;
  const int64_t last = len - 1 >= 0 ? (len - 1) / a.block_size : -1;
  if (last >= 0 && last < nb) bs[last] = INFINITY;
  select_topk(bs, nb, a.topk_blocks, bsel, nullptr);
  for (int64_t j = 0; j < a.t; ++j) a.keep[s * a.t + j] = bsel[j / a.block_size];
}

// ---------------------------------------------------------------------------------------
// Top-k selection, a CTA per row.

// Order-preserving key of a score; 0 = never picked (-inf, NaN). -0 and +0 share a key (ties).
__device__ __forceinline__ uint32_t order_key(float v) {
  if (!(v > -INFINITY)) return 0u;
  const uint32_t u = v == 0.0f ? 0u : __float_as_uint(v);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

constexpr int kSelThreads = 256;
struct SelShared {
  int hist[256];
  int scan[32];
  int digit, above;
};

__device__ int64_t block_excl_scan_i(int v, int* scan) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  int incl = v;
  for (int off = 1; off < 32; off <<= 1) {
    const int y = __shfl_up_sync(kFull, incl, off);
    if (lane >= off) incl += y;
  }
  __syncthreads();
  if (lane == 31) scan[w] = incl;
  __syncthreads();
  int64_t base = 0;
  for (int i = 0; i < w; ++i) base += scan[i];
  return base + incl - v;
}

// Marks the k largest keys of [0, n) (ties: lower index first; key 0 never), out(j, picked)
// for every j. blockDim.x: a multiple of 32, at least 32.
template <class KeyF, class OutF>
__device__ void block_topk(int64_t n, int64_t k, KeyF key, OutF out, SelShared& sh) {
  const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, T = blockDim.x;
  if (k <= 0) {
    for (int64_t j = tid; j < n; j += T) out(j, false);
    return;
  }
  int cnt = 0;
  for (int64_t j = tid; j < n; j += T) cnt += key(j) != 0u;
  const int64_t nvalid = block_sum_i(cnt, sh.scan);
  uint32_t thr = 0u;  // nvalid <= k: every valid key is above 0
  int64_t need = 0;   // ties at thr to take, lowest index first
  if (nvalid > k) {
    uint32_t prefix = 0u, mask = 0u;
    int64_t remaining = k;
    for (int shift = 24; shift >= 0; shift -= 8) {
      for (int b = tid; b < 256; b += T) sh.hist[b] = 0;
      __syncthreads();
      for (int64_t j = tid; j < n; j += T) {
        const uint32_t kk = key(j);
        if (kk != 0u && (kk & mask) == prefix) atomicAdd(&sh.hist[(kk >> shift) & 255u], 1);
      }
      __syncthreads();
      if (w == 0) {  // the digit where the count from the top reaches `remaining`
        int c[8], local = 0;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          c[i] = sh.hist[255 - (lane * 8 + i)];
          local += c[i];
        }
        int incl = local;
        for (int off = 1; off < 32; off <<= 1) {
          const int y = __shfl_up_sync(kFull, incl, off);
          if (lane >= off) incl += y;
        }
        const int excl = incl - local, rem = static_cast<int>(remaining);
        if (excl < rem && incl >= rem) {
          int cum = excl;
          bool found = false;
#pragma unroll
          for (int i = 0; i < 8; ++i) {
            if (!found && cum + c[i] >= rem) {
              sh.digit = 255 - (lane * 8 + i);
              sh.above = cum;
              found = true;
            }
            cum += c[i];
          }
        }
      }
      __syncthreads();
      prefix |= static_cast<uint32_t>(sh.digit) << shift;
      mask |= 0xFFu << shift;
      remaining -= sh.above;
    }
    thr = prefix;
    need = remaining;
  }
  // Each thread marks a contiguous segment; ties ranked by a block scan in index order.
  const int64_t seg = (n + T - 1) / T, j0 = min(n, tid * seg), j1 = min(n, j0 + seg);
  int64_t rank = 0;
  if (need > 0) {
    int ties = 0;
    for (int64_t j = j0; j < j1; ++j) ties += key(j) == thr;
    rank = block_excl_scan_i(ties, sh.scan);
  }
  for (int64_t j = j0; j < j1; ++j) {
    const uint32_t kk = key(j);
    bool pick = kk != 0u && kk > thr;
    if (need > 0 && kk == thr) {
      pick = rank < need;
      ++rank;
    }
    out(j, pick);
  }
}

__global__ void __launch_bounds__(kSelThreads) topk_mask_block_k(TopkMaskArgs a) {
  __shared__ SelShared sh;
  const int64_t s = blockIdx.x;
  const float* sc = a.scores + s * a.t;
  const uint8_t* rs = a.restrict_to ? a.restrict_to + s * a.t : nullptr;
  uint8_t* selected = a.selected + s * a.t;
  block_topk(
      a.t, a.k, [&](int64_t j) { return (rs && !rs[j]) ? 0u : order_key(sc[j]); },
      [&](int64_t j, bool v) { selected[j] = v ? 1 : 0; }, sh);
}

__global__ void __launch_bounds__(kSelThreads) candidate_blocks_block_k(CandidateBlocksArgs a) {
  __shared__ SelShared sh;
  const int64_t s = blockIdx.x, bs = a.block_size, nb = (a.t + bs - 1) / bs;
  const float* sc = a.scores + s * a.t;
  uint8_t* keep = a.keep + s * a.t;
  const int64_t len = (a.q_pos[s] + 1) / a.ratio;
  const int64_t last = len - 1 >= 0 ? (len - 1) / bs : -1;  // the newest visible position's block: pinned
  block_topk(
      nb, a.topk_blocks,
      [&](int64_t b) {
        if (b == last) return order_key(INFINITY);
        float m = -INFINITY;
        for (int64_t j = b * bs; j < min(a.t, (b + 1) * bs); ++j) m = fmaxf(m, sc[j]);
        return order_key(m);
      },
      [&](int64_t b, bool v) {
        for (int64_t j = b * bs; j < min(a.t, (b + 1) * bs); ++j) keep[j] = v ? 1 : 0;
      },
      sh);
}

// One warp per row: every expert's score computed by its lane (the same per-element formula as
// the CPU), then top_k rounds of a warp argmax (higher biased score, then lower index). The
// softmax denominator and the weight sum stay serial, in the CPU's order.
constexpr int kRouterWarps = 4;
__global__ void __launch_bounds__(kRouterWarps * 32) router_k(RouterArgs a) {
  extern __shared__ float router_smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRouterWarps + warp;
  if (r >= a.rows) return;
  const int E = static_cast<int>(a.experts), K = static_cast<int>(a.top_k);
  float* sc = router_smem + warp * 2 * E;
  float* biased = sc + E;
  const float* z = a.logits + r * a.experts;
  float mx = -INFINITY, den = 0.0f;
  if (a.func == ScoringFunc::kSoftmax) {
    if (lane == 0) {
      for (int e = 0; e < E; ++e) mx = fmaxf(mx, z[e] / a.temp);
      for (int e = 0; e < E; ++e) den += expf(z[e] / a.temp - mx);
    }
    mx = __shfl_sync(0xffffffffu, mx, 0);
    den = __shfl_sync(0xffffffffu, den, 0);
  }
  for (int e = lane; e < E; e += 32) {
    const float v = z[e] / a.temp;
    sc[e] = a.func == ScoringFunc::kSoftmax ? expf(v - mx) / den
            : a.func == ScoringFunc::kSigmoid ? 1.0f / (1.0f + expf(-v))
                                               : sqrtf(v > 20.0f ? v : log1pf(expf(v)));
    biased[e] = sc[e] + (a.bias ? a.bias[e] : 0.0f);
  }
  __syncwarp();
  int32_t* ids = a.ids + r * a.top_k;
  for (int i = 0; i < K; ++i) {
    int best = -1;
    float bv = 0.0f;
    for (int e = lane; e < E; e += 32) {
      bool taken = false;
      for (int p = 0; p < i; ++p) taken = taken || ids[p] == e;
      if (!taken && (best < 0 || biased[e] > bv)) {
        best = e;
        bv = biased[e];
      }
    }
    for (int o = 16; o > 0; o >>= 1) {
      const int ob = __shfl_xor_sync(0xffffffffu, best, o);
      const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
      if (ob >= 0 && (best < 0 || ov > bv || (ov == bv && ob < best))) {
        best = ob;
        bv = ov;
      }
    }
    if (lane == 0) ids[i] = best;
    __syncwarp();
  }
  if (lane != 0) return;
  float sum = 0.0f;
  for (int i = 0; i < K; ++i) sum += sc[ids[i]];
  for (int i = 0; i < K; ++i) {
    float w = sc[ids[i]];
    if (a.normalize && a.top_k > 1) w = w / (sum + 1e-20f);
    a.weights[r * a.top_k + i] = w * a.routed_scaling;
  }
}

// One block per row: each thread's best over its strided ids (ascending, so its ties keep the
// lower id), then a block reduction preferring the larger value, then the lower id.
constexpr int kArgmaxThreads = 256;
__global__ void argmax_k(ArgmaxArgs a) {
  const float* x = a.x + static_cast<int64_t>(blockIdx.x) * a.cols;
  float bv = -INFINITY;
  int64_t best = -1;  // -1: nothing above -inf seen
  for (int64_t c = threadIdx.x; c < a.cols; c += kArgmaxThreads)
    if (x[c] > bv) {
      bv = x[c];
      best = c;
    }
  auto better = [](float v, int64_t i, float w, int64_t j) { return j < 0 || (i >= 0 && (v > w || (v == w && i < j))); };
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
    const int64_t oi = __shfl_xor_sync(0xffffffffu, best, o);
    if (better(ov, oi, bv, best)) {
      bv = ov;
      best = oi;
    }
  }
  __shared__ float sv[kArgmaxThreads / 32];
  __shared__ int64_t si[kArgmaxThreads / 32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) {
    sv[warp] = bv;
    si[warp] = best;
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  for (int w = 1; w < kArgmaxThreads / 32; ++w)
    if (better(sv[w], si[w], bv, best)) {
      bv = sv[w];
      best = si[w];
    }
  a.ids[blockIdx.x] = static_cast<int32_t>(best < 0 ? 0 : best);
}

}  // namespace

void argmax_rows(const ArgmaxArgs& a, cudaStream_t s) {
  if (a.rows == 0) return;
  if (a.cols == 0) {
    DI_CUDA_CHECK(cudaMemsetAsync(a.ids, 0, static_cast<size_t>(a.rows) * sizeof(int32_t), s));
    return;
  }
  argmax_k<<<static_cast<unsigned>(a.rows), kArgmaxThreads, 0, s>>>(a);
  DI_CUDA_LAUNCHED();
}

void topk_mask(const TopkMaskArgs& a, cudaStream_t s) {
  if (a.s == 0) return;
  if (!legacy_forced()) {
    topk_mask_block_k<<<static_cast<unsigned>(a.s), kSelThreads, 0, s>>>(a);
  } else {
    topk_mask_k<<<grid(a.s), kThreads, 0, s>>>(a);
  }
  DI_CUDA_LAUNCHED();
}
void candidate_blocks(const CandidateBlocksArgs& a, cudaStream_t s) {
  if (a.s == 0) return;
  if (!legacy_forced()) {
    candidate_blocks_block_k<<<static_cast<unsigned>(a.s), kSelThreads, 0, s>>>(a);
    DI_CUDA_LAUNCHED();
    return;
  }
  const int64_t nb = (a.t + a.block_size - 1) / a.block_size;
  float* bs = nullptr;
  uint8_t* bsel = nullptr;
  DI_CUDA_CHECK(cudaMallocAsync(&bs, static_cast<size_t>(a.s * nb) * sizeof(float), s));
  DI_CUDA_CHECK(cudaMallocAsync(&bsel, static_cast<size_t>(a.s * nb), s));
  candidate_blocks_k<<<grid(a.s), kThreads, 0, s>>>(a, bs, bsel);
  DI_CUDA_LAUNCHED();
  DI_CUDA_CHECK(cudaFreeAsync(bs, s));
  DI_CUDA_CHECK(cudaFreeAsync(bsel, s));
}
void router(const RouterArgs& a, cudaStream_t s) {
  if (a.rows == 0) return;
  const size_t smem = static_cast<size_t>(kRouterWarps * 2 * a.experts) * sizeof(float);
  if (smem > 48 * 1024) {
    std::fprintf(stderr, "deepinfer: router supports at most %d experts\n", 48 * 1024 / (kRouterWarps * 8));
    std::abort();
  }
  router_k<<<static_cast<unsigned>(ceil_div(a.rows, kRouterWarps)), kRouterWarps * 32, smem, s>>>(a);
  DI_CUDA_LAUNCHED();
}

}  // namespace deepinfer::kernels::cuda
