// The bf16 GEMM kernel (gemm_bf16_k; linear_bf16.cu launches it, its top comment has the design):
// cp.async staging with an optional L2 evict_first policy, mma.sync or warpgroup (wgmma) products,
// k segments folded in registers, through a workspace, or inside a cluster.
#pragma once

#include <cuda_bf16.h>

#include <type_traits>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/linear.cuh"
#include "kernels/cuda/mma.cuh"

#include <cooperative_groups.h>

namespace deepinfer::kernels::cuda::detail {

namespace cg = cooperative_groups;

__device__ inline void cp_async16(void* smem, const void* gmem, bool pred) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int n = pred ? 16 : 0;  // 0: the 16 bytes are zero-filled
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n));
}
// The same with an L2 evict_first policy (weights streamed once: they make room first).
__device__ inline void cp_async16_ef(void* smem, const void* gmem, bool pred, uint64_t pol) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int n = pred ? 16 : 0;
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(s), "l"(gmem), "r"(n), "l"(pol));
}
// 4 bytes (the copy through L1: cp.async's only form below 16 bytes).
__device__ inline void cp_async4(void* smem, const void* gmem, bool pred) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(gmem), "r"(pred ? 4 : 0));
}
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ inline void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
// Stored weight codes to bf16 mma operands, exactly the bf16 rounding of code x scale (what
// dequantising to bf16 gives): the codes' bits moved into bf16 fields give code x 2^-120 (e4m3)
// or code x 2^-126 (e2m1), subnormals included; one bf16 multiply by the power of two
// 2^(s - 7) or 2^(s - 1) (a second where that exceeds bf16's range: scale bytes above
// kTwoAbove) then rounds the exact product once. (A NaN code, e4m3 0x7F / 0xFF, which the
// quantiser never makes, decodes as 480 x scale rather than NaN; code 8 of e2m1 gives -0,
// whose products add as +0's do.)
struct StoredScale {
  uint32_t f1, f2;  // bf16x2 factors; f2 (1 unless the scale needs two) applies where two
};
// The scale bytes whose factor needs two multiplies (2^e, e = s - 127 + bias above 127; 255 is NaN).
template <int kBias>
constexpr uint32_t kTwoAbove = 254 - kBias;
// The factors of ue8m0 byte s for codes read as code x 2^-bias (bias 120: e4m3, 126: e2m1).
template <int kBias>
__device__ __forceinline__ StoredScale stored_scale(uint32_t s) {
  const int e = static_cast<int>(s) - 127 + kBias;  // 2^e, e >= -7
  const bool two = e > 127;
  const uint32_t b1 = static_cast<uint32_t>(two ? 254 : e + 127) << 7, b2 = static_cast<uint32_t>(two ? e : 127) << 7;
  return {s == 255u ? 0x7FC07FC0u : b1 | (b1 << 16), b2 | (b2 << 16)};
}
// Whether any of the four scale bytes in w needs two multiplies.
template <int kBias>
__device__ __forceinline__ bool stored_scales_two(uint32_t w) {
  constexpr uint32_t t = kTwoAbove<kBias>;
  return (__vcmpgtu4(w, t * 0x01010101u) & __vcmpltu4(w, 0xFFFFFFFFu)) != 0u;
}
__device__ __forceinline__ uint32_t bf16x2_mul(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("mul.rn.bf16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
// TWO: the warp has a scale needing the second multiply (f2 is 1 where it does not).
template <bool TWO>
__device__ __forceinline__ uint32_t scaled(uint32_t v, const StoredScale& sc) {
  v = bf16x2_mul(v, sc.f1);
  return TWO ? bf16x2_mul(v, sc.f2) : v;
}
// Two e4m3 codes (the low byte first) as bf16 code x 2^-120: byte b -> (b & 0x80) << 8 | (b & 0x7F) << 4.
// (kHigh: bytes 2 and 3 of c.)
template <bool kHigh = false>
__device__ __forceinline__ uint32_t e4m3x2_bits(uint32_t c) {
  const uint32_t t = __byte_perm(c, 0u, kHigh ? 0x3424u : 0x1404u);  // [0, b0, 0, b1]
  return ((t & 0x7F007F00u) >> 4) | (t & 0x80008000u);
}
// A byte of two e2m1 codes (the low nibble first) as bf16 code x 2^-126: nibble c -> (c & 8) << 12 |
// (c & 7) << 6, i.e. the low nibble times 2^6 + 2^12 and the high one (as b & 0xF0) times
// 2^18 + 2^24, whose four copies fall on disjoint bits; the mask keeps the wanted ones.
__device__ __forceinline__ uint32_t e2m1x2_bits(uint32_t b) {
  const uint32_t v = b * 0x1040u + (b & 0xF0u) * (0x01040000u - 0x1040u);  // l x 0x1040 + h x 0x01040000
  return v & 0x81C081C0u;
}

// Shared memory of a launch: per stage the x slice (bf16) and the weight slice (bf16; or, WQ,
// the stored codes and their scales).
template <int BM, int BN, int BK, int STAGES, bool WG, int WQ>
struct GemmSmem {
  static constexpr int LDS = BK + 8;                                  // bf16 row stride (elements)
  static constexpr int RB = WQ == 2 ? BK / 2 : BK;                    // WQ: code bytes of a row's slice
  static constexpr int LDQ = RB + 16;                                 // their row stride (bytes; distinct banks)
  static constexpr int KB = BK / 32;                                  // scale columns of a slice
  static constexpr int SROWS = WQ == 1 ? (BN + 31) / 32 : BN;         // scale rows of a slice
  static constexpr int SA = WG ? BM * BK : BM * LDS;                  // a stage's x elements
  static constexpr int SB = WG ? BN * BK : BN * LDS;                  // a stage's bf16 weight elements
  static constexpr int SBB = WQ ? BN * LDQ : SB * 2;                  // a stage's weight bytes
  static constexpr int SSB = WQ ? (SROWS * KB + 15) / 16 * 16 : 0;    // a stage's scale bytes
  static constexpr int DEC = WG && WQ ? 2 * BN * BK : 0;              // WG, WQ: two decoded bf16 weight slices
  static constexpr int bytes = STAGES * (SA * 2 + SBB + SSB) + DEC * 2 + (WG ? 1024 : 0);
};

// XF: x is float32 (p.x_f32), rounded to bf16 on its way into shared memory (through registers,
// loaded before a slice's products and stored after them), as to_bf16 would.
// WG (sm_90a): the products by warpgroups (wgmma m64nBNk16, each warpgroup 64 rows x BN columns,
// each warp 16 rows of them: WARPS_N 1, BN 128 or 256, BK 64), both operands read from shared
// memory through descriptors, the slices stored in the 128-byte swizzle (mma.cuh); the products
// of a slice run while the next slice's are issued (a stage is refilled two slices after it was
// read, so STAGES - 2 slices are in flight). An element keeps mma.sync's bits (the same k16
// steps in the same order: tools/wgmma_probe.cu, and the tilings' bitwise tests). Folding only
// at BN 128 (the second set of accumulators).
// WQ (1: FP8 e4m3 in 32x32 blocks, 2: MXFP4): the weights' codes staged as stored (half or a
// quarter of the bytes) with their scales (4 bytes a row, or a 32-row block, of a BK 128 slice:
// k a multiple of 128), in the same copies' groups; on the mma.sync tilings each operand pair
// decoded from them; on the warpgroup tiling (BN 128, BK 128: x in two swizzled 64-k tiles)
// each slice decoded once, into one of two bf16 slices the products then read (the next
// slice's decoding runs beside this slice's products).
template <int BM, int BN, int BK, int WARPS_M, int WARPS_N, int STAGES, bool FOLD, bool XF, bool WG = false, int WQ = 0>
__global__ void __launch_bounds__(WARPS_M* WARPS_N * 32) gemm_bf16_k(Bf16Gemm p, int ks) {
  // Dense: the weights' first slices are requested before the programmatic wait (nothing
  // writes them); every other access, and the grouped tile search, after it.
  constexpr int kThreads = WARPS_M * WARPS_N * 32, TM = BM / WARPS_M, TN = BN / WARPS_N, MI = TM / 16, NI = TN / 8;
  constexpr int LDS = BK + 8, CH = BK / 8;  // smem row stride (ldmatrix rows on distinct banks); 16-byte chunks per row
  static_assert(TM % 16 == 0 && TN % 16 == 0, "warp tile of whole 16 x 16 pieces");
  static_assert(!WG || (WARPS_N == 1 && TM == 16 && (BN == 128 || (BN == 256 && !FOLD)) && BK == (WQ ? 128 : 64) &&
                        WARPS_M % 4 == 0 && !XF && STAGES > 2),
                "warpgroup tiling");
  static_assert(!WQ || (BK == 128 && (!WG || (BN == 128 && kThreads == 2 * BN))), "stored-format weights in 128-wide slices");
  using SM = GemmSmem<BM, BN, BK, STAGES, WG, WQ>;
  constexpr int SA = SM::SA, SB = SM::SB, SBB = SM::SBB, SSB = SM::SSB, LDQ = SM::LDQ, KB = SM::KB;
  constexpr int PRE = WG ? STAGES - 2 : STAGES - 1;                          // slices loaded ahead
  extern __shared__ __align__(16) unsigned char smem_raw[];
  // WG: the tiles 1024-byte aligned (the swizzle's atoms; launch_gemm adds the room).
  const uint32_t pad = WG ? (1024 - static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw)) % 1024) % 1024 : 0;
  __nv_bfloat16* sA = reinterpret_cast<__nv_bfloat16*>(smem_raw + pad);  // [STAGES][SA]
  __nv_bfloat16* sDec = sA + STAGES * SA;                                // [2][BN * BK] (WG, WQ: decoded slices)
  unsigned char* sBq = reinterpret_cast<unsigned char*>(sDec + SM::DEC);  // [STAGES][SBB]
  __nv_bfloat16* sB = reinterpret_cast<__nv_bfloat16*>(sBq);             // [STAGES][SB] (bf16 weights)
  unsigned char* sS = sBq + STAGES * SBB;                                // [STAGES][SSB] (WQ scales)
  __shared__ int s_e, s_row0, s_rows;
  __shared__ int s_xrow[BM];  // p.x_rows: the x row each of the tile's rows reads
  const int K = p.k;
  // The block's place in the launch grid, in raster order (gemm_split.h): groups of row tiles,
  // row tile fastest, so the blocks sharing a weight tile run together.
  int bx, by;
  raster_tile(blockIdx.x, blockIdx.y, gridDim.x, gridDim.y, &bx, &by);
  // The block's product and column tile: one part of a multi-product launch (grid x runs over
  // the parts' column tiles x k segments), or the launch's one product (grid x its column
  // tiles; grid z its groups, times its k segments when split).
  int N = p.n, S = (K + ks - 1) / ks, g = 0, seg = 0, tx = bx;
  const void* Wb = p.w_dense;
  const uint8_t* Wsc = p.w_scale;
  const WeightView* table = p.w_table;
  float* Yb = p.y;
  int64_t ldy = p.ldy, counter_at = 0;
  float* ws = p.part;
  bool split = p.part != nullptr;
  if (p.parts > 0) {
#pragma unroll
    for (int i = 0; i < kMaxBf16Parts; ++i) {
      const Bf16Part& q = p.part_list[i];  // constant indices: read from the parameters in place
      if (i >= p.parts || bx < q.unit0) continue;
      N = q.n;
      ks = q.ks;
      Wb = q.w_dense;
      Wsc = q.w_scale;
      table = q.w_table;
      Yb = q.y;
      ldy = q.ldy;
      ws = p.part + q.part_off;
      S = (K + ks - 1) / ks;
      tx = (bx - q.unit0) / S;
      seg = (bx - q.unit0) % S;
      counter_at = q.counter0 + static_cast<int64_t>(by) * ((N + BN - 1) / BN) + tx;
    }
    split = S > 1;
  } else if (split) {
    g = static_cast<int>(blockIdx.z) / S;
    seg = static_cast<int>(blockIdx.z) % S;
    counter_at = (static_cast<int64_t>(g) * gridDim.y + by) * gridDim.x + bx;
  } else {
    g = static_cast<int>(blockIdx.z);
  }
  if (p.offsets) {
    DI_PDL_WAIT();
    if (!find_tile<BM>(p.offsets, p.experts, by, &s_e, &s_row0, &s_rows)) return;
    Wb = table[s_e].data;
    Wsc = table[s_e].scale;
  } else {
    if (threadIdx.x == 0) {
      s_row0 = by * BM;
      s_rows = min(BM, p.m - s_row0);
    }
    __syncthreads();
  }
  const int n0 = tx * BN;
  const int rows = s_rows, ncols = min(BN, N - n0), row0 = s_row0;
  const int64_t a_off = static_cast<int64_t>(row0) * p.ldx + g * p.x_group_stride;
  // Gathered rows (grouped, bf16 x only): the tile's x rows by index (rows past the tile's: row 0).
  const bool gathered = !XF && p.x_rows != nullptr;
  if (gathered) {
    for (int i = threadIdx.x; i < BM; i += kThreads) s_xrow[i] = i < rows ? p.x_rows[row0 + i] : 0;
    __syncthreads();
  }
  const __nv_bfloat16* A = XF ? nullptr : p.x + (gathered ? g * p.x_group_stride : a_off);
  const float* AF = XF ? p.x_f32 + a_off : nullptr;
  const __nv_bfloat16* B = WQ ? nullptr : static_cast<const __nv_bfloat16*>(Wb) + g * p.w_group_stride + static_cast<int64_t>(n0) * K;
  // WQ: the tile's first weight row (dense: from the matrix's row 0), its codes and scales.
  const int64_t wrow = (p.offsets ? 0 : p.w_row0 + g * (p.w_group_stride / K)) + n0;
  const unsigned char* Bq = WQ ? static_cast<const unsigned char*>(Wb) + wrow * (WQ == 2 ? K / 2 : K) : nullptr;
  const uint8_t* Bs = WQ ? Wsc + (WQ == 1 ? wrow / 32 : wrow) * (K / 32) : nullptr;
  float* Y = Yb + static_cast<int64_t>(row0) * ldy + g * p.y_group_stride + n0;
  const int SEG = ks / BK;  // slices per segment
  const int kt0 = split ? seg * SEG : 0, kt1 = split ? min(K / BK, kt0 + SEG) : K / BK, KT = kt1 - kt0;
  // XF: this thread's 8-element chunks of a slice of x (rows past the tile's: zeros).
  constexpr int AC = XF ? (BM * CH + kThreads - 1) / kThreads : 1;
  float4 areg[AC][2];
  auto load_a = [&](int kt) {
    if constexpr (XF) {
      const int k0 = (kt0 + kt) * BK;
#pragma unroll
      for (int i = 0; i < AC; ++i) {
        const int c = threadIdx.x + i * kThreads, r = c / CH, ch = c % CH;
        const bool ok = c < BM * CH && r < rows;
        const float4* src = reinterpret_cast<const float4*>(AF + static_cast<int64_t>(ok ? r : 0) * p.ldx + k0 + ch * 8);
        areg[i][0] = ok ? src[0] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        areg[i][1] = ok ? src[1] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
    }
  };
  auto store_a = [&](int stage) {
    if constexpr (XF) {
#pragma unroll
      for (int i = 0; i < AC; ++i) {
        const int c = threadIdx.x + i * kThreads, r = c / CH, ch = c % CH;
        if (c >= BM * CH) continue;
        *reinterpret_cast<uint4*>(sA + stage * SA + r * LDS + ch * 8) = pack_bf16x8(areg[i][0], areg[i][1]);
      }
    }
  };
  uint64_t pol = 0;
  if (p.stream_w) asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(pol));
  // Each thread's share of a slice's copies: of rows x RCH chunks, chunk column threadIdx.x % RCH
  // in rows threadIdx.x / RCH + i * (kThreads / RCH), a fixed count of copies unrolled (their
  // addresses, but for k, set once outside the k loop).
  auto each_copy = [&](auto rows_c, auto rch_c, auto&& f) {
    constexpr int ROWS = decltype(rows_c)::value, RCH = decltype(rch_c)::value, STEP = kThreads / RCH;
    static_assert(kThreads % RCH == 0, "a thread keeps its chunk column");
    const int r0 = threadIdx.x / RCH, ch = threadIdx.x % RCH;
#pragma unroll
    for (int i = 0; i < (ROWS + STEP - 1) / STEP; ++i) {
      const int r = r0 + i * STEP;
      if (ROWS % STEP != 0 && r >= ROWS) break;
      f(r, ch);
    }
  };
  using std::integral_constant;
  auto load_b = [&](int stage, int kt) {  // kt counts from kt0
    const int k0 = (kt0 + kt) * BK;
    if constexpr (WQ != 0) {
      const int64_t rb = WQ == 2 ? K / 2 : K, kb0 = WQ == 2 ? k0 / 2 : k0;
      each_copy(integral_constant<int, BN>(), integral_constant<int, SM::RB / 16>(), [&](int r, int ch) {
        const bool ok = r < ncols;
        cp_async16(sBq + stage * SBB + r * LDQ + ch * 16, Bq + static_cast<int64_t>(ok ? r : 0) * rb + kb0 + ch * 16, ok);
      });
      each_copy(integral_constant<int, SM::SROWS>(), integral_constant<int, 1>(), [&](int r, int) {
        const bool ok = (WQ == 1 ? r * 32 : r) < ncols;
        cp_async4(sS + stage * SSB + r * KB, Bs + static_cast<int64_t>(ok ? r : 0) * (K / 32) + k0 / 32, ok);
      });
    } else {
      each_copy(integral_constant<int, BN>(), integral_constant<int, CH>(), [&](int r, int ch) {
        const bool ok = r < ncols;
        void* dst = sB + stage * SB + (WG ? sw128_at(r, ch) : r * LDS + ch * 8);
        const void* src = B + static_cast<int64_t>(ok ? r : 0) * K + k0 + ch * 8;
        if (p.stream_w) cp_async16_ef(dst, src, ok, pol);
        else cp_async16(dst, src, ok);
      });
    }
  };
  auto load = [&](int stage, int kt, bool with_b) {
    const int k0 = (kt0 + kt) * BK;
    if constexpr (!XF) {
      each_copy(integral_constant<int, BM>(), integral_constant<int, CH>(), [&](int r, int ch) {
        const bool ok = r < rows;
        const int64_t xr = gathered ? s_xrow[ok ? r : 0] : (ok ? r : 0);
        cp_async16(sA + stage * SA + (WG ? sw128_tile_at(r, ch, BM) : r * LDS + ch * 8), A + xr * p.ldx + k0 + ch * 8, ok);
      });
    }
    if (with_b) load_b(stage, kt);
  };
  constexpr int kBias = WQ == 1 ? 120 : 126;
  // WG, WQ: a slice's codes (stage st) to bf16 in the 128-byte swizzle by 64 k (dst): thread t
  // decodes row t % BN, k half t / BN (64 k: 16-byte reads and writes on distinct banks), its
  // two scales' second multiply taken warp by warp where any needs it.
  [[maybe_unused]] auto decode_slice = [&](int st, __nv_bfloat16* dst) {
    if constexpr (WG && WQ != 0) {
      const int r = threadIdx.x % BN, h = threadIdx.x / BN;
      const unsigned char* q = sBq + st * SBB + r * LDQ + h * (SM::RB / 2);
      const unsigned char* sc = sS + st * SSB + (WQ == 1 ? r / 32 : r) * KB + 2 * h;
      const uint32_t s2 = sc[0] | static_cast<uint32_t>(sc[1]) << 8;
      dst += h * BN * 64;
      auto run = [&](auto two_c) {
        constexpr bool TWO = decltype(two_c)::value;
#pragma unroll
        for (int b = 0; b < 2; ++b) {  // 32 k a scale
          const StoredScale f = stored_scale<kBias>((s2 >> (8 * b)) & 0xFFu);
#pragma unroll
          for (int c2 = 0; c2 < 4; c2 += WQ == 1 ? 2 : 4) {  // 16-byte reads: 2 chunks of 8 k (FP8), 4 (MXFP4)
            const int c = b * 4 + c2;
            const uint4 w = *reinterpret_cast<const uint4*>(q + (WQ == 1 ? c * 8 : c * 4));
            const uint32_t wv[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
            for (int i = 0; i < (WQ == 1 ? 2 : 4); ++i) {  // chunk c + i: 8 k, 4 pairs
              uint32_t o[4];
              if constexpr (WQ == 1) {
                o[0] = scaled<TWO>(e4m3x2_bits(wv[2 * i]), f);
                o[1] = scaled<TWO>(e4m3x2_bits<true>(wv[2 * i]), f);
                o[2] = scaled<TWO>(e4m3x2_bits(wv[2 * i + 1]), f);
                o[3] = scaled<TWO>(e4m3x2_bits<true>(wv[2 * i + 1]), f);
              } else {
#pragma unroll
                for (int j = 0; j < 4; ++j) o[j] = scaled<TWO>(e2m1x2_bits((wv[i] >> (8 * j)) & 0xFFu), f);
              }
              *reinterpret_cast<uint4*>(dst + sw128_at(r, c + i)) = make_uint4(o[0], o[1], o[2], o[3]);
            }
          }
        }
      };
      if (__any_sync(0xFFFFFFFFu, stored_scales_two<kBias>(s2))) run(std::true_type());
      else run(std::false_type());
    }
  };
  // acc: the current segment's sums; tot (FOLD only; otherwise unused and dropped by the
  // compiler): the sum of the finished segments.
  float acc[MI][NI][4] = {}, tot[MI][NI][4] = {};
  auto fold = [&] {
    if constexpr (FOLD) {
#pragma unroll
      for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
          for (int v = 0; v < 4; ++v) {
            tot[i][j][v] += acc[i][j][v];
            acc[i][j][v] = 0.0f;
          }
    }
  };
  // Dense: the first PRE weight slices before the wait, uncommitted, so they join the first
  // group with slice 0 of x (group s then holds what stage s needs, as below).
  const bool early_b = p.offsets == nullptr && !p.w_fresh;
  if (early_b) {
#pragma unroll
    for (int st = 0; st < PRE; ++st)
      if (st < KT) load_b(st, st);
    DI_PDL_WAIT();
  }
  DI_PDL_TRIGGER();
#pragma unroll
  for (int st = 0; st < PRE; ++st) {
    if (st < KT) {
      load(st, st, !early_b);
      load_a(st);
      store_a(st);
    }
    cp_async_commit();
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = warp / WARPS_N, wn = warp % WARPS_N;
  if constexpr (WG) {
    // Slice kt: landed (this thread's copies, then everyone's at the barrier, made visible to the
    // products' async proxy); by the barrier every warpgroup's products of slice kt - 2 are done
    // (each waits for all but its last group), so its stage takes slice kt + PRE; a finished
    // segment folded once its products are done; the slice's four k16 products issued as one
    // group, then the wait for the previous slice's.
    // WQ: after the refill, the slice's codes decoded into bf16 slice kt % 2 (last read by the
    // products of slice kt - 2, done by the barrier), made visible to the products at a second.
    float(&d)[BN / 2] = *reinterpret_cast<float(*)[BN / 2]>(&acc[0][0][0]);
    const int wg = warp / 4;
    for (int kt = 0; kt < KT; ++kt) {
      cp_async_wait<PRE - 1>();
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
      __syncthreads();
      if (kt + PRE < KT) load((kt + PRE) % STAGES, kt + PRE, true);
      cp_async_commit();
      if constexpr (WQ != 0) {
        decode_slice(kt % STAGES, sDec + (kt % 2) * BN * BK);
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads();
      }
      // Tiles of 64 k (two for BK 128): warpgroup wg's 64 rows of x, and the weights' BN rows.
      const __nv_bfloat16* a_s = sA + (kt % STAGES) * SA + wg * 64 * 64;
      const __nv_bfloat16* b_s = WQ ? sDec + (kt % 2) * BN * BK : sB + (kt % STAGES) * SB;
      if constexpr (FOLD)
        if (kt > 0 && kt % SEG == 0) {
          wgmma_wait<0>();
          wgmma_hold(d);
          fold();
        }
      wgmma_hold(d);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < BK; kk += 16)
        wgmma_m64k16_ss<BN>(d, wgmma_desc_sw128(a_s + kk / 64 * BM * 64 + kk % 64), wgmma_desc_sw128(b_s + kk / 64 * BN * 64 + kk % 64));
      wgmma_commit();
      wgmma_wait<1>();
      wgmma_hold(d);
    }
    wgmma_wait<0>();
    wgmma_hold(d);
  } else {
    for (int kt = 0; kt < KT; ++kt) {
      cp_async_wait<STAGES - 2>();
      __syncthreads();  // stage kt landed for every thread; stage kt-1 is free to refill
      const bool refill = kt + STAGES - 1 < KT;
      if (refill) {
        load((kt + STAGES - 1) % STAGES, kt + STAGES - 1, true);
        load_a(kt + STAGES - 1);
      }
      cp_async_commit();
      if constexpr (FOLD)
        if (kt > 0 && kt % SEG == 0) fold();  // a segment ended
      const __nv_bfloat16* a_s = sA + (kt % STAGES) * SA;
      const __nv_bfloat16* b_s = sB + (kt % STAGES) * SB;
      // The slice's products; TWO (stored formats): the second scale multiply, taken by the whole
      // warp for a slice where any of its scales needs it (sw: each column's four scale bytes).
      auto products = [&](auto two_c, const uint32_t* sw) {
        [[maybe_unused]] constexpr bool TWO = decltype(two_c)::value;
        [[maybe_unused]] StoredScale wsc[WQ ? NI : 1];  // WQ: the current 32 k's scales of the warp's columns
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
          uint32_t af[MI][4], bf[NI][2];
#pragma unroll
          for (int i = 0; i < MI; ++i) ldmatrix_x4(af[i], a_s + (wm * TM + i * 16 + (lane & 15)) * LDS + kk + (lane >> 4) * 8);
          if constexpr (WQ != 0) {
            // Operand pairs (k, k + 1) and (k + 8, k + 9) of column n, k = kk + 2 (lane % 4).
            const unsigned char* q_s = sBq + (kt % STAGES) * SBB;
            if (kk % 32 == 0)  // a scale covers 32 k: two k16 steps
#pragma unroll
              for (int j = 0; j < NI; ++j) wsc[j] = stored_scale<kBias>((sw[j] >> (kk / 32 * 8)) & 0xFFu);
#pragma unroll
            for (int j = 0; j < NI; ++j) {
              const int n = wn * TN + j * 8 + lane / 4;
              if constexpr (WQ == 1) {
                const unsigned char* q = q_s + n * LDQ + kk + 2 * (lane % 4);
                bf[j][0] = scaled<TWO>(e4m3x2_bits(*reinterpret_cast<const uint16_t*>(q)), wsc[j]);
                bf[j][1] = scaled<TWO>(e4m3x2_bits(*reinterpret_cast<const uint16_t*>(q + 8)), wsc[j]);
              } else {
                const unsigned char* q = q_s + n * LDQ + kk / 2 + lane % 4;
                bf[j][0] = scaled<TWO>(e2m1x2_bits(q[0]), wsc[j]);
                bf[j][1] = scaled<TWO>(e2m1x2_bits(q[4]), wsc[j]);
              }
            }
          } else {
#pragma unroll
            for (int j = 0; j < NI; j += 2) {
              uint32_t r[4];
              ldmatrix_x4(r, b_s + (wn * TN + j * 8 + ((lane >> 4) << 3) + (lane & 7)) * LDS + kk + ((lane >> 3) & 1) * 8);
              bf[j][0] = r[0];
              bf[j][1] = r[1];
              bf[j + 1][0] = r[2];
              bf[j + 1][1] = r[3];
            }
          }
#pragma unroll
          for (int i = 0; i < MI; ++i)
#pragma unroll
            for (int j = 0; j < NI; ++j) mma_bf16(acc[i][j], af[i], bf[j][0], bf[j][1]);
        }
      };
      uint32_t sw[NI] = {};
      if constexpr (WQ != 0) {
        const unsigned char* s_s = sS + (kt % STAGES) * SSB;
        bool two = false;
#pragma unroll
        for (int j = 0; j < NI; ++j) {
          const int n = wn * TN + j * 8 + lane / 4;
          sw[j] = *reinterpret_cast<const uint32_t*>(s_s + (WQ == 1 ? n / 32 : n) * KB);
          two |= stored_scales_two<kBias>(sw[j]);
        }
        if (__any_sync(0xFFFFFFFFu, two)) products(std::true_type(), sw);
        else products(std::false_type(), sw);
      } else {
        products(std::false_type(), sw);
      }
      // The refilled stage's x (its slot was freed by this iteration's barrier; read after the next).
      if (refill) store_a((kt + STAGES - 1) % STAGES);
    }
  }
  cp_async_wait<0>();
  fold();
  // Each thread's output elements: (row r of the tile, columns col, col + 1), the fragment
  // (i, j) and its half h of the accumulators.
  auto each_at = [&](auto&& f) {
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
      for (int j = 0; j < NI; ++j) {
        const int col = wn * TN + j * 8 + (lane % 4) * 2;
        if (col >= ncols) continue;  // N is even, so col + 1 < ncols too
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = wm * TM + i * 16 + lane / 4 + h * 8;
          if (r < rows) f(i, j, h, r, col);
        }
      }
  };
  auto each = [&](auto&& f) {
    each_at([&](int i, int j, int h, int r, int col) { f(r, col, (FOLD ? tot : acc)[i][j] + 2 * h); });
  };
  auto store = [&] {
    each([&](int r, int col, const float* v) {
      *reinterpret_cast<float2*>(Y + static_cast<int64_t>(r) * ldy + col) = make_float2(v[0], v[1]);
    });
  };
  if (!split) return store();
  if constexpr (BM * BN > 64 * 128 || FOLD) {
    // launch_gemm gives tiles wider than 64 x 128 no workspace (they fold; the sums below took
    // 172 registers at 128 x 128, one block per SM instead of two), folding launches none either.
    __trap();
  } else {
    // Each element's partial sums added in segment order to 0, at(s, r, col) its segment s's
    // (float2 of columns col, col + 1). The loads of G segments at a time, every element of
    // the thread's, are issued before their adds (one memory latency per G segments, not one
    // per element and segment). G 8 in the decode tiling (64 more registers, 120), 1 on wider
    // tiles (64 x 128: G 2 took 127 registers to 168, one block per SM instead of two).
    auto add_segments = [&](auto&& at) {
      constexpr int G = MI * NI <= 2 ? 8 : 1;
#pragma unroll
      for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
          for (int v = 0; v < 4; ++v) acc[i][j][v] = 0.0f;
      for (int s0 = 0; s0 < S; s0 += G) {
        float2 pv[G][MI][NI][2];
#pragma unroll
        for (int q = 0; q < G; ++q)
          if (s0 + q < S)
            each_at([&](int i, int j, int h, int r, int col) { pv[q][i][j][h] = at(s0 + q, r, col); });
#pragma unroll
        for (int q = 0; q < G; ++q)
          if (s0 + q < S)
            each_at([&](int i, int j, int h, int, int) {
              acc[i][j][2 * h] += pv[q][i][j][h].x;
              acc[i][j][2 * h + 1] += pv[q][i][j][h].y;
            });
      }
      store();
    };
    if (p.cluster) {
      // Split over the blocks of a cluster (segment s = the block of rank s): each block's sums
      // to its own shared memory (the pipeline's stages, every copy landed and every warp past
      // its last read at the barrier), and block 0 adds the S of them in segment order through
      // distributed shared memory; no workspace, fence or counter. The same bits as below.
      static_assert(BM * BN * 4 <= STAGES * (SA * 2 + SBB), "a tile's sums fit the stages");
      __syncthreads();
      float* sums = reinterpret_cast<float*>(sA);
      each([&](int r, int col, const float* v) { *reinterpret_cast<float2*>(sums + r * BN + col) = make_float2(v[0], v[1]); });
      cg::cluster_group cl = cg::this_cluster();
      if (static_cast<int>(cl.block_rank()) != seg || static_cast<int>(cl.num_blocks()) != S) __trap();
      cl.sync();
      if (seg == 0)
        add_segments([&](int sg, int r, int col) {
          return *reinterpret_cast<const float2*>(cl.map_shared_rank(sums, static_cast<unsigned>(sg)) + r * BN + col);
        });
      cl.sync();  // the others' shared memory stays until block 0 has read it
      return;
    }
    // Split: this segment's sums to the workspace [groups][S][m][n]; the tile's last block to
    // finish adds the S partial sums in segment order (whichever block that is) and resets the
    // tile's counter for the next launch.
    auto part_at = [&](int sg, int r, int col) {
      return ws + ((static_cast<int64_t>(g) * S + sg) * p.m + row0 + r) * N + n0 + col;
    };
    each([&](int r, int col, const float* v) { *reinterpret_cast<float2*>(part_at(seg, r, col)) = make_float2(v[0], v[1]); });
    __threadfence();
    __syncthreads();
    __shared__ bool s_last;
    int* counter = p.counters + counter_at;
    if (threadIdx.x == 0) s_last = atomicAdd(counter, 1) == S - 1;
    __syncthreads();
    if (!s_last) return;
    __threadfence();
    add_segments([&](int sg, int r, int col) { return __ldcg(reinterpret_cast<const float2*>(part_at(sg, r, col))); });
    if (threadIdx.x == 0) *counter = 0;
  }
}

}  // namespace deepinfer::kernels::cuda::detail
