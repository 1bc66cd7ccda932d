// CUDA: top-k selection, candidate blocks (topk_mask / candidate_blocks, one call or a batch):
// one CTA per row, radix select (4 passes of 8 bits) of the k-th largest order-preserving key,
// then entries above it and the lowest-index ties. (The MoE router: moe.cu.)
#include <algorithm>
#include <cstdlib>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/block_select.cuh"
#include "kernels/cuda/tiling.cuh"

namespace deepinfer::kernels::cuda {

namespace {

using namespace detail;

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

}  // namespace

void topk_mask(const TopkMaskArgs& a, Stream s) {
  if (a.s == 0) return;
  launch_k(select_block_k<TopkMaskArgs, topk_row>, static_cast<unsigned>(a.s), kSelThreads, key_cache_bytes(keys_of(a)), s, a);
  DI_CUDA_LAUNCHED();
}
void candidate_blocks(const CandidateBlocksArgs& a, Stream s) {
  if (a.s == 0) return;
  launch_k(select_block_k<CandidateBlocksArgs, candidate_row>, static_cast<unsigned>(a.s), kSelThreads, key_cache_bytes(keys_of(a)), s, a);
  DI_CUDA_LAUNCHED();
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
void launch_select_batch(void (*kern)(const Args*), const Args* host_items, const Args* dev_items, int64_t n, Stream s) {
  const int64_t rows = max_over(host_items, n, [](const Args& a) { return a.s; });
  if (rows == 0) return;
  const int64_t keys = max_over(host_items, n, [](const Args& a) { return keys_of(a); });
  launch_k(kern, dim3(static_cast<unsigned>(rows), static_cast<unsigned>(n)), kSelThreads, key_cache_bytes(keys), s, dev_items);
  DI_CUDA_LAUNCHED();
}
bool select_batch_fits(int64_t n) { return n >= 1 && n <= 65535; }
void topk_mask_batch(const TopkMaskArgs* host_items, const TopkMaskArgs* dev_items, int64_t n, Stream s) {
  launch_select_batch(select_batch_k<TopkMaskArgs, topk_row>, host_items, dev_items, n, s);
}
void candidate_blocks_batch(const CandidateBlocksArgs* host_items, const CandidateBlocksArgs* dev_items, int64_t n,
                            Stream s) {
  launch_select_batch(select_batch_k<CandidateBlocksArgs, candidate_row>, host_items, dev_items, n, s);
}
}  // namespace deepinfer::kernels::cuda
