// CUDA: the routed experts without a round trip to the host, and the bf16 GEMM. moe_permute
// groups the (token, slot) pairs by expert (a stable counting sort: one block per expert, one
// launch);
// gemm_bf16 is a bf16 tensor-core product (mma.sync m16n8k16, float32 accumulation), dense or
// with every expert in one launch (each block finding its expert and row tile from the
// device-side offsets); grouped_gemm_any is the float32-math product for other formats.
// Batch invariance: an output element is accumulated over k in one fixed order whatever the
// tile shape and the number of rows: k16 steps ascending within each k segment (gemm_bf16_split,
// a function of the product's shape alone), the segments' sums added in ascending order to 0.
// Few rows: one block per (tile, segment), partial sums in a workspace, the tile's last block
// adding them up (in the decode tiling the tile's blocks are one cluster instead, and its first
// block adds them through distributed shared memory); many rows: one block per tile folding
// the segments in registers.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdlib>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/gemm_split.h"
#include "kernels/cuda/mma.cuh"

#include <cooperative_groups.h>

namespace deepinfer::kernels::cuda {

namespace cg = cooperative_groups;

namespace {

constexpr int kPermThreads = 1024;

// Block e: its first permuted row (the pairs routed to experts before it: one pass over the
// ids, no separate count launch), then its pairs in ascending pair index, compacted chunk by
// chunk with warp ballots.
__global__ void moe_permute_k(MoePermuteArgs a) {
  DI_PDL_ENTRY();
  __shared__ int part[32];
  __shared__ int warp_n[kPermThreads / 32];
  const int e = static_cast<int>(blockIdx.x);
  int before = 0, own = 0;
  for (int64_t i = threadIdx.x; i < a.n * a.k; i += blockDim.x) {
    const int32_t id = a.ids[i];
    before += id >= 0 && id < e;
    own += id == e;
  }
  int base = static_cast<int>(block_sum_i(before, part));
  const int count = static_cast<int>(block_sum_i(own, part));
  const int64_t pairs = a.n * a.k;
  if (threadIdx.x == 0) {
    a.offsets[e] = base;
    if (e == a.experts - 1) a.offsets[a.experts] = base + count;
    if (e == a.experts - 1 && a.shared) a.offsets[a.experts + 1] = static_cast<int32_t>(pairs + a.n);
  }
  if (a.shared)  // the shared expert's rows: every token in order, weight 1
    for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < a.n; t += gridDim.x * static_cast<int64_t>(blockDim.x)) {
      a.perm_token[pairs + t] = static_cast<int32_t>(t);
      a.perm_weight[pairs + t] = 1.0f;
    }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
  for (int64_t i0 = 0; i0 < pairs; i0 += blockDim.x) {
    const int64_t i = i0 + threadIdx.x;
    const bool mine = i < pairs && a.ids[i] == e;
    const unsigned m = __ballot_sync(0xffffffffu, mine);
    if (lane == 0) warp_n[warp] = __popc(m);
    __syncthreads();
    int ahead = 0, total = 0;
    for (int w = 0; w < nw; ++w) {
      ahead += w < warp ? warp_n[w] : 0;
      total += warp_n[w];
    }
    if (mine) {
      const int j = base + ahead + __popc(m & ((1u << lane) - 1u));
      a.perm_token[j] = static_cast<int32_t>(i / a.k);
      a.perm_weight[j] = a.weights[i];
      a.slot_row[i] = j;
    }
    base += total;
    __syncthreads();
  }
}

// ---- grouped bf16 GEMM ----------------------------------------------------------------------


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
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ inline void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
// Which expert and row tile block row `t` computes: the experts' tiles of BM rows, numbered in
// expert order. Warp 0 scans the offsets 32 experts at a time. Returns false past the last tile.
template <int BM>
__device__ bool find_tile(const int32_t* off, int E, int t, int* s_e, int* s_row0, int* s_rows) {
  __shared__ int found;
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    int seen = 0;  // tiles of the experts before this group of 32
    if (lane == 0) found = 0;
    __syncwarp();
    for (int e0 = 0; e0 < E; e0 += 32) {
      const int e = e0 + lane;
      const int lo = e < E ? off[e] : 0, cnt = e < E ? off[e + 1] - lo : 0;
      const int tiles = (cnt + BM - 1) / BM;
      int incl = tiles;
      for (int d = 1; d < 32; d <<= 1) {
        const int v = __shfl_up_sync(0xffffffffu, incl, d);
        if (lane >= d) incl += v;
      }
      const int excl = seen + incl - tiles;
      const bool mine = tiles > 0 && t >= excl && t < excl + tiles;
      if (mine) {
        *s_e = e;
        *s_row0 = lo + (t - excl) * BM;
        *s_rows = min(BM, lo + cnt - *s_row0);
        found = 1;
      }
      if (__any_sync(0xffffffffu, mine)) break;
      seen += __shfl_sync(0xffffffffu, incl, 31);
    }
  }
  __syncthreads();
  return found != 0;
}

// y[r, n0 + c] for the rows of one row tile (of an expert, or of the dense product) and BN
// columns; grid z is the group of a grouped (strided-batch) product, times the k segments when
// they are split across blocks (z = group * segments + segment). Warps WARPS_M x WARPS_N,
// each a (BM/WARPS_M) x (BN/WARPS_N) tile of 16 x 8 mma tiles; STAGES-deep cp.async pipeline
// of BK-wide k slices (BK changes nothing in the sums: k16 steps ascend either way; segments
// are whole slices). FOLD: one block covers every segment, adding each one's sum as it ends.
// XF: x is float32 (p.x_f32), rounded to bf16 on its way into shared memory (through registers,
// loaded before a slice's products and stored after them), as to_bf16 would.
// WG (sm_90a): the products by warpgroups (wgmma m64nBNk16, each warpgroup 64 rows x BN columns,
// each warp 16 rows of them: WARPS_N 1, BN 128 or 256, BK 64), both operands read from shared
// memory through descriptors, the slices stored in the 128-byte swizzle (mma.cuh); the products
// of a slice run while the next slice's are issued (a stage is refilled two slices after it was
// read, so STAGES - 2 slices are in flight). An element keeps mma.sync's bits (the same k16
// steps in the same order: tools/wgmma_probe.cu, and the tilings' bitwise tests). Folding only
// at BN 128 (the second set of accumulators).
template <int BM, int BN, int BK, int WARPS_M, int WARPS_N, int STAGES, bool FOLD, bool XF, bool WG = false>
__global__ void __launch_bounds__(WARPS_M* WARPS_N * 32) gemm_bf16_k(Bf16Gemm p, int ks) {
  // Dense: the weights' first slices are requested before the programmatic wait (nothing
  // writes them); every other access, and the grouped tile search, after it.
  constexpr int kThreads = WARPS_M * WARPS_N * 32, TM = BM / WARPS_M, TN = BN / WARPS_N, MI = TM / 16, NI = TN / 8;
  constexpr int LDS = BK + 8, CH = BK / 8;  // smem row stride (ldmatrix rows on distinct banks); 16-byte chunks per row
  static_assert(TM % 16 == 0 && TN % 16 == 0, "warp tile of whole 16 x 16 pieces");
  static_assert(!WG || (WARPS_N == 1 && TM == 16 && (BN == 128 || (BN == 256 && !FOLD)) && BK == 64 && WARPS_M % 4 == 0 &&
                        !XF && STAGES > 2),
                "warpgroup tiling");
  constexpr int SA = WG ? BM * BK : BM * LDS, SB = WG ? BN * BK : BN * LDS;  // a stage's elements
  constexpr int PRE = WG ? STAGES - 2 : STAGES - 1;                          // slices loaded ahead
  extern __shared__ __align__(16) unsigned char smem_raw[];
  // WG: the tiles 1024-byte aligned (the swizzle's atoms; launch_gemm adds the room).
  const uint32_t pad = WG ? (1024 - static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw)) % 1024) % 1024 : 0;
  __nv_bfloat16* sA = reinterpret_cast<__nv_bfloat16*>(smem_raw + pad);  // [STAGES][SA]
  __nv_bfloat16* sB = sA + STAGES * SA;                                  // [STAGES][SB]
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
  const __nv_bfloat16* Wb = p.w_dense;
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
    Wb = static_cast<const __nv_bfloat16*>(table[s_e].data);
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
  const __nv_bfloat16* B = Wb + g * p.w_group_stride + static_cast<int64_t>(n0) * K;
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
  auto load_b = [&](int stage, int kt) {  // kt counts from kt0
    const int k0 = (kt0 + kt) * BK;
    for (int c = threadIdx.x; c < BN * CH; c += kThreads) {
      const int r = c / CH, ch = c % CH;
      const bool ok = r < ncols;
      void* dst = sB + stage * SB + (WG ? sw128_at(r, ch) : r * LDS + ch * 8);
      const void* src = B + static_cast<int64_t>(ok ? r : 0) * K + k0 + ch * 8;
      if (p.stream_w) cp_async16_ef(dst, src, ok, pol);
      else cp_async16(dst, src, ok);
    }
  };
  auto load = [&](int stage, int kt, bool with_b) {
    const int k0 = (kt0 + kt) * BK;
    if constexpr (!XF) {
      for (int c = threadIdx.x; c < BM * CH; c += kThreads) {
        const int r = c / CH, ch = c % CH;
        const bool ok = r < rows;
        const int64_t xr = gathered ? s_xrow[ok ? r : 0] : (ok ? r : 0);
        cp_async16(sA + stage * SA + (WG ? sw128_at(r, ch) : r * LDS + ch * 8), A + xr * p.ldx + k0 + ch * 8, ok);
      }
    }
    if (with_b) load_b(stage, kt);
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
  const bool early_b = p.offsets == nullptr;
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
    float(&d)[BN / 2] = *reinterpret_cast<float(*)[BN / 2]>(&acc[0][0][0]);
    const int wg = warp / 4;
    for (int kt = 0; kt < KT; ++kt) {
      cp_async_wait<PRE - 1>();
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
      __syncthreads();
      if (kt + PRE < KT) load((kt + PRE) % STAGES, kt + PRE, true);
      cp_async_commit();
      const __nv_bfloat16* a_s = sA + (kt % STAGES) * SA + wg * 64 * BK;
      const __nv_bfloat16* b_s = sB + (kt % STAGES) * SB;
      if constexpr (FOLD)
        if (kt > 0 && kt % SEG == 0) {
          wgmma_wait<0>();
          wgmma_hold(d);
          fold();
        }
      wgmma_hold(d);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < BK; kk += 16) wgmma_m64k16_ss<BN>(d, wgmma_desc_sw128(a_s + kk), wgmma_desc_sw128(b_s + kk));
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
#pragma unroll
      for (int kk = 0; kk < BK; kk += 16) {
        uint32_t af[MI][4], bf[NI][2];
#pragma unroll
        for (int i = 0; i < MI; ++i) ldmatrix_x4(af[i], a_s + (wm * TM + i * 16 + (lane & 15)) * LDS + kk + (lane >> 4) * 8);
#pragma unroll
        for (int j = 0; j < NI; j += 2) {
          uint32_t r[4];
          ldmatrix_x4(r, b_s + (wn * TN + j * 8 + ((lane >> 4) << 3) + (lane & 7)) * LDS + kk + ((lane >> 3) & 1) * 8);
          bf[j][0] = r[0];
          bf[j][1] = r[1];
          bf[j + 1][0] = r[2];
          bf[j + 1][1] = r[3];
        }
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
          for (int j = 0; j < NI; ++j) mma_bf16(acc[i][j], af[i], bf[j][0], bf[j][1]);
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
      static_assert(BM * BN * 4 <= STAGES * (SA + SB) * 2, "a tile's sums fit the stages");
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

// The parts' k segments, first units (column tiles of BN x segments), tile counters (row tiles
// of BM) and partial-sum offsets; returns the workspace's floats, -1 past the tile counters.
// Only dense parts split, always in the decode tiling (BM 16, BN 64).
int64_t lay_out_parts(Bf16Gemm& p, int64_t BM = 16, int64_t BN = 64) {
  const int64_t tiles = ceil_div(p.m, BM) + (p.offsets ? std::min<int64_t>(p.experts, p.m) : 0);
  int64_t unit = 0, counter = 0, off = 0;
  for (int i = 0; i < p.parts; ++i) {
    Bf16Part& q = p.part_list[i];
    q.ks = static_cast<int>(gemm_split_len(q.n, p.k, 1, p.offsets != nullptr));
    const int64_t S = ceil_div(p.k, q.ks), cols = ceil_div(q.n, BN);
    q.unit0 = static_cast<int>(unit);
    q.counter0 = static_cast<int>(counter);
    q.part_off = off;
    unit += cols * S;
    if (S > 1) {
      counter += tiles * cols;
      off += S * static_cast<int64_t>(p.m) * q.n;
    }
  }
  return p.counters || off == 0 ? (counter <= kGemmCounters ? off : -1) : -1;
}
// Whether a product split into S segments adds them up inside clusters of S blocks (the split
// decode tiling; sm_90): S from 2 to 16 (above 8 by the kernel's non-portable opt-in), unless
// DEEPINFER_CUDA_CLUSTER=0. Otherwise through the workspace and tile counters (same bits).
template <class... KArgs>
bool gemm_clusters(void (*kern)(KArgs...), int S) {
  if (!clusters_enabled() || S < 2 || S > 16) return false;
  if (S > 8) func_attr_at_least(reinterpret_cast<const void*>(kern), cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  return true;
}

template <int BM, int BN, int BK, int WARPS_M, int WARPS_N, int STAGES, bool XF = false, bool WG = false>
void launch_gemm(Bf16Gemm p, cudaStream_t s) {
  // Grouped: at most ceil(rows / BM) + min(experts, rows) tiles (every expert with rows may end
  // on a partial tile, and at most `rows` experts have any): at one token 7 row tiles, not 65,
  // so the launch is not mostly blocks that find no tile.
  const int64_t tiles = ceil_div(p.m, BM) + (p.offsets ? std::min<int64_t>(p.experts, p.m) : 0);
  // (WG: unpadded rows in the swizzle, and room to align the tiles to 1024 bytes.)
  constexpr int smem = WG ? STAGES * (BM + BN) * BK * 2 + 1024 : STAGES * (BM + BN) * (BK + 8) * 2;
  if (p.parts > 0) {  // grid x covers every part's units; no folding
    lay_out_parts(p, BM, BN);
    const Bf16Part& last = p.part_list[p.parts - 1];
    const int64_t units = last.unit0 + ceil_div(last.n, BN) * ceil_div(p.k, last.ks);
    auto kernel = gemm_bf16_k<BM, BN, BK, WARPS_M, WARPS_N, STAGES, false, XF, WG>;
    opt_in_smem(kernel, smem);
    const dim3 grid(static_cast<unsigned>(units), static_cast<unsigned>(tiles), 1);
    // Clusters along x when every part has the same segments and there is one row tile (grid
    // x then runs tile by tile, each tile's segments in order: a part's first unit is a
    // multiple of the segments, and the raster order is the identity).
    int S = static_cast<int>(ceil_div(p.k, p.part_list[0].ks));
    for (int i = 1; i < p.parts; ++i) S = ceil_div(p.k, p.part_list[i].ks) == S ? S : 0;
    p.cluster = BM == 16 && tiles == 1 && gemm_clusters(kernel, S) ? S : 0;
    const dim3 cluster(static_cast<unsigned>(S), 1, 1);
    launch_k_with(kernel, grid, WARPS_M * WARPS_N * 32, smem, s, p.cluster ? &cluster : nullptr, p, static_cast<int>(p.k));
    DI_CUDA_LAUNCHED();
    return;
  }
  const int ks = gemm_bf16_split(p), S = static_cast<int>(ceil_div(p.k, ks));
  const int64_t cols = ceil_div(p.n, BN);
  // No workspace (folding in registers instead) for one segment, too many tiles, or tiles wider
  // than 64 x 128 (the kernel adds partial sums only for narrower ones).
  if (S == 1 || tiles * cols * p.groups > kGemmCounters || !p.counters || BM * BN > 64 * 128) p.part = nullptr;
  auto kernel = gemm_bf16_k<BM, BN, BK, WARPS_M, WARPS_N, STAGES, false, XF, WG>;
  if constexpr (WG && BN > 128) {
    if (S > 1) {  // the dispatch sends products in k segments to narrower tiles
      std::fprintf(stderr, "deepinfer: gemm_bf16: a product in k segments on the 256-column tiling\n");
      std::abort();
    }
  } else if (S > 1 && !p.part) {
    kernel = gemm_bf16_k<BM, BN, BK, WARPS_M, WARPS_N, STAGES, true, XF, WG>;
  }
  opt_in_smem(kernel, smem);
  const dim3 grid(static_cast<unsigned>(cols), static_cast<unsigned>(tiles), static_cast<unsigned>(p.groups * (p.part ? S : 1)));
  // A split in the decode tiling: a tile's segments are consecutive in grid z, one cluster.
  p.cluster = BM == 16 && p.part && gemm_clusters(kernel, S) ? S : 0;
  const dim3 cluster(1, 1, static_cast<unsigned>(S));
  launch_k_with(kernel, grid, WARPS_M * WARPS_N * 32, smem, s, p.cluster ? &cluster : nullptr, p, ks);
  DI_CUDA_LAUNCHED();
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

void grouped_gemm_any(const float* x, const WeightView* w, const int32_t* offsets, float* y, int64_t rows, int64_t n,
                      int64_t k, int64_t experts, bool bf16, cudaStream_t s) {
  if (rows == 0 || n == 0) return;
  const dim3 grid(static_cast<unsigned>(ceil_div(n, kAnyCols)),
                  static_cast<unsigned>(ceil_div(rows, kAnyRows) + std::min<int64_t>(experts, rows)));
  const int N = static_cast<int>(n), K = static_cast<int>(k), E = static_cast<int>(experts);
  if (bf16) launch_k(grouped_gemm_any_k<true>, grid, kAnyThreads, 0, s, x, w, offsets, y, N, K, E);
  else launch_k(grouped_gemm_any_k<false>, grid, kAnyThreads, 0, s, x, w, offsets, y, N, K, E);
  DI_CUDA_LAUNCHED();
}

void moe_permute(const MoePermuteArgs& a, cudaStream_t s) {
  if (a.experts == 0) return;
  launch_k(moe_permute_k, static_cast<unsigned>(a.experts), kPermThreads, 0, s, a);
  DI_CUDA_LAUNCHED();
}

bool gemm_bf16_fits(int64_t n, int64_t k) { return k % 32 == 0 && n % 2 == 0 && k > 0 && n > 0; }

namespace {
// Split products of at most kSplitRowsMax rows per tile take the split launch (measured
// faster at 256 rows than folding: the partial sums stay mostly in L2), larger ones fold in
// registers.
constexpr int64_t kSplitRowsMax = 512;
int64_t rows_per_tile(const Bf16Gemm& p) {
  return p.offsets ? ceil_div(p.m, std::max<int64_t>(p.experts, 1)) : p.m;
}
}  // namespace

bool wgmma_enabled() {
  static const bool on = env_switch_on("DEEPINFER_CUDA_WGMMA");
  return on;
}

int gemm_bf16_split(const Bf16Gemm& p) {
  return static_cast<int>(gemm_split_len(p.n, p.k, p.groups, p.offsets != nullptr));
}

bool gemm_bf16_parts_fit(const Bf16Gemm& p) {
  if (p.parts < 1 || p.parts > kMaxBf16Parts || p.groups != 1) return false;
  for (int i = 0; i < p.parts; ++i)
    if (!gemm_bf16_fits(p.part_list[i].n, p.k) || p.part_list[i].ldy % 2 != 0) return false;
  if (!p.offsets && (p.m > 16 || p.k % 128 != 0)) return false;
  Bf16Gemm q = p;
  return lay_out_parts(q) >= 0;
}

int64_t gemm_bf16_workspace(const Bf16Gemm& p) {
  if (p.parts > 0) {
    Bf16Gemm q = p;
    return std::max<int64_t>(lay_out_parts(q), 0);
  }
  const int64_t S = ceil_div(p.k, gemm_bf16_split(p));
  return S > 1 && rows_per_tile(p) <= kSplitRowsMax ? S * p.groups * static_cast<int64_t>(p.m) * p.n : 0;
}

// Grouped products keep the bf16 copy: their blocks run many k slices, and the float32 loads'
// latency (waited for once per slice) made the experts 10% slower at one token.
bool gemm_bf16_takes_f32(const Bf16Gemm& p) { return !p.offsets && rows_per_tile(p) <= 16 && p.k % 128 == 0; }

void gemm_bf16(const Bf16Gemm& pin, cudaStream_t s) {
  Bf16Gemm p = pin;
  p.stream_w = false;  // the decode tiling's choice (below)
  if (p.parts > 0) {
    if (!gemm_bf16_parts_fit(p) || (lay_out_parts(p) > 0 && !p.part)) {
      std::fprintf(stderr, "deepinfer: gemm_bf16: %d products do not fit one launch\n", p.parts);
      std::abort();
    }
    if (p.m == 0) return;
    p.n = p.part_list[0].n;  // the tiling below reads only rows, k and the grouping
  }
  if (p.m == 0 || p.n == 0) return;
  if (p.x_f32 && !gemm_bf16_takes_f32(p)) {
    std::fprintf(stderr, "deepinfer: gemm_bf16 reads float32 x only in its decode tiling\n");
    std::abort();
  }
  if (p.x_rows && (!p.offsets || p.x_f32)) {  // (read after the grouped launch's programmatic wait, through bf16 x)
    std::fprintf(stderr, "deepinfer: gemm_bf16 gathers rows only for grouped products of bf16 x\n");
    std::abort();
  }
  // By the rows per tile (the rows per expert, or the product's rows): up to 16 (decode), 16-row
  // tiles over 64 columns and wide k slices, to keep enough weight bytes in flight; up to 128,
  // 64 x 128 tiles; more, warpgroup products on 128 x 256 tiles, 128 x 128 where k segments fold
  // (the second set of accumulators), or without wgmma mma.sync on 128 x 128 (64 x 128 where
  // they fold: 216 registers at 128 x 128 had left one block per SM). Products split through
  // the workspace take 64 x 128 (below). Every configuration gives the same bits (see the top).
  const int64_t per_tile = rows_per_tile(p);
  // Split over k into blocks of their own (a workspace, up to kSplitRowsMax rows): 64 x 128
  // tiles, whose last blocks add the partial sums with every load in flight (measured at 256
  // rows: 128 x 128 tiles took 50-90 us for products of a few MB, the sums' loads one by one).
  // Otherwise the segments fold in registers: a workspace given to a product of more rows goes
  // unused (it may be smaller than the split would need).
  const bool split = gemm_bf16_split(p) < p.k && p.part && per_tile <= kSplitRowsMax;
  if (!split && p.parts == 0) p.part = nullptr;
  const bool fold = gemm_bf16_split(p) < p.k && !p.part;
  if (per_tile <= 16) {
    // Launches of at most 16 rows read each weight once: an L2 evict_first policy keeps them
    // from displacing what is reused (activations, partial sums, the KV rows, the next products'
    // inputs). Measured 6.13 -> 5.98 ms a batch-1 step (runs 103, 106); the experts' products at
    // batch 64 (448 rows over 64 experts) were 0.6 ms a step slower with it (run 106).
    p.stream_w = p.m <= 16;
    if (p.k % 128 != 0) return launch_gemm<16, 64, 32, 1, 4, 8>(p, s);
    // Dense: 2 stages (44 KB of shared memory; four blocks per SM, by registers) measured 1%
    // faster over a batch-1 step than 3 (runs 106, 108), which had been 11% faster than 4 (two per SM).
    if (!p.offsets) return p.x_f32 ? launch_gemm<16, 64, 128, 1, 4, 2, true>(p, s) : launch_gemm<16, 64, 128, 1, 4, 2>(p, s);
    // Grouped, by k: long ones (the experts' up projection, k = hidden = 5120) keep 4 stages
    // (3 were 8% slower); short ones (their down projection, k = the expert width = 2304) take 3,
    // three blocks per SM instead of two: at one token its 640 blocks are 1.6 waves instead of
    // 2.4 (batch 1 -0.06 ms, batch 64 -0.6 ms; runs 103, 106).
    if (p.k < 4096) return launch_gemm<16, 64, 128, 1, 4, 3>(p, s);
    return launch_gemm<16, 64, 128, 1, 4, 4>(p, s);
  } else if (p.k % 64 != 0) {
    launch_gemm<128, 128, 32, 2, 4, 4>(p, s);
  } else if (per_tile <= 128 || split || (fold && !wgmma_enabled())) {
    launch_gemm<64, 128, 64, 2, 4, 4>(p, s);
  } else if (wgmma_enabled()) {
    // Warpgroup products (unless DEEPINFER_CUDA_WGMMA=0), 4 stages, one block per SM: 128 x 256
    // (193 KB of shared memory), or 128 x 128 (129 KB) where the k segments fold.
    if (fold) launch_gemm<128, 128, 64, 8, 1, 4, false, true>(p, s);
    else launch_gemm<128, 256, 64, 8, 1, 4, false, true>(p, s);
  } else {
    launch_gemm<128, 128, 64, 2, 4, 3>(p, s);
  }
}

}  // namespace deepinfer::kernels::cuda
