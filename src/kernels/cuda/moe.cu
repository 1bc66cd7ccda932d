// CUDA: the routed experts without a round trip to the host. moe_permute groups the (token, slot)
// pairs by expert (a stable counting sort: one block per expert, one launch); router scores the
// experts and takes each row's top-k (a warp per row); route runs both in one launch for few rows.
#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "kernels/cuda/cuda_ops.h"

namespace deepinfer::kernels::cuda {

namespace {

constexpr int kPermThreads = 1024;

// Block e: its first permuted row (the pairs routed to experts before it: one pass over the
// ids, no separate count launch), then its pairs in ascending pair index, compacted chunk by
// chunk with warp ballots.
__global__ void moe_permute_k(MoePermuteArgs a) {
  DI_PDL_ENTRY();
  __shared__ int part[32];
  __shared__ int warp_n[kPermThreads / 32];
  const int e = static_cast<int>(blockIdx.x);
  int before = 0, own = 0;
  for (int64_t i = threadIdx.x; i < a.n * a.k; i += blockDim.x) {
    const int32_t id = a.ids[i];
    before += id >= 0 && id < e;
    own += id == e;
  }
  int base = static_cast<int>(block_sum_i(before, part));
  const int count = static_cast<int>(block_sum_i(own, part));
  const int64_t pairs = a.n * a.k;
  if (threadIdx.x == 0) {
    a.offsets[e] = base;
    if (e == a.experts - 1) a.offsets[a.experts] = base + count;
    if (e == a.experts - 1 && a.shared) a.offsets[a.experts + 1] = static_cast<int32_t>(pairs + a.n);
  }
  if (a.shared)  // the shared expert's rows: every token in order, weight 1
    for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < a.n; t += gridDim.x * static_cast<int64_t>(blockDim.x)) {
      a.perm_token[pairs + t] = static_cast<int32_t>(t);
      a.perm_weight[pairs + t] = 1.0f;
    }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
  for (int64_t i0 = 0; i0 < pairs; i0 += blockDim.x) {
    const int64_t i = i0 + threadIdx.x;
    const bool mine = i < pairs && a.ids[i] == e;
    const unsigned m = __ballot_sync(0xffffffffu, mine);
    if (lane == 0) warp_n[warp] = __popc(m);
    __syncthreads();
    int ahead = 0, total = 0;
    for (int w = 0; w < nw; ++w) {
      ahead += w < warp ? warp_n[w] : 0;
      total += warp_n[w];
    }
    if (mine) {
      const int j = base + ahead + __popc(m & ((1u << lane) - 1u));
      a.perm_token[j] = static_cast<int32_t>(i / a.k);
      a.perm_weight[j] = a.weights[i];
      a.slot_row[i] = j;
    }
    base += total;
    __syncthreads();
  }
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

void moe_permute(const MoePermuteArgs& a, Stream s) {
  if (a.experts == 0) return;
  launch_k(moe_permute_k, static_cast<unsigned>(a.experts), kPermThreads, 0, s, a);
  DI_CUDA_LAUNCHED();
}

void router(const RouterArgs& a, Stream s) {
  if (a.rows == 0) return;
  const size_t smem = static_cast<size_t>(kRouterWarps * 2 * a.experts) * sizeof(float);
  if (smem > 48 * 1024 || a.experts > 2048) {
    std::fprintf(stderr, "deepinfer: router supports at most %d experts\n", std::min(2048, 48 * 1024 / (kRouterWarps * 8)));
    std::abort();
  }
  launch_k(router_k, static_cast<unsigned>(ceil_div(a.rows, kRouterWarps)), kRouterWarps * 32, smem, s, a);
  DI_CUDA_LAUNCHED();
}
void route(const RouterArgs& r, const MoePermuteArgs& p, Stream s) {
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
