// CUDA: the bf16 GEMM's launches for FP8 e4m3 weights in 32x32 blocks, their codes decoded into bf16
// operands inside the kernel (gemm_bf16_k with WQ 1); compiled beside the other formats.
#include "kernels/cuda/linear_bf16_launch.cuh"

namespace deepinfer::kernels::cuda::detail {

template void gemm_bf16_as<1>(Bf16Gemm, Stream);

}  // namespace deepinfer::kernels::cuda::detail
