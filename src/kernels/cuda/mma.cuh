// bf16 tensor-core building blocks (sm_80+ mma.sync m16n8k16 with float32 accumulation, and
// the ldmatrix loads of its fragments from shared memory; sm_90a wgmma m64nNk16), shared by
// the grouped/dense GEMM (linear_bf16.cuh) and the attention (attention_mma.cu).
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

// Hopper warpgroup products (sm_90a), both operands from shared memory, k-major, in the
// 128-byte swizzle: a tile's rows (of m or n) hold 64 k values (128 bytes), the 16-byte chunk c
// of row r at chunk c ^ (r % 8) of its row (sw128_at), eight rows an atom of 1024 bytes, atoms
// one after another; a tile starts 1024-byte aligned. The descriptor of the k16 step at k0
// points at row 0's element k0 (the tile + 2 k0 bytes; the hardware applies the swizzle to the
// address it forms); the atoms 1024 bytes apart (its stride field; the leading one unused).
__device__ __forceinline__ int sw128_at(int r, int ch) { return r * 64 + ((ch ^ (r & 7)) << 3); }
// A tile of `rows` rows and more than 64 k values: one such tile per 64 k, one after another
// (chunk ch of row r: tile ch / 8).
__device__ __forceinline__ int sw128_tile_at(int r, int ch, int rows) { return (ch >> 3) * rows * 64 + sw128_at(r, ch & 7); }
__device__ __forceinline__ uint64_t wgmma_desc_sw128(const void* smem) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  return static_cast<uint64_t>((s >> 4) & 0x3FFF) | (uint64_t{1} << 16) | (uint64_t{1024 >> 4} << 32) | (uint64_t{1} << 62);
}
// Orders the products after register writes (before the first product, and after the
// accumulators were touched); a group of products ends at commit; wait<N>: at most N groups
// still run.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Keeps the compiler from moving reads or writes of a product's registers across this point
// (it does not know the products run asynchronously): after a wait, and before the fence.
template <int N>
__device__ __forceinline__ void wgmma_hold(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
// d[64 x N] += a[64 x 16] * b[16 x N] by the warpgroup, N 128 or 256 (bf16 in, float32
// accumulation), a and b by descriptor; d per warp w as mma.sync's C fragments: d[4 j .. 4 j + 3]
// rows 16 w + g and + 8, columns 8 j + 2 t, + 1 (lane = 4 g + t).
#define DI_WG_D8(b) "+f"(d[b]), "+f"(d[b + 1]), "+f"(d[b + 2]), "+f"(d[b + 3]), "+f"(d[b + 4]), "+f"(d[b + 5]), "+f"(d[b + 6]), "+f"(d[b + 7])
#define DI_WG_D64(b) \
  DI_WG_D8(b), DI_WG_D8(b + 8), DI_WG_D8(b + 16), DI_WG_D8(b + 24), DI_WG_D8(b + 32), DI_WG_D8(b + 40), DI_WG_D8(b + 48), DI_WG_D8(b + 56)
#define DI_WG_SCALES ", p, 1, 1, 0, 0;\n}\n"
template <int N>
__device__ __forceinline__ void wgmma_m64k16_ss(float (&d)[N / 2], uint64_t a_desc, uint64_t b_desc) {
  static_assert(N == 128 || N == 256, "wgmma width");
  if constexpr (N == 128) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
        "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
        "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65" DI_WG_SCALES
        : DI_WG_D64(0)
        : "l"(a_desc), "l"(b_desc));
  } else {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
        "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
        "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,"
        "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,"
        "%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}, %128, %129" DI_WG_SCALES
        : DI_WG_D64(0), DI_WG_D64(64)
        : "l"(a_desc), "l"(b_desc));
  }
}
#undef DI_WG_SCALES
#undef DI_WG_D64
#undef DI_WG_D8

}  // namespace deepinfer::kernels::cuda
