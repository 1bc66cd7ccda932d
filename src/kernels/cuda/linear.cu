// CUDA: the products' conversions and the any-format product: x rounded to bf16 (to_bf16), and the
// experts' products in float32 math from any weight format (grouped_gemm_any). The bf16 GEMM:
// linear_bf16.cu; the float32 / cuBLAS matmul and the choice between them: backend.cu.
#include <cuda_bf16.h>

#include <algorithm>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/linear.cuh"
#include "kernels/cuda/mma.cuh"

namespace deepinfer::kernels::cuda {

namespace {

using namespace detail;

constexpr int kThreads = 256;
unsigned grid(int64_t n) { return static_cast<unsigned>(ceil_div(n, kThreads)); }

__global__ void to_bf16_k(const float* x, int64_t m, int64_t mp, int64_t k, int64_t ldx, __nv_bfloat16* out) {
  DI_PDL_ENTRY();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= mp * k) return;
  const int64_t r = i / k;
  out[i] = r < m ? __float2bfloat16_rn(x[r * ldx + i % k]) : __float2bfloat16_rn(0.0f);
}

// The same, 8 elements a thread (two 16-byte loads, one 16-byte store): k a multiple of 8, ldx
// of 4, x and out 16-byte aligned. The same roundings.
__global__ void to_bf16_v8_k(const float* x, int64_t m, int64_t mp, int64_t k, int64_t ldx, __nv_bfloat16* out) {
  DI_PDL_ENTRY();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x, k8 = k / 8;
  if (i >= mp * k8) return;
  const int64_t r = i / k8, c = (i - r * k8) * 8;
  uint4 v = make_uint4(0u, 0u, 0u, 0u);  // bf16 +0 is all zero bits
  if (r < m) {
    const float4* src = reinterpret_cast<const float4*>(x + r * ldx + c);
    v = pack_bf16x8(src[0], src[1]);
  }
  *reinterpret_cast<uint4*>(out + r * k + c) = v;
}

// Any weight format, float32 math on CUDA cores (the float32 path, and bf16 precision over
// weights not stored as bf16): y[r, c] = Σ_k x[r, k] · w_e[c, k], k ascending; with kBf16 the
// operands are rounded to bf16 first (exact for bf16/FP8/FP4 weights), as the bf16 path does.
// Blocks of 16 rows x 64 columns; each thread owns 4 rows of one column.
constexpr int kAnyRows = 16, kAnyCols = 64, kAnyK = 32, kAnyThreads = 256;
template <bool kBf16>
__global__ void __launch_bounds__(kAnyThreads)
    grouped_gemm_any_k(const float* __restrict__ x, const WeightView* __restrict__ w, const int32_t* __restrict__ off,
                       float* __restrict__ y, int N, int K, int E) {
  DI_PDL_ENTRY();
  __shared__ float xs[kAnyRows][kAnyK];
  __shared__ float ws[kAnyCols][kAnyK + 1];
  __shared__ int s_e, s_row0, s_rows;
  if (!find_tile<kAnyRows>(off, E, static_cast<int>(blockIdx.y), &s_e, &s_row0, &s_rows)) return;
  const WeightView& we = w[s_e];
  const int n0 = static_cast<int>(blockIdx.x) * kAnyCols, rows = s_rows, row0 = s_row0;
  const int col = threadIdx.x % kAnyCols, rg = threadIdx.x / kAnyCols;  // rows rg*4 .. rg*4+3
  auto round = [](float v) { return kBf16 ? __bfloat162float(__float2bfloat16_rn(v)) : v; };
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int k0 = 0; k0 < K; k0 += kAnyK) {
    for (int i = threadIdx.x; i < kAnyRows * kAnyK; i += kAnyThreads) {
      const int r = i / kAnyK, kk = i % kAnyK;
      xs[r][kk] = r < rows && k0 + kk < K ? round(x[static_cast<int64_t>(row0 + r) * K + k0 + kk]) : 0.0f;
    }
    for (int i = threadIdx.x; i < kAnyCols * kAnyK; i += kAnyThreads) {
      const int c = i / kAnyK, kk = i % kAnyK;
      ws[c][kk] = n0 + c < N && k0 + kk < K ? round(d_weight_at(we, n0 + c, k0 + kk)) : 0.0f;
    }
    __syncthreads();
#pragma unroll 8
    for (int kk = 0; kk < kAnyK; ++kk) {
      const float wv = ws[col][kk];
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[j] = fmaf(xs[rg * 4 + j][kk], wv, acc[j]);
    }
    __syncthreads();
  }
  if (n0 + col >= N) return;
  for (int j = 0; j < 4; ++j)
    if (rg * 4 + j < rows) y[static_cast<int64_t>(row0 + rg * 4 + j) * N + n0 + col] = acc[j];
}

}  // namespace

void to_bf16(const float* x, int64_t m, int64_t mp, int64_t k, int64_t ldx, void* out, Stream s) {
  if (mp * k == 0) return;
  auto* o = static_cast<__nv_bfloat16*>(out);
  if (k % 8 == 0 && ldx % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0)
    launch_k(to_bf16_v8_k, grid(mp * k / 8), kThreads, 0, s, x, m, mp, k, ldx, o);
  else
    launch_k(to_bf16_k, grid(mp * k), kThreads, 0, s, x, m, mp, k, ldx, o);
  DI_CUDA_LAUNCHED();
}

void grouped_gemm_any(const float* x, const WeightView* w, const int32_t* offsets, float* y, int64_t rows, int64_t n,
                      int64_t k, int64_t experts, bool bf16, Stream s) {
  if (rows == 0 || n == 0) return;
  const dim3 grid(static_cast<unsigned>(ceil_div(n, kAnyCols)),
                  static_cast<unsigned>(ceil_div(rows, kAnyRows) + std::min<int64_t>(experts, rows)));
  const int N = static_cast<int>(n), K = static_cast<int>(k), E = static_cast<int>(experts);
  if (bf16) launch_k(grouped_gemm_any_k<true>, grid, kAnyThreads, 0, s, x, w, offsets, y, N, K, E);
  else launch_k(grouped_gemm_any_k<false>, grid, kAnyThreads, 0, s, x, w, offsets, y, N, K, E);
  DI_CUDA_LAUNCHED();
}

}  // namespace deepinfer::kernels::cuda
