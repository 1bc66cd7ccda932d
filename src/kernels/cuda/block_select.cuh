// Block-wide radix selection shared by the top-k kernels (select.cu) and the sampler
// (sample.cu): the k-th largest of n order-preserving 32-bit keys, by four 8-bit passes with
// integer histograms (exact counts, so the result never depends on the thread schedule).
#pragma once

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/tiling.cuh"

namespace deepinfer::kernels::cuda {

// Order-preserving key of a score; 0 = never picked (-inf, NaN). -0 and +0 share a key (ties).
__device__ __forceinline__ uint32_t order_key(float v) {
  if (!(v > -INFINITY)) return 0u;
  const uint32_t u = v == 0.0f ? 0u : __float_as_uint(v);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

struct SelShared {
  int hist[256];
  int scan[32];
  int digit, above;
};

__device__ inline int64_t block_excl_scan_i(int v, int* scan) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  int incl = v;
  for (int off = 1; off < 32; off <<= 1) {
    const int y = __shfl_up_sync(detail::kFull, incl, off);
    if (lane >= off) incl += y;
  }
  __syncthreads();
  if (lane == 31) scan[w] = incl;
  __syncthreads();
  int64_t base = 0;
  for (int i = 0; i < w; ++i) base += scan[i];
  return base + incl - v;
}

// The k-th largest key of [0, n) (key 0 never counts): thr, and need = how many keys equal
// to thr rank among the k largest (the rest of the k are above thr). Fewer than k nonzero keys:
// thr = 0, need = 0. blockDim.x: a multiple of 32, at least 32; every thread gets the result.
template <class KeyF>
__device__ void block_kth_key(int64_t n, int64_t k, KeyF key, SelShared& sh, uint32_t& thr, int64_t& need) {
  const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, T = blockDim.x;
  int cnt = 0;
  for (int64_t j = tid; j < n; j += T) cnt += key(j) != 0u;
  const int64_t nvalid = block_sum_i(cnt, sh.scan);
  thr = 0u;
  need = 0;
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
          const int y = __shfl_up_sync(detail::kFull, incl, off);
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
}

// Marks the k largest keys of [0, n) (ties: lower index first; key 0 never), out(j, picked)
// for every j. blockDim.x: a multiple of 32, at least 32.
template <class KeyF, class OutF>
__device__ void block_topk(int64_t n, int64_t k, KeyF key, OutF out, SelShared& sh) {
  const int tid = threadIdx.x, T = blockDim.x;
  if (k <= 0) {
    for (int64_t j = tid; j < n; j += T) out(j, false);
    return;
  }
  uint32_t thr;
  int64_t need;
  block_kth_key(n, k, key, sh, thr, need);
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


}  // namespace deepinfer::kernels::cuda
