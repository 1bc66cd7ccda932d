// bf16 tensor-core building blocks (sm_80+ mma.sync m16n8k16 with float32 accumulation, and
// the ldmatrix loads of its fragments from shared memory), shared by the grouped/dense GEMM
// (moe.cu) and the attention (attention.cu).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace deepinfer::kernels::cuda {

// Two floats rounded to bf16 (round to nearest even) in one register, lo in the low half: an
// mma operand's pair, or half of an 8-byte store.
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}
// Eight floats (two float4) rounded to bf16, as one 16-byte store.
__device__ __forceinline__ uint4 pack_bf16x8(float4 a, float4 b) {
  return make_uint4(pack_bf16(a.x, a.y), pack_bf16(a.z, a.w), pack_bf16(b.x, b.y), pack_bf16(b.z, b.w));
}

// Four 8x8 b16 matrices; lane i gives the row address of matrix i / 8, row i % 8.
__device__ inline void ldmatrix_x4(uint32_t r[4], const void* smem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}
// The same, each matrix transposed (a B fragment from k-major rows).
__device__ inline void ldmatrix_x4_trans(uint32_t r[4], const void* smem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}
// c[16x8] += a[16x16] * b[16x8] (bf16 in, float32 accumulation).
__device__ inline void mma_bf16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

}  // namespace deepinfer::kernels::cuda
