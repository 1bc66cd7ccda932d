// CUDA: the bf16 GEMM's launches for MXFP4 weights, their codes decoded into bf16
// operands inside the kernel (gemm_bf16_k with WQ 2); compiled beside the other formats.
#include "kernels/cuda/linear_bf16_launch.cuh"

namespace deepinfer::kernels::cuda::detail {

template void gemm_bf16_as<2>(Bf16Gemm, Stream);

}  // namespace deepinfer::kernels::cuda::detail
