// CUDA: the hyper-connection (mHC) mixes (hc_mixes: per-row sums over fixed slices, Sinkhorn),
// the collapse (with its RMSNorm in one pass where aligned), the expansion, and the Engram gate.

#include <algorithm>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/hc_expand.cuh"
#include "kernels/cuda/norm.cuh"
#include "kernels/cuda/tiling.cuh"

namespace deepinfer::kernels::cuda {

namespace {

// Collapse and RMSNorm of row r in one pass by a block of kNormThreads (after the programmatic
// wait; hc_collapse_norm_k: a block per row; hc_project_k: blocks of the mixes' launch): each
// element is hc_collapse_k's (the same fmaf chain over the streams), the norm rms_norm_v4_k's
// (rms_norm_held on the same per-thread float4 chunks), so the bits are those of the two launches.
// Every load of the row (its streams, their weights, the norm's weights) is issued before the
// first store (a store between them would order each later load after it: one memory latency
// per chunk and stream, 8 us a row instead of about 2). HC: the stream count when known at
// compile time (4), else 0 (at most kMaxStreams).
template <int HC>
__device__ void collapse_norm_row(const HcCollapseArgs& a, int64_t r) {
  const int64_t dim = a.dim, n4 = dim / 4, hc = HC ? HC : a.hc;
  float pk[HC ? HC : kMaxStreams];
#pragma unroll
  for (int k = 0; k < (HC ? HC : kMaxStreams); ++k) pk[k] = k < hc ? a.pre[r * hc + k] : 0.0f;
  float4 v[kNormCache], g[kNormCache];
#pragma unroll
  for (int j = 0; j < kNormCache; ++j) {
    const int64_t i = threadIdx.x + j * kNormThreads;
    float4 s = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (i < n4) {
      float4 x[HC ? HC : kMaxStreams];
#pragma unroll
      for (int k = 0; k < (HC ? HC : kMaxStreams); ++k)
        if (k < hc) x[k] = reinterpret_cast<const float4*>(a.x + (r * hc + k) * dim)[i];
#pragma unroll
      for (int k = 0; k < (HC ? HC : kMaxStreams); ++k)
        if (k < hc) s = make_float4(fmaf(pk[k], x[k].x, s.x), fmaf(pk[k], x[k].y, s.y), fmaf(pk[k], x[k].z, s.z), fmaf(pk[k], x[k].w, s.w));
    }
    v[j] = s;
    g[j] = a.norm_w && i < n4 ? reinterpret_cast<const float4*>(a.norm_w)[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
#pragma unroll
  for (int j = 0; j < kNormCache; ++j) {
    const int64_t i = threadIdx.x + j * kNormThreads;
    if (i >= n4) break;
    reinterpret_cast<float4*>(a.y + r * dim)[i] = v[j];
  }
  rms_norm_held(v, g, a.norm_w != nullptr, dim, a.norm_eps, reinterpret_cast<float4*>(a.norm_y + r * dim));
}
template <int HC>
__global__ void __launch_bounds__(kNormThreads) hc_collapse_norm_k(HcCollapseArgs a) {
  DI_PDL_ENTRY();
  collapse_norm_row<HC>(a, blockIdx.x);
}
// Whether hc_collapse takes hc_collapse_norm_k.
bool collapse_norm_fits(const HcCollapseArgs& a) {
  using detail::aligned16;
  return a.norm_y && a.dim % 4 == 0 && a.dim <= 4 * kNormCache * kNormThreads && a.hc <= kMaxStreams && aligned16(a.x) &&
         aligned16(a.y) && aligned16(a.norm_y) && (!a.norm_w || aligned16(a.norm_w));
}

// mHC mixes. hc_project_k: a warp per (group of R rows, slice, group of NMIX mixes) reduces one
// of kMixSlices fixed slices of the flattened rows: Σx² and the mix dot products, lane l
// summing the slice's elements l, l + 32, ... in order, then one shuffle tree; the 8 warps of a
// block take consecutive row groups of the same slice (the weight slice they share comes from
// L1). A row's sums are the same bits whatever R, NMIX or the number of rows (so neither the
// batch nor the launch shape changes them).
constexpr int kMaxMix = 32, kMixSlices = 16, kMixWarps = 8, kMixThreads = kMixWarps * 32;
constexpr int64_t kMixCounters = kGemmCounters;

// Row r's mixes from its slices' partial sums, by one warp (lane = threadIdx.x % 32, sum and m
// warp-private shared arrays): a lane per column sums the slices in slice order, a lane per
// stream finishes pre and post; the comb matrix is one element per lane (hc*hc <= 32), its row
// softmax and Sinkhorn sums taken in the serial order through shuffles, so every element gets
// the bits the serial loops give. HC: the stream count when known at compile time (4: the
// shuffle loops unroll), else 0.
template <int HC>
__device__ void hc_mixes_row(const HcMixesArgs& a, const float* part, int64_t r, float* sum, float* m) {
  const int64_t hc = HC ? HC : a.hc, width = hc * a.dim, nmix = (2 + hc) * hc;
  const int t = static_cast<int>(threadIdx.x % 32);
  // Column j of the slices (j = 0: Σx², j > 0: mix j - 1); __ldcg: written by other blocks.
  for (int j = t; j <= nmix; j += 32) {
    float v = 0.0f;
    for (int sl = 0; sl < kMixSlices; ++sl) v += __ldcg(part + (r * kMixSlices + sl) * (kMaxMix + 1) + j);
    sum[j] = v;
  }
  __syncwarp();
  const float inv = 1.0f / sqrtf(sum[0] / static_cast<float>(width) + a.norm_eps);
  for (int j = t; j < nmix; j += 32) m[j] = sum[j + 1] * inv;
  __syncwarp();
  if (t < hc) {
    auto sig = [](float v) { return 1.0f / (1.0f + expf(-v)); };
    a.pre[r * hc + t] = sig(m[t] * a.scale[0] + a.base[t]) + a.hc_eps;
    a.post[r * hc + t] = 2.0f * sig(m[hc + t] * a.scale[1] + a.base[hc + t]);
  }
  const int n = static_cast<int>(hc), j = t / n, k = t % n;  // this lane's element c[j][k]
  const bool own = t < n * n;
  const int jj = own ? j : 0, kk = own ? k : 0;
  // Row j's elements sit on lanes j*n .. j*n+n-1, column k's on lanes k, n+k, ...
  auto row_sum = [&](float v) {
    float s = 0.0f;
    for (int q = 0; q < n; ++q) s += __shfl_sync(0xffffffffu, v, jj * n + q);
    return s;
  };
  auto row_max = [&](float v) {
    float s = -INFINITY;
    for (int q = 0; q < n; ++q) s = fmaxf(s, __shfl_sync(0xffffffffu, v, jj * n + q));
    return s;
  };
  auto col_sum = [&](float v) {
    float s = 0.0f;
    for (int q = 0; q < n; ++q) s += __shfl_sync(0xffffffffu, v, q * n + kk);
    return s;
  };
  float c = own ? m[2 * hc + j * hc + k] * a.scale[2] + a.base[2 * hc + j * hc + k] : 0.0f;
  const float mx = row_max(c);
  const float ex = expf(c - mx);
  const float den = row_sum(ex);
  c = ex / den + a.hc_eps;
  for (int64_t it = 0; it < a.sinkhorn_iters; ++it) {
    if (it > 0) c /= (row_sum(c) + a.hc_eps);
    c /= (col_sum(c) + a.hc_eps);
  }
  if (own) a.comb[r * hc * hc + t] = c;
}

// The finish as its own launch (a warp per row), when there are no counters for the one above.
template <int HC>
__global__ void hc_mixes_k(HcMixesArgs a, const float* part) {
  DI_PDL_ENTRY();
  __shared__ float sum[kMaxMix + 1], m[kMaxMix];
  hc_mixes_row<HC>(a, part, blockIdx.x, sum, m);
}

// Block (group of kMixWarps * R rows, slice, group of NMIX mixes: grid z), warp w its rows
// R w .. R w + R - 1. MODE kMixGlobal: every load from global memory. kMixStaged (R = 1): the
// block's slices of fn and of its rows first go to shared memory in one cp.async batch
// (dynamic, (NMIX + rows) x len floats; one memory latency instead of one per unrolled round of
// loads). kMixChunked (many rows): the slice in chunks of kMixChunk elements, fn's and the
// block's rows' chunks double-buffered in shared memory by cp.async (dynamic, 2 x (NMIX +
// kMixWarps R) x kMixChunk floats): fn comes from L2 once per block, not once per warp, and no
// warp waits on a load in its loop. Every mode takes a lane's elements in the same order, so
// the same bits. With counters (zeroed, left zeroed): the last block of a row block to finish
// runs hc_mixes_row for its rows, each warp every 8th (one launch for the whole op).
enum : int { kMixGlobal = 0, kMixStaged = 1, kMixChunked = 2 };
constexpr int kMixChunk = 128;
// COL (hc_mixes_collapse): grid z below col_z holds the collapse's blocks, row (z x grid x + x)
// x grid y + y each, first so that they start in the first wave; the mixes' blocks follow (their
// z less col_z). A variant of its own, two blocks per SM: the two paths in one function took 178
// registers a thread (71 for the mixes alone), which would have halved the other launches' blocks.
template <int NMIX, int HC, int R, int MODE, bool COL = false>
__global__ void __launch_bounds__(kMixThreads, MODE == kMixChunked || COL ? 2 : 1)
    hc_project_k(HcMixesArgs a, float* part, int* counters, HcCollapseArgs col, int col_z) {
  static_assert(kMixThreads == kNormThreads, "the collapse's blocks are the mixes' blocks");
  if constexpr (COL) {
    if (static_cast<int>(blockIdx.z) < col_z) {
      const int64_t r = (static_cast<int64_t>(blockIdx.z) * gridDim.x + blockIdx.x) * gridDim.y + blockIdx.y;
      if (r >= col.rows) return;
      DI_PDL_ENTRY();
      return collapse_norm_row<HC>(col, r);
    }
  }
  static_assert(MODE != kMixStaged || R == 1, "staging holds a row per warp");
  constexpr bool STAGED = MODE == kMixStaged;
  // STAGED: fn [NMIX][len], then the block's rows [<= 8][len]; chunked: 2 x (fn [NMIX][chunk],
  // the block's rows [8 R][chunk]).
  extern __shared__ __align__(16) float s_fn[];
  const int64_t width = a.hc * a.dim, nmix = (2 + a.hc) * a.hc;
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  const int64_t rb0 = static_cast<int64_t>(blockIdx.x) * kMixWarps * R, r0 = rb0 + static_cast<int64_t>(warp) * R;
  const int mix0 = (static_cast<int>(blockIdx.z) - (COL ? col_z : 0)) * NMIX;
  const int slice = static_cast<int>(blockIdx.y);
  const int64_t len = (width + kMixSlices - 1) / kMixSlices, i0 = slice * len, i1 = min(width, i0 + len);
  const int nr = static_cast<int>(max(int64_t{0}, min(static_cast<int64_t>(R), a.rows - r0)));
  if constexpr (STAGED) {  // width and len multiples of 4, fn and x 16-byte aligned (the launch checks)
    // fn (weights: settled before any kernel runs, as the products' weights; cuda_common.cuh)
    // is requested before the programmatic wait, the rows after it.
    const int64_t n4 = (i1 - i0) / 4;  // 16-byte chunks of the slice
    for (int j = 0; j < NMIX && mix0 + j < nmix; ++j) {
      const float* src = a.fn + (mix0 + j) * width + i0;
      for (int64_t c = threadIdx.x; c < n4; c += kMixThreads) detail::cp_async16(s_fn + j * len + c * 4, src + c * 4);
    }
    DI_PDL_ENTRY();
    const int64_t nrb = min(static_cast<int64_t>(kMixWarps), a.rows - rb0);
    for (int64_t c = threadIdx.x; c < nrb * n4; c += kMixThreads) {
      const int64_t w = c / n4, c4 = c - w * n4;
      detail::cp_async16(s_fn + (NMIX + w) * len + c4 * 4, a.x + (rb0 + w) * width + i0 + c4 * 4);
    }
    detail::cp_async_commit();
    detail::cp_async_wait<0>();
    __syncthreads();
  }
  if constexpr (!STAGED) DI_PDL_ENTRY();
  float acc[R][NMIX + 1];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int j = 0; j <= NMIX; ++j) acc[r][j] = 0.0f;
  if constexpr (MODE == kMixChunked) {
    // len a multiple of kMixChunk, every mix in the block (NMIX = nmix), fn and x 16-byte
    // aligned (the launch checks). Rows past the end stage zeros and are never stored.
    constexpr int BR = kMixWarps * R, STAGE = (NMIX + BR) * kMixChunk, C4 = kMixChunk / 4;
    const int nchunks = static_cast<int>(len / kMixChunk);
    auto load = [&](int c, int buf) {
      float* dst = s_fn + buf * STAGE;
      const int64_t e0 = i0 + static_cast<int64_t>(c) * kMixChunk;
      for (int q = threadIdx.x; q < (NMIX + BR) * C4; q += kMixThreads) {
        const int row = q / C4, c4 = q - row * C4;
        if (row < NMIX) {
          detail::cp_async16(dst + row * kMixChunk + c4 * 4, a.fn + (mix0 + row) * width + e0 + c4 * 4);
        } else {
          const int64_t gr = rb0 + (row - NMIX);
          if (gr < a.rows) detail::cp_async16(dst + row * kMixChunk + c4 * 4, a.x + gr * width + e0 + c4 * 4);
          else *reinterpret_cast<float4*>(dst + row * kMixChunk + c4 * 4) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
      }
      detail::cp_async_commit();
    };
    load(0, 0);
    for (int c = 0; c < nchunks; ++c) {
      if (c + 1 < nchunks) {
        load(c + 1, (c + 1) & 1);
        detail::cp_async_wait<1>();
      } else {
        detail::cp_async_wait<0>();
      }
      __syncthreads();
      const float* buf = s_fn + (c & 1) * STAGE;
#pragma unroll 1
      for (int k = 0; k < kMixChunk; k += 32) {
        float f[NMIX];
#pragma unroll
        for (int j = 0; j < NMIX; ++j) f[j] = buf[j * kMixChunk + k + lane];
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const float v = buf[(NMIX + warp * R + r) * kMixChunk + k + lane];
          acc[r][0] = fmaf(v, v, acc[r][0]);
#pragma unroll
          for (int j = 0; j < NMIX; ++j) acc[r][j + 1] = fmaf(v, f[j], acc[r][j + 1]);
        }
      }
      __syncthreads();  // the buffer is free for the chunk after next
    }
  } else if (nr > 0) {
    constexpr int kUnroll = STAGED ? 16 : 2;  // global loads in flight: x only when fn is staged
#pragma unroll kUnroll
    for (int64_t i = i0 + lane; i < i1; i += 32) {
      float f[NMIX];
#pragma unroll
      for (int j = 0; j < NMIX; ++j)
        f[j] = mix0 + j >= nmix ? 0.0f : STAGED ? s_fn[j * len + (i - i0)] : a.fn[(mix0 + j) * width + i];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (r >= nr) break;  // the same for the whole warp
        const float v = STAGED ? s_fn[(NMIX + warp) * len + (i - i0)] : a.x[(r0 + r) * width + i];
        acc[r][0] = fmaf(v, v, acc[r][0]);
#pragma unroll
        for (int j = 0; j < NMIX; ++j) acc[r][j + 1] = fmaf(v, f[j], acc[r][j + 1]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (r >= nr) break;
#pragma unroll
    for (int j = 0; j <= NMIX; ++j) {
      const float v = warp_sum(acc[r][j]);
      if (lane == 0 && (j == 0 ? mix0 == 0 : mix0 + j <= nmix))
        part[((r0 + r) * kMixSlices + slice) * (kMaxMix + 1) + (j == 0 ? 0 : mix0 + j)] = v;
    }
  }
  if (!counters) return;
  __threadfence();
  __syncthreads();
  __shared__ bool s_last;
  __shared__ float fin_sum[kMixWarps][kMaxMix + 1], fin_m[kMixWarps][kMaxMix];
  const int mix_z = static_cast<int>(gridDim.z) - (COL ? col_z : 0);
  if (threadIdx.x == 0) s_last = atomicAdd(counters + blockIdx.x, 1) == static_cast<int>(gridDim.y) * mix_z - 1;
  __syncthreads();
  if (!s_last) return;
  __threadfence();
  const int64_t rend = min(a.rows, rb0 + static_cast<int64_t>(kMixWarps) * R);
  for (int64_t r = rb0 + warp; r < rend; r += kMixWarps) hc_mixes_row<HC>(a, part, r, fin_sum[warp], fin_m[warp]);
  if (threadIdx.x == 0) counters[blockIdx.x] = 0;
}

__global__ void hc_collapse_k(HcCollapseArgs a) {
  DI_PDL_ENTRY();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= a.rows * a.dim) return;
  const int64_t r = i / a.dim, d = i % a.dim;
  float s = 0.0f;
  for (int64_t k = 0; k < a.hc; ++k) s = fmaf(a.pre[r * a.hc + k], a.x[(r * a.hc + k) * a.dim + d], s);
  a.y[i] = s;
}


// HC: as hc_expand_at (hc_expand.cuh).
template <int HC>
__global__ void hc_expand_k(HcExpandArgs a) {
  DI_PDL_ENTRY();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= a.rows * a.dim) return;
  const int64_t r = i / a.dim, d = i % a.dim;
  hc_expand_at<HC>(a, r, d, a.y[r * a.dim + d]);
}

// One block per (row, stream).
__global__ void engram_gate_k(EngramGateArgs a) {
  DI_PDL_ENTRY();
  const int64_t r = blockIdx.x / a.hc, k = blockIdx.x % a.hc, D = a.dim;
  float* x = a.x + (r * a.hc + k) * D;
  const float* kv = a.kv + r * (a.hc + 1) * D;
  const float* key = kv + k * D;
  const float* w = a.w + k * D;
  float xx = 0, kk = 0, dt = 0;
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    xx += x[d] * x[d];
    kk += key[d] * key[d];
    dt += (x[d] * w[d]) * key[d];
  }
  xx = block_sum(xx);
  kk = block_sum(kk);
  dt = block_sum(dt);
  const float rstd = (1.0f / sqrtf(xx / static_cast<float>(D) + a.eps)) * (1.0f / sqrtf(kk / static_cast<float>(D) + a.eps));
  const float dot = dt * rstd * (1.0f / sqrtf(static_cast<float>(D)));
  const float g = 1.0f / (1.0f + expf(-copysignf(sqrtf(fmaxf(fabsf(dot), 1e-6f)), dot)));
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) x[d] += g * kv[a.hc * D + d];
}

constexpr int kThreads = 256;
unsigned grid(int64_t n) { return static_cast<unsigned>(ceil_div(n, kThreads)); }

}  // namespace

int64_t hc_mixes_scratch(int64_t rows) { return rows * kMixSlices * (kMaxMix + 1); }

namespace {
// col (COL only): the collapse's rows in blocks of this launch.
template <int NMIX, int HC, int R, int MODE, bool COL = false>
void launch_hc_project(const HcMixesArgs& a, float* part, int* counters, Stream s, int nmix, size_t smem,
                       const HcCollapseArgs* col = nullptr) {
  const unsigned row_blocks = static_cast<unsigned>(ceil_div(a.rows, kMixWarps * R));
  if (row_blocks > kMixCounters) counters = nullptr;
  auto kernel = hc_project_k<NMIX, HC, R, MODE, COL>;
  if (smem > 48 * 1024) opt_in_smem(kernel, smem);
  const int64_t mix_z = ceil_div(nmix, NMIX), col_z = COL ? ceil_div(col->rows, int64_t{row_blocks} * kMixSlices) : 0;
  launch_k(kernel, dim3(row_blocks, kMixSlices, static_cast<unsigned>(mix_z + col_z)), kMixThreads, smem, s, a, part, counters,
           COL ? *col : HcCollapseArgs{}, static_cast<int>(col_z));
  DI_CUDA_LAUNCHED();
  if (counters) return;  // finished by each row block's last block
  launch_k(hc_mixes_k<HC>, static_cast<unsigned>(a.rows), 32, 0, s, a, part);
  DI_CUDA_LAUNCHED();
}

// From kMixChunkRows rows, when hc = 4 and the slices divide into chunks: 4 rows per warp and
// every mix in one block (the weights read once per 32 rows), in chunks through shared memory
// (measured: 40 us at 256 rows, 67 staged; 41 at 64 rows, 23 staged). Below, or up to 1024
// rows when not chunked: a row per warp, the mixes 6 per block (more blocks; 3 up to 8 rows when
// staged), their fn slice and the rows' slices staged in shared memory when aligned and within
// 96 KB.
// Always the same bits.
constexpr int64_t kMixChunkRows = 160;
template <int HC>
void launch_hc_mixes(const HcMixesArgs& a, float* part, int* counters, Stream s, const HcCollapseArgs* col) {
  const int nmix = static_cast<int>((2 + a.hc) * a.hc);
  const int64_t width = a.hc * a.dim, len = ceil_div(width, kMixSlices);
  const bool aligned = width % 4 == 0 && detail::aligned16(a.fn) && detail::aligned16(a.x);
  // One row block (decode at small batches): the mixes 3 per block, twice the blocks sharing
  // the loads of fn (the same sums: a mix's chain over its slice does not depend on its group).
  const int group = a.rows <= kMixWarps ? 3 : 6;
  const size_t smem = static_cast<size_t>((group + std::min<int64_t>(kMixWarps, a.rows)) * len) * sizeof(float);
  const bool stage = aligned && len % 4 == 0 && smem <= 96 * 1024;
  const bool chunk = nmix == 24 && aligned && width % (kMixSlices * kMixChunk) == 0;  // hc = 4
  // The collapse joins the launch of few rows (one row block: 128 mix blocks and the collapse's,
  // one wave at a block per SM); otherwise it follows.
  if (group == 3 && stage && col) return launch_hc_project<3, HC, 1, kMixStaged, true>(a, part, counters, s, nmix, smem, col);
  if (group == 3 && stage) launch_hc_project<3, HC, 1, kMixStaged>(a, part, counters, s, nmix, smem);
  else if (a.rows >= kMixChunkRows && chunk)
    launch_hc_project<24, HC, 4, kMixChunked>(a, part, counters, s, nmix, size_t{2} * (24 + kMixWarps * 4) * kMixChunk * sizeof(float));
  else if (a.rows <= 1024 && stage) launch_hc_project<6, HC, 1, kMixStaged>(a, part, counters, s, nmix, smem);
  else if (a.rows <= 1024) launch_hc_project<6, HC, 1, kMixGlobal>(a, part, counters, s, nmix, 0);
  else if (nmix == 24) launch_hc_project<24, HC, 4, kMixGlobal>(a, part, counters, s, nmix, 0);
  else launch_hc_project<kMaxMix, HC, 2, kMixGlobal>(a, part, counters, s, nmix, 0);
  if (col) hc_collapse(*col, s);
}
}  // namespace

void hc_mixes(const HcMixesArgs& a, float* part, int* counters, Stream s) {
  if (a.rows == 0) return;
  if ((2 + a.hc) * a.hc > kMaxMix) {
    std::fprintf(stderr, "deepinfer: hc_mixes supports at most %d mixes\n", kMaxMix);
    std::abort();
  }
  if (a.hc == 4) launch_hc_mixes<4>(a, part, counters, s, nullptr);
  else launch_hc_mixes<0>(a, part, counters, s, nullptr);
}
void hc_mixes_collapse(const HcMixesArgs& m, const HcCollapseArgs& c, float* part, int* counters, Stream s) {
  // One launch when the collapse takes the fused norm kernel on the mixes' streams and neither
  // reads what the other writes (else the two launches, in order).
  const bool apart = c.pre != m.post && c.pre != m.comb && c.y != m.x && c.norm_y != m.x;
  if (m.rows == 0 || c.rows == 0 || c.hc != m.hc || (2 + m.hc) * m.hc > kMaxMix || !collapse_norm_fits(c) || !apart) {
    hc_mixes(m, part, counters, s);
    return hc_collapse(c, s);
  }
  if (m.hc == 4) launch_hc_mixes<4>(m, part, counters, s, &c);
  else launch_hc_mixes<0>(m, part, counters, s, &c);
}
void hc_collapse(const HcCollapseArgs& a, Stream s) {
  if (a.rows * a.dim == 0) return;
  // With the norm: one pass where rms_norm would take its float4 kernel, else the two launches.
  if (collapse_norm_fits(a)) {
    if (a.hc == 4) launch_k(hc_collapse_norm_k<4>, static_cast<unsigned>(a.rows), kNormThreads, 0, s, a);
    else launch_k(hc_collapse_norm_k<0>, static_cast<unsigned>(a.rows), kNormThreads, 0, s, a);
    DI_CUDA_LAUNCHED();
    return;
  }
  launch_k(hc_collapse_k, grid(a.rows * a.dim), kThreads, 0, s, a);
  DI_CUDA_LAUNCHED();
  if (a.norm_y) rms_norm({.x = a.y, .w = a.norm_w, .y = a.norm_y, .rows = a.rows, .dim = a.dim, .eps = a.norm_eps}, s);
}
void hc_expand(const HcExpandArgs& a, Stream s) {
  if (a.rows * a.dim == 0) return;
  if (a.hc > kMaxStreams) {
    std::fprintf(stderr, "deepinfer: hc_expand supports at most %d streams\n", kMaxStreams);
    std::abort();
  }
  if (a.hc == 4) launch_k(hc_expand_k<4>, grid(a.rows * a.dim), kThreads, 0, s, a);
  else launch_k(hc_expand_k<0>, grid(a.rows * a.dim), kThreads, 0, s, a);
  DI_CUDA_LAUNCHED();
}
void engram_gate(const EngramGateArgs& a, Stream s) {
  if (a.rows == 0) return;
  launch_k(engram_gate_k, static_cast<unsigned>(a.rows * a.hc), kThreads, 0, s, a);
  DI_CUDA_LAUNCHED();
}


}  // namespace deepinfer::kernels::cuda
