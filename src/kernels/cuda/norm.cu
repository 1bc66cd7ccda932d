// CUDA: RMSNorm (a block per row; float4 rows held in registers where aligned), RoPE (a thread
// per pair), and norm_rope_quant (the three, with the fake quantisation, in one launch where the
// shapes allow, the same bits as the three ops).

#include <algorithm>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/norm.cuh"
#include "kernels/cuda/quant.cuh"
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

constexpr int kThreads = 256;
unsigned grid(int64_t n) { return static_cast<unsigned>(ceil_div(n, kThreads)); }

}  // namespace

void rms_norm(const RmsNormArgs& a, Stream s) {
  if (a.rows == 0) return;
  using detail::aligned16;
  if (a.dim % 4 == 0 && a.dim <= 4 * kNormCache * kNormThreads && aligned16(a.x) && aligned16(a.y) && (!a.w || aligned16(a.w)))
    launch_k(rms_norm_v4_k, static_cast<unsigned>(a.rows), kNormThreads, 0, s, a.x, a.w, a.y, a.dim, a.eps);
  else
    launch_k(rms_norm_k, static_cast<unsigned>(a.rows), kThreads, 0, s, a.x, a.w, a.y, a.dim, a.eps);
  DI_CUDA_LAUNCHED();
}
void rope(const RopeArgs& a, Stream s) {
  const int64_t n = a.rows * a.heads * (a.rope_dim / 2);
  if (n == 0) return;
  launch_k(rope_k, grid(n), kThreads, 0, s, a.x, a.cos, a.sin, a.rows, a.heads, a.head_dim, a.rope_dim, a.inverse);
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
void norm_rope_quant(const NormRopeQuantArgs* items, int64_t n, Stream s) {
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

}  // namespace deepinfer::kernels::cuda
