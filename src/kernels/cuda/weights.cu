// CUDA: weight rows dequantised on the device (exact for bf16 / FP8 / FP4 storage), into float32
// (dequant) or bf16 (dequant_bf16), for the products that do not read the stored format.

#include <cuda_bf16.h>

#include "kernels/cuda/cuda_ops.h"

namespace deepinfer::kernels::cuda {

namespace {

__global__ void dequant_k(WeightView w, int64_t row0, int64_t n, float* out) {
  DI_PDL_ENTRY();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n * w.cols) return;
  out[i] = d_weight_at(w, row0 + i / w.cols, i % w.cols);
}

__global__ void dequant_bf16_k(WeightView w, int64_t row0, int64_t n, __nv_bfloat16* out) {
  DI_PDL_ENTRY();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n * w.cols) return;
  out[i] = __float2bfloat16_rn(d_weight_at(w, row0 + i / w.cols, i % w.cols));
}

constexpr int kThreads = 256;
unsigned grid(int64_t n) { return static_cast<unsigned>(ceil_div(n, kThreads)); }

}  // namespace

void dequant(const WeightView& w, int64_t row0, int64_t n, float* out, Stream s) {
  if (n * w.cols == 0) return;
  launch_k(dequant_k, grid(n * w.cols), kThreads, 0, s, w, row0, n, out);
  DI_CUDA_LAUNCHED();
}
void dequant_bf16(const WeightView& w, int64_t row0, int64_t n, void* out, Stream s) {
  if (n * w.cols == 0) return;
  launch_k(dequant_bf16_k, grid(n * w.cols), kThreads, 0, s, w, row0, n, static_cast<__nv_bfloat16*>(out));
  DI_CUDA_LAUNCHED();
}


}  // namespace deepinfer::kernels::cuda
