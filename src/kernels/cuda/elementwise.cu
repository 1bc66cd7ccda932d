// CUDA: row-wise small ops: SwiGLU with clamps (a thread per element) and the compressor's
// pooling (RMSNorm and RoPE: norm.cu; the fake quantisers: quant.cu; the mHC / Engram mixes: mhc.cu).

#include "kernels/cuda/cuda_ops.h"

namespace deepinfer::kernels::cuda {

namespace {

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

constexpr int kThreads = 256;
unsigned grid(int64_t n) { return static_cast<unsigned>(ceil_div(n, kThreads)); }

}  // namespace

void swiglu(const SwigluArgs& a, Stream s) {
  if (a.rows * a.inter == 0) return;
  launch_k(swiglu_k, grid(a.rows * a.inter), kThreads, 0, s, a.gate, a.up, a.weight, a.out, a.rows, a.inter, a.limit);
  DI_CUDA_LAUNCHED();
}
void compress_pool(const CompressPoolArgs& a, Stream s) {
  if (a.groups * a.dim == 0) return;
  launch_k(compress_pool_k, grid(a.groups * a.dim), kThreads, 0, s, a.kv, a.gate, a.out, a.groups, a.ratio, a.dim);
  DI_CUDA_LAUNCHED();
}

}  // namespace deepinfer::kernels::cuda
