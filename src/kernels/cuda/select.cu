// CUDA: top-k selection, candidate blocks and the MoE router. topk_mask / candidate_blocks:
// one CTA per row, radix select (4 passes of 8 bits) of the k-th largest order-preserving key,
// then entries above it and the lowest-index ties. The first versions (a thread per row with k
// passes) stay as the fallback (DEEPINFER_CUDA_LEGACY=1 forces them).
#include <algorithm>
#include <cstdlib>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/block_select.cuh"
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
  DI_PDL_ENTRY();
  const int64_t s = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (s >= a.s) return;
  select_topk(a.scores + s * a.t, a.t, a.k, a.selected + s * a.t, a.restrict_to ? a.restrict_to + s * a.t : nullptr);
}

__global__ void candidate_blocks_k(CandidateBlocksArgs a, float* block_scores, uint8_t* block_sel) {
  DI_PDL_ENTRY();
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

constexpr int kSelThreads = 256;

// The keys of a row are computed once into shared memory (dynamic, kKeyCache of them at most)
// when they fit: the radix passes read them there rather than recomputing each from global
// memory in every pass (the same keys, so the same selection). Larger rows compute them per pass
// and take no cache. kKeyCache keeps the cache and the kernels' static SelShared within the 48 KB
// a launch gets without an opt-in.
constexpr int64_t kKeyCache = (48 * 1024 - 2048) / 4;
static_assert(sizeof(SelShared) <= 2048, "the key cache leaves room for SelShared");
size_t key_cache_bytes(int64_t n) { return n <= kKeyCache ? static_cast<size_t>(n) * sizeof(uint32_t) : 0; }
// The keys of a row: its scores, or its candidate blocks.
int64_t keys_of(const TopkMaskArgs& a) { return a.t; }
int64_t keys_of(const CandidateBlocksArgs& a) { return ceil_div(a.t, a.block_size); }

// The launch's dynamic shared memory: the cache it was given (a batch launch sizes it by its
// largest item, or gives none when that one does not fit).
__device__ __forceinline__ uint32_t dynamic_smem_bytes() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(r));
  return r;
}
template <class KeyF, class OutF>
__device__ __forceinline__ void cached_topk(int64_t n, int64_t k, KeyF key, OutF out, SelShared& sh) {
  extern __shared__ uint32_t s_keys[];
  if (n * static_cast<int64_t>(sizeof(uint32_t)) > dynamic_smem_bytes()) return block_topk(n, k, key, out, sh);
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s_keys[j] = key(j);
  __syncthreads();
  block_topk(n, k, [&](int64_t j) { return s_keys[j]; }, out, sh);
}

// Row s of one call (a batch's grid covers its largest item: rows past this item's return).
__device__ __forceinline__ void topk_row(const TopkMaskArgs& a, int64_t s, SelShared& sh) {
  if (s >= a.s) return;
  const float* sc = a.scores + s * a.t;
  const uint8_t* rs = a.restrict_to ? a.restrict_to + s * a.t : nullptr;
  uint8_t* selected = a.selected + s * a.t;
  cached_topk(
      a.t, a.k, [&](int64_t j) { return (rs && !rs[j]) ? 0u : order_key(sc[j]); },
      [&](int64_t j, bool v) { selected[j] = v ? 1 : 0; }, sh);
}

__device__ __forceinline__ void candidate_row(const CandidateBlocksArgs& a, int64_t s, SelShared& sh) {
  if (s >= a.s) return;
  const int64_t bs = a.block_size, nb = (a.t + bs - 1) / bs;
  const float* sc = a.scores + s * a.t;
  uint8_t* keep = a.keep + s * a.t;
  const int64_t len = (a.q_pos[s] + 1) / a.ratio;
  const int64_t last = len - 1 >= 0 ? (len - 1) / bs : -1;  // the newest visible position's block: pinned
  cached_topk(
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

// A selection by its row function ROW (topk_row, candidate_row): a block per row of one call
// (grid x), or of a batch's items (grid y: the item, whose descriptor is in device memory).
template <class Args, void (*ROW)(const Args&, int64_t, SelShared&)>
__global__ void __launch_bounds__(kSelThreads) select_block_k(Args a) {
  DI_PDL_ENTRY();
  __shared__ SelShared sh;
  ROW(a, blockIdx.x, sh);
}
template <class Args, void (*ROW)(const Args&, int64_t, SelShared&)>
__global__ void __launch_bounds__(kSelThreads) select_batch_k(const Args* items) {
  DI_PDL_ENTRY();
  __shared__ SelShared sh;
  ROW(items[blockIdx.y], blockIdx.x, sh);
}

// One warp per row: every expert's score computed by its lane (the same per-element formula as
// the CPU), then top_k rounds of a warp argmax (higher biased score, then lower index). The
// softmax denominator and the weight sum stay serial, in the CPU's order.
constexpr int kRouterWarps = 4;
// Row r by one warp (lane), sc: its 2 x experts floats of shared memory.
__device__ void router_row(const RouterArgs& a, int64_t r, float* sc, int lane) {
  const int E = static_cast<int>(a.experts), K = static_cast<int>(a.top_k);
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
  uint64_t taken = 0;  // bit j: expert lane + 32 j already chosen (E <= 2048, see router())
  for (int i = 0; i < K; ++i) {
    int best = -1;
    float bv = 0.0f;
    for (int e = lane, j = 0; e < E; e += 32, ++j) {
      if (!((taken >> j) & 1) && (best < 0 || biased[e] > bv)) {
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
    best = __shfl_sync(0xffffffffu, best, 0);  // lane 0's choice is the one stored
    if (lane == 0) ids[i] = best;
    if (best >= 0 && best % 32 == lane) taken |= uint64_t{1} << (best / 32);
  }
  __syncwarp();
  if (lane != 0) return;
  float sum = 0.0f;
  for (int i = 0; i < K; ++i) sum += sc[ids[i]];
  for (int i = 0; i < K; ++i) {
    float w = sc[ids[i]];
    if (a.normalize && a.top_k > 1) w = w / (sum + 1e-20f);
    a.weights[r * a.top_k + i] = w * a.routed_scaling;
  }
}
__global__ void __launch_bounds__(kRouterWarps * 32) router_k(RouterArgs a) {
  DI_PDL_ENTRY();
  extern __shared__ float router_smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRouterWarps + warp;
  if (r >= a.rows) return;
  router_row(a, r, router_smem + warp * 2 * a.experts, lane);
}

// route (few rows): one block routes every row (a warp per row, as router_k), then groups the
// pairs by expert as moe_permute_k does (an expert's first row: the valid pairs of the experts
// before it; a pair's row: that plus the earlier pairs of its expert), the choices read back
// from global memory after the barrier (__ldcg: written by this launch). Shared memory: the
// warps' 2 x experts floats, then the pairs' ids.
constexpr int kRouteRows = 32;
__global__ void __launch_bounds__(kRouteRows * 32) route_k(RouterArgs a, MoePermuteArgs p) {
  DI_PDL_ENTRY();
  extern __shared__ float route_smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nw = blockDim.x / 32;
  for (int64_t r = warp; r < a.rows; r += nw) router_row(a, r, route_smem + warp * 2 * a.experts, lane);
  __syncthreads();
  const int64_t pairs = p.n * p.k;
  const int E = static_cast<int>(p.experts);
  int* sid = reinterpret_cast<int*>(route_smem + nw * 2 * a.experts);
  for (int64_t i = threadIdx.x; i < pairs; i += blockDim.x) sid[i] = __ldcg(p.ids + i);
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    int before = 0, own = 0;
    for (int64_t i = 0; i < pairs; ++i) {
      before += sid[i] >= 0 && sid[i] < e;
      own += sid[i] == e;
    }
    p.offsets[e] = before;
    if (e == E - 1) {
      p.offsets[E] = before + own;
      if (p.shared) p.offsets[E + 1] = static_cast<int32_t>(pairs + p.n);
    }
  }
  if (p.shared)
    for (int64_t t = threadIdx.x; t < p.n; t += blockDim.x) {
      p.perm_token[pairs + t] = static_cast<int32_t>(t);
      p.perm_weight[pairs + t] = 1.0f;
    }
  for (int64_t i = threadIdx.x; i < pairs; i += blockDim.x) {
    const int id = sid[i];
    if (id < 0 || id >= E) continue;
    int j = 0;
    for (int64_t q = 0; q < pairs; ++q) j += (sid[q] >= 0 && sid[q] < id) || (sid[q] == id && q < i);
    p.perm_token[j] = static_cast<int32_t>(i / p.k);
    p.perm_weight[j] = __ldcg(p.weights + i);
    p.slot_row[i] = j;
  }
}

}  // namespace

void topk_mask(const TopkMaskArgs& a, cudaStream_t s) {
  if (a.s == 0) return;
  if (!legacy_forced()) {
    launch_k(select_block_k<TopkMaskArgs, topk_row>, static_cast<unsigned>(a.s), kSelThreads, key_cache_bytes(keys_of(a)), s, a);
  } else {
    launch_k(topk_mask_k, grid(a.s), kThreads, 0, s, a);
  }
  DI_CUDA_LAUNCHED();
}
void candidate_blocks(const CandidateBlocksArgs& a, cudaStream_t s) {
  if (a.s == 0) return;
  if (!legacy_forced()) {
    launch_k(select_block_k<CandidateBlocksArgs, candidate_row>, static_cast<unsigned>(a.s), kSelThreads, key_cache_bytes(keys_of(a)), s, a);
    DI_CUDA_LAUNCHED();
    return;
  }
  const int64_t nb = (a.t + a.block_size - 1) / a.block_size;
  float* bs = nullptr;
  uint8_t* bsel = nullptr;
  DI_CUDA_CHECK(cudaMallocAsync(&bs, static_cast<size_t>(a.s * nb) * sizeof(float), s));
  DI_CUDA_CHECK(cudaMallocAsync(&bsel, static_cast<size_t>(a.s * nb), s));
  launch_k(candidate_blocks_k, grid(a.s), kThreads, 0, s, a, bs, bsel);
  DI_CUDA_LAUNCHED();
  DI_CUDA_CHECK(cudaFreeAsync(bs, s));
  DI_CUDA_CHECK(cudaFreeAsync(bsel, s));
}
// The largest f(item) of a batch (its rows: the grid; its keys per row: the key cache).
template <class Args, class F>
int64_t max_over(const Args* items, int64_t n, F f) {
  int64_t m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, f(items[i]));
  return m;
}
// A selection over a batch's rows: grid (rows of the largest item, items), the key cache sized
// by the item with the most keys per row.
template <class Args>
void launch_select_batch(void (*kern)(const Args*), const Args* host_items, const Args* dev_items, int64_t n, cudaStream_t s) {
  const int64_t rows = max_over(host_items, n, [](const Args& a) { return a.s; });
  if (rows == 0) return;
  const int64_t keys = max_over(host_items, n, [](const Args& a) { return keys_of(a); });
  launch_k(kern, dim3(static_cast<unsigned>(rows), static_cast<unsigned>(n)), kSelThreads, key_cache_bytes(keys), s, dev_items);
  DI_CUDA_LAUNCHED();
}
bool select_batch_fits(int64_t n) { return !legacy_forced() && n >= 1 && n <= 65535; }
void topk_mask_batch(const TopkMaskArgs* host_items, const TopkMaskArgs* dev_items, int64_t n, cudaStream_t s) {
  launch_select_batch(select_batch_k<TopkMaskArgs, topk_row>, host_items, dev_items, n, s);
}
void candidate_blocks_batch(const CandidateBlocksArgs* host_items, const CandidateBlocksArgs* dev_items, int64_t n,
                            cudaStream_t s) {
  launch_select_batch(select_batch_k<CandidateBlocksArgs, candidate_row>, host_items, dev_items, n, s);
}
void router(const RouterArgs& a, cudaStream_t s) {
  if (a.rows == 0) return;
  const size_t smem = static_cast<size_t>(kRouterWarps * 2 * a.experts) * sizeof(float);
  if (smem > 48 * 1024 || a.experts > 2048) {
    std::fprintf(stderr, "deepinfer: router supports at most %d experts\n", std::min(2048, 48 * 1024 / (kRouterWarps * 8)));
    std::abort();
  }
  launch_k(router_k, static_cast<unsigned>(ceil_div(a.rows, kRouterWarps)), kRouterWarps * 32, smem, s, a);
  DI_CUDA_LAUNCHED();
}
void route(const RouterArgs& r, const MoePermuteArgs& p, cudaStream_t s) {
  if (!Backend::route_paired(r, p)) {
    std::fprintf(stderr, "deepinfer: route: the permutation does not take the router's choices\n");
    std::abort();
  }
  // One launch for up to kRouteRows rows (decode) while every warp's 2 x experts floats fit 48 KB
  // (at 384 experts, 15 rows); otherwise the two kernels.
  const int64_t warps = std::min<int64_t>(kRouteRows, std::max<int64_t>(r.rows, 4));
  const size_t smem = static_cast<size_t>(warps * 2 * r.experts) * sizeof(float) + static_cast<size_t>(r.rows * r.top_k) * sizeof(int);
  if (r.rows == 0 || r.rows > kRouteRows || r.experts > 2048 || smem > 48 * 1024 || p.experts == 0) {
    router(r, s);
    return moe_permute(p, s);
  }
  launch_k(route_k, 1u, static_cast<unsigned>(warps * 32), smem, s, r, p);
  DI_CUDA_LAUNCHED();
}

}  // namespace deepinfer::kernels::cuda
