// CUDA: row-wise ops (RMSNorm, RoPE, SwiGLU, compressor pooling), the fake quantisers,
// weight dequantisation, and the mHC / Engram mixes. First versions: one thread per output
// element or one block per row; correctness first, measured against the CPU reference.
#include <algorithm>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/hc_expand.cuh"
#include "kernels/cuda/tiling.cuh"

namespace deepinfer::kernels::cuda {

namespace {

__global__ void rms_norm_k(const float* x, const float* w, float* y, int64_t dim, float eps) {
  DI_PDL_ENTRY();
  const int64_t r = blockIdx.x;
  const float* xr = x + r * dim;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) ss += xr[i] * xr[i];
  ss = block_sum(ss);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(dim) + eps);
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) y[r * dim + i] = w ? w[i] * (xr[i] * inv) : xr[i] * inv;
}

// Rows of up to kNormCache float4 per thread (dim <= 8192 at 256 threads), 16-byte aligned:
// every load of the row in flight at once, kept in registers for the scaling pass. Its sums
// differ in order from rms_norm_k's; which one runs depends on dim and on the buffers'
// alignment (the allocator's blocks are 256-byte aligned and the model's row offsets are
// multiples of dim), never on the number of rows.
constexpr int kNormCache = 8, kNormThreads = 256;
// The norm of a row held this way (v: its chunks, zero past its end; g: the weights', used when
// has_w) into yr: the sum of squares, the block reduction and the scaling that every float4
// RMSNorm shares (rms_norm_v4_k, hc_collapse_norm_k), so their bits agree.
// (rms_inv: the reciprocal RMS, the whole block; rms_scaled: one chunk normalised.)
__device__ __forceinline__ float rms_inv(const float4 (&v)[kNormCache], int64_t dim, float eps) {
  float ss = 0.0f;
#pragma unroll
  for (int j = 0; j < kNormCache; ++j) ss += v[j].x * v[j].x + v[j].y * v[j].y + v[j].z * v[j].z + v[j].w * v[j].w;
  ss = block_sum(ss);
  return 1.0f / sqrtf(ss / static_cast<float>(dim) + eps);
}
__device__ __forceinline__ float4 rms_scaled(float4 v, float4 g, bool has_w, float inv) {
  float4 o = make_float4(v.x * inv, v.y * inv, v.z * inv, v.w * inv);
  if (has_w) o = make_float4(g.x * o.x, g.y * o.y, g.z * o.z, g.w * o.w);
  return o;
}
__device__ __forceinline__ void rms_norm_held(const float4 (&v)[kNormCache], const float4 (&g)[kNormCache], bool has_w, int64_t dim,
                                              float eps, float4* yr) {
  const int64_t n4 = dim / 4;
  const float inv = rms_inv(v, dim, eps);
#pragma unroll
  for (int j = 0; j < kNormCache; ++j) {
    const int64_t i = threadIdx.x + j * kNormThreads;
    if (i >= n4) break;
    yr[i] = rms_scaled(v[j], g[j], has_w, inv);
  }
}
__global__ void __launch_bounds__(kNormThreads) rms_norm_v4_k(const float* x, const float* w, float* y, int64_t dim, float eps) {
  DI_PDL_ENTRY();
  const int64_t r = blockIdx.x, n4 = dim / 4;
  const float4* xr = reinterpret_cast<const float4*>(x + r * dim);
  float4 v[kNormCache], g[kNormCache];  // the row and its weights, loaded together (one wait)
#pragma unroll
  for (int j = 0; j < kNormCache; ++j) {
    const int64_t i = threadIdx.x + j * kNormThreads;
    v[j] = i < n4 ? xr[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    g[j] = w && i < n4 ? reinterpret_cast<const float4*>(w)[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  rms_norm_held(v, g, w != nullptr, dim, eps, reinterpret_cast<float4*>(y + r * dim));
}

__global__ void rope_k(float* x, const float* cs, const float* sn, int64_t rows, int64_t heads, int64_t head_dim,
                       int64_t rope_dim, bool inverse) {
  DI_PDL_ENTRY();
  const int64_t half = rope_dim / 2;
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= rows * heads * half) return;
  const int64_t p = i % half, h = (i / half) % heads, r = i / (half * heads);
  float* v = x + (r * heads + h) * head_dim + (head_dim - rope_dim);
  const float c = cs[r * half + p], s = inverse ? -sn[r * half + p] : sn[r * half + p];
  float e = v[2 * p], o = v[2 * p + 1];
  rope_pair(e, o, c, s);
  v[2 * p] = e;
  v[2 * p + 1] = o;
}

__global__ void swiglu_k(const float* g, const float* u, const float* w, float* out, int64_t rows, int64_t inter, float lim) {
  DI_PDL_ENTRY();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= rows * inter) return;
  float gv = g[i], uv = u[i];
  if (lim > 0) {
    uv = fminf(fmaxf(uv, -lim), lim);
    gv = fminf(gv, lim);
  }
  const float y = (gv / (1.0f + expf(-gv))) * uv;
  out[i] = w ? w[i / inter] * y : y;
}

__global__ void compress_pool_k(const float* kv, const float* gate, float* out, int64_t groups, int64_t ratio, int64_t dim) {
  DI_PDL_ENTRY();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= groups * dim) return;
  const int64_t g = i / dim, c = i % dim;
  const float* k = kv + g * ratio * dim;
  const float* gt = gate + g * ratio * dim;
  float mx = -INFINITY;
  for (int64_t r = 0; r < ratio; ++r) mx = fmaxf(mx, gt[r * dim + c]);
  float den = 0.0f;
  for (int64_t r = 0; r < ratio; ++r) den += expf(gt[r * dim + c] - mx);
  float acc = 0.0f;
  for (int64_t r = 0; r < ratio; ++r) acc += k[r * dim + c] * (expf(gt[r * dim + c] - mx) / den);
  out[i] = acc;
}

// One thread per block of `block` values (<= 32).
__global__ void fake_quant_k(float* x, int64_t blocks, int64_t block, int kind, uint8_t* codes, uint8_t* scales) {
  DI_PDL_ENTRY();
  const int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (b >= blocks) return;
  float* v = x + b * block;
  float amax = 0.0f;
  for (int64_t i = 0; i < block; ++i) amax = fmaxf(amax, fabsf(v[i]));
  if (kind == 0) {  // FP8, pow2 scale
    const float s = d_pow2_ceil(fmaxf(amax, 1e-4f) * (1.0f / 448.0f));
    if (scales) scales[b] = static_cast<uint8_t>(ilogbf(s) + 127);
    for (int64_t i = 0; i < block; ++i) {
      const uint8_t c = d_f32_to_e4m3(fminf(fmaxf(v[i] / s, -448.0f), 448.0f));
      v[i] = d_e4m3_to_f32(c) * s;
      if (codes) codes[b * block + i] = c;
    }
    return;
  }
  float s;
  if (kind == 1) {  // FP4, pow2 scale
    s = d_pow2_ceil(fmaxf(amax, 6.0f * 0x1p-126f) * (1.0f / 6.0f));
    if (scales) scales[b] = static_cast<uint8_t>(ilogbf(s) + 127);
  } else {  // FP4, e4m3 scale
    const uint8_t sc = d_f32_to_e4m3(fmaxf(amax, 6.0f * 0x1p-9f) / 6.0f);
    s = d_e4m3_to_f32(sc);
    if (scales) scales[b] = sc;
  }
  for (int64_t i = 0; i < block; ++i) {
    const uint8_t c = d_f32_to_e2m1(fminf(fmaxf(v[i] / s, -6.0f), 6.0f));
    v[i] = d_e2m1_to_f32(c) * s;
    if (codes) {
      uint8_t* byte = codes + (b * block + i) / 2;
      *byte = (i % 2 == 0) ? c : static_cast<uint8_t>(*byte | (c << 4));
    }
  }
}

// A block's scale from its amax (kind: FakeQuant's order: FP8 with a pow2 scale, FP4 with a pow2
// or an e4m3 scale) and the scale's stored code; a value rounded at scale s (its code: e4m3, or
// e2m1) and the value the code stands for. fake_quant_lanes_k and norm_rope_quant_k share them.
__device__ __forceinline__ float fq_scale(int kind, float amax, uint8_t* code) {
  if (kind == 0 || kind == 1) {
    const float s = kind == 0 ? d_pow2_ceil(fmaxf(amax, 1e-4f) * (1.0f / 448.0f)) : d_pow2_ceil(fmaxf(amax, 6.0f * 0x1p-126f) * (1.0f / 6.0f));
    *code = static_cast<uint8_t>(ilogbf(s) + 127);
    return s;
  }
  *code = d_f32_to_e4m3(fmaxf(amax, 6.0f * 0x1p-9f) / 6.0f);
  return d_e4m3_to_f32(*code);
}
__device__ __forceinline__ float fq_value(int kind, float v, float s, uint8_t* code) {
  if (kind == 0) {
    *code = d_f32_to_e4m3(fminf(fmaxf(v / s, -448.0f), 448.0f));
    return d_e4m3_to_f32(*code) * s;
  }
  *code = d_f32_to_e2m1(fminf(fmaxf(v / s, -6.0f), 6.0f));
  return d_e2m1_to_f32(*code) * s;
}
// The same quantisers with a thread per element, a quantisation block on `block` consecutive
// lanes (16 or 32: whole blocks per warp); the block's absolute maximum by a shuffle tree (max
// is exact in any order; NaN ignored as the serial loop from 0 does), so the values, codes
// and scales are fake_quant_k's bit for bit.
__global__ void fake_quant_lanes_k(float* x, int64_t n, int block, int kind, uint8_t* codes, uint8_t* scales) {
  DI_PDL_ENTRY();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const bool in = i < n;
  const float v = in ? x[i] : 0.0f;
  float amax = fmaxf(0.0f, fabsf(v));
  for (int o = block / 2; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  uint8_t sc, c;
  const float s = fq_scale(kind, amax, &sc), q = fq_value(kind, v, s, &c);
  // FP4: the odd neighbour's code, packed with the even one's.
  const unsigned hi = kind == 0 ? 0u : __shfl_down_sync(0xffffffffu, static_cast<unsigned>(c), 1);
  if (!in) return;
  if (scales && i % block == 0) scales[i / block] = sc;
  x[i] = q;
  if (codes && kind == 0) codes[i] = c;
  if (codes && kind != 0 && i % 2 == 0) codes[i / 2] = static_cast<uint8_t>(c | (hi << 4));
}

// norm_rope_quant: a block per (item, row), rms_norm_v4_k's chunks (rms_inv / rms_scaled, so the
// norm's bits), then RoPE on the pairs of the row's last rope_dim channels (each pair inside one
// thread's float4: rope_dim and dim - rope_dim multiples of 4; rope_pair), then the fake
// quantisation of each block of `block` channels (block / 4 neighbouring lanes: its amax by
// shuffles, exact whatever the order; fq_scale / fq_value, fake_quant_lanes_k's rounding).
constexpr int kNrqItems = 4;
struct NrqBatch {
  NormRopeQuantArgs items[kNrqItems];
  int64_t row0[kNrqItems + 1];  // the items' first blocks
  int n;
};
__global__ void __launch_bounds__(kNormThreads) norm_rope_quant_k(NrqBatch b) {
  DI_PDL_ENTRY();
  int it = 0;
  while (it + 1 < b.n && static_cast<int64_t>(blockIdx.x) >= b.row0[it + 1]) ++it;
  const NormRopeQuantArgs& a = b.items[it];
  const int64_t r = blockIdx.x - b.row0[it], dim = a.dim, n4 = dim / 4, half = a.rope_dim / 2, rope0 = dim - a.rope_dim;
  float4* xr = reinterpret_cast<float4*>(a.x + r * dim);
  // The row, its weights and the RoPE angles of the thread's one chunk in the rotated channels
  // (rope_dim <= 4 x kNormThreads: cos, sin of its two pairs), loaded together before the norm's
  // reduction.
  float4 v[kNormCache], g[kNormCache], rot = make_float4(1.0f, 0.0f, 1.0f, 0.0f);
#pragma unroll
  for (int j = 0; j < kNormCache; ++j) {
    const int64_t i = threadIdx.x + j * kNormThreads;
    v[j] = i < n4 ? xr[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    g[j] = a.w && i < n4 ? reinterpret_cast<const float4*>(a.w)[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (i < n4 && half > 0 && 4 * i >= rope0) {
      const int64_t p = r * half + (4 * i - rope0) / 2;  // the chunk's first pair
      rot = make_float4(a.cos[p], a.sin[p], a.cos[p + 1], a.sin[p + 1]);
    }
  }
  const float inv = rms_inv(v, dim, a.eps);
  const int kind = static_cast<int>(a.kind), lanes = static_cast<int>(a.block / 4);
#pragma unroll
  for (int j = 0; j < kNormCache; ++j) {
    if (j * kNormThreads >= n4) break;  // the same for the whole block
    const int64_t i = threadIdx.x + j * kNormThreads;
    const bool in = i < n4;
    float4 o = in ? rms_scaled(v[j], g[j], a.w != nullptr, inv) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (in && half > 0 && 4 * i >= rope0) {
      rope_pair(o.x, o.y, rot.x, rot.y);
      rope_pair(o.z, o.w, rot.z, rot.w);
    }
    if (lanes > 0) {
      float amax = fmaxf(fmaxf(fmaxf(fmaxf(0.0f, fabsf(o.x)), fabsf(o.y)), fabsf(o.z)), fabsf(o.w));
      for (int d = lanes / 2; d > 0; d >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, d));
      uint8_t sc, c[4];
      const float s = fq_scale(kind, amax, &sc);
      o = make_float4(fq_value(kind, o.x, s, &c[0]), fq_value(kind, o.y, s, &c[1]), fq_value(kind, o.z, s, &c[2]),
                      fq_value(kind, o.w, s, &c[3]));
      const int64_t e = r * dim + 4 * i;  // the chunk's first element in the item
      if (in && a.scales && (4 * i) % a.block == 0) a.scales[e / a.block] = sc;
      if (in && a.codes && kind == 0) *reinterpret_cast<uchar4*>(a.codes + e) = make_uchar4(c[0], c[1], c[2], c[3]);
      if (in && a.codes && kind != 0) *reinterpret_cast<uchar2*>(a.codes + e / 2) =
          make_uchar2(static_cast<unsigned char>(c[0] | (c[1] << 4)), static_cast<unsigned char>(c[2] | (c[3] << 4)));
    }
    if (in) xr[i] = o;
  }
}

__global__ void dequant_k(WeightView w, int64_t row0, int64_t n, float* out) {
  DI_PDL_ENTRY();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n * w.cols) return;
  out[i] = d_weight_at(w, row0 + i / w.cols, i % w.cols);
}

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

void rms_norm(const RmsNormArgs& a, cudaStream_t s) {
  if (a.rows == 0) return;
  using detail::aligned16;
  if (a.dim % 4 == 0 && a.dim <= 4 * kNormCache * kNormThreads && aligned16(a.x) && aligned16(a.y) && (!a.w || aligned16(a.w)))
    launch_k(rms_norm_v4_k, static_cast<unsigned>(a.rows), kNormThreads, 0, s, a.x, a.w, a.y, a.dim, a.eps);
  else
    launch_k(rms_norm_k, static_cast<unsigned>(a.rows), kThreads, 0, s, a.x, a.w, a.y, a.dim, a.eps);
  DI_CUDA_LAUNCHED();
}
void rope(const RopeArgs& a, cudaStream_t s) {
  const int64_t n = a.rows * a.heads * (a.rope_dim / 2);
  if (n == 0) return;
  launch_k(rope_k, grid(n), kThreads, 0, s, a.x, a.cos, a.sin, a.rows, a.heads, a.head_dim, a.rope_dim, a.inverse);
  DI_CUDA_LAUNCHED();
}
void swiglu(const SwigluArgs& a, cudaStream_t s) {
  if (a.rows * a.inter == 0) return;
  launch_k(swiglu_k, grid(a.rows * a.inter), kThreads, 0, s, a.gate, a.up, a.weight, a.out, a.rows, a.inter, a.limit);
  DI_CUDA_LAUNCHED();
}
void compress_pool(const CompressPoolArgs& a, cudaStream_t s) {
  if (a.groups * a.dim == 0) return;
  launch_k(compress_pool_k, grid(a.groups * a.dim), kThreads, 0, s, a.kv, a.gate, a.out, a.groups, a.ratio, a.dim);
  DI_CUDA_LAUNCHED();
}
// Whether an item takes norm_rope_quant_k: where rms_norm, rope and fake_quant would take
// rms_norm_v4_k, rope_k and fake_quant_lanes_k (so its bits are theirs).
static bool nrq_fits(const NormRopeQuantArgs& a) {
  using detail::aligned16;
  return a.dim % 4 == 0 && a.dim <= 4 * kNormCache * kNormThreads && aligned16(a.x) && (!a.w || aligned16(a.w)) &&
         a.rope_dim >= 0 && a.rope_dim % 4 == 0 && a.rope_dim <= a.dim && a.rope_dim <= 4 * kNormThreads &&
         (a.block == 0 || ((a.block == 16 || a.block == 32) && a.dim % a.block == 0)) &&
         (!a.codes || reinterpret_cast<uintptr_t>(a.codes) % 4 == 0);
}
void norm_rope_quant(const NormRopeQuantArgs* items, int64_t n, cudaStream_t s) {
  NrqBatch b{};
  auto flush = [&] {
    if (b.n == 0) return;
    launch_k(norm_rope_quant_k, static_cast<unsigned>(b.row0[b.n]), kNormThreads, 0, s, b);
    DI_CUDA_LAUNCHED();
    b = NrqBatch{};
  };
  for (int64_t i = 0; i < n; ++i) {
    const NormRopeQuantArgs& a = items[i];
    if (a.rows <= 0 || a.dim <= 0) continue;
    if (!nrq_fits(a)) {  // the three ops, after the items before it
      flush();
      rms_norm({.x = a.x, .w = a.w, .y = a.x, .rows = a.rows, .dim = a.dim, .eps = a.eps}, s);
      if (a.rope_dim > 0)
        rope({.x = a.x, .cos = a.cos, .sin = a.sin, .rows = a.rows, .heads = 1, .head_dim = a.dim, .rope_dim = a.rope_dim}, s);
      if (a.block > 0)
        fake_quant({.x = a.x, .rows = a.rows, .dim = a.dim, .block = a.block, .kind = a.kind, .codes = a.codes, .scales = a.scales}, s);
      continue;
    }
    if (b.n == kNrqItems) flush();
    b.items[b.n] = a;
    b.row0[b.n + 1] = b.row0[b.n] + a.rows;
    ++b.n;
  }
  flush();
}
void fake_quant(const FakeQuantArgs& a, cudaStream_t s) {
  if (a.block <= 0 || a.dim % a.block != 0 || a.rows == 0) return;
  const int64_t blocks = a.rows * (a.dim / a.block);
  if (a.block == 16 || a.block == 32)
    launch_k(fake_quant_lanes_k, grid(blocks * a.block), kThreads, 0, s, a.x, blocks * a.block, static_cast<int>(a.block),
                                                                   static_cast<int>(a.kind), a.codes, a.scales);
  else
    launch_k(fake_quant_k, grid(blocks), kThreads, 0, s, a.x, blocks, a.block, static_cast<int>(a.kind), a.codes, a.scales);
  DI_CUDA_LAUNCHED();
}
void dequant(const WeightView& w, int64_t row0, int64_t n, float* out, cudaStream_t s) {
  if (n * w.cols == 0) return;
  launch_k(dequant_k, grid(n * w.cols), kThreads, 0, s, w, row0, n, out);
  DI_CUDA_LAUNCHED();
}
int64_t hc_mixes_scratch(int64_t rows) { return rows * kMixSlices * (kMaxMix + 1); }

namespace {
// col (COL only): the collapse's rows in blocks of this launch.
template <int NMIX, int HC, int R, int MODE, bool COL = false>
void launch_hc_project(const HcMixesArgs& a, float* part, int* counters, cudaStream_t s, int nmix, size_t smem,
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
void launch_hc_mixes(const HcMixesArgs& a, float* part, int* counters, cudaStream_t s, const HcCollapseArgs* col) {
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

void hc_mixes(const HcMixesArgs& a, float* part, int* counters, cudaStream_t s) {
  if (a.rows == 0) return;
  if ((2 + a.hc) * a.hc > kMaxMix) {
    std::fprintf(stderr, "deepinfer: hc_mixes supports at most %d mixes\n", kMaxMix);
    std::abort();
  }
  if (a.hc == 4) launch_hc_mixes<4>(a, part, counters, s, nullptr);
  else launch_hc_mixes<0>(a, part, counters, s, nullptr);
}
void hc_mixes_collapse(const HcMixesArgs& m, const HcCollapseArgs& c, float* part, int* counters, cudaStream_t s) {
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
void hc_collapse(const HcCollapseArgs& a, cudaStream_t s) {
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
void hc_expand(const HcExpandArgs& a, cudaStream_t s) {
  if (a.rows * a.dim == 0) return;
  if (a.hc > kMaxStreams) {
    std::fprintf(stderr, "deepinfer: hc_expand supports at most %d streams\n", kMaxStreams);
    std::abort();
  }
  if (a.hc == 4) launch_k(hc_expand_k<4>, grid(a.rows * a.dim), kThreads, 0, s, a);
  else launch_k(hc_expand_k<0>, grid(a.rows * a.dim), kThreads, 0, s, a);
  DI_CUDA_LAUNCHED();
}
void engram_gate(const EngramGateArgs& a, cudaStream_t s) {
  if (a.rows == 0) return;
  launch_k(engram_gate_k, static_cast<unsigned>(a.rows * a.hc), kThreads, 0, s, a);
  DI_CUDA_LAUNCHED();
}

}  // namespace deepinfer::kernels::cuda
