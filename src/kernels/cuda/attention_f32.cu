// CUDA attention in float32 (attention.cu dispatches): the first version, a warp per (query,
// head), the fallback for shapes the tiled kernel does not cover; and the tiled kernel, a CTA
// per (query, 32 heads, split) walking its visible entries in tiles of 32 staged in shared
// memory (cp.async, double-buffered), Q in registers, an online softmax per head started from
// the sink, float32 FMA throughout (attention.cu's top comment has the whole design).
#include <algorithm>
#include <cstdlib>

#include "kernels/cuda/attention.cuh"

namespace deepinfer::kernels::cuda {

namespace {

using namespace detail;

// ---------------------------------------------------------------------------------------
// First version (fallback).

constexpr int kMaxHeadDim = 1024;  // per-lane registers: head_dim / 32 values

__global__ void attention_k(AttentionArgs a) {
  DI_PDL_ENTRY();
  const int64_t warp = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= a.s * a.heads) return;
  const int64_t t = warp / a.heads, h = warp % a.heads, d = a.head_dim, per = d / 32;
  const float* q = a.q + warp * d;
  const int64_t p = a.q_pos[t];
  float acc[kMaxHeadDim / 32];
  for (int64_t i = 0; i < per; ++i) acc[i] = 0.0f;
  float mx = a.sink[h], den = 1.0f;  // the sink starts the running softmax (its exp term = 1 at mx)
  auto visit = [&](const float* k) {
    float dt = 0.0f;
    for (int64_t i = 0; i < per; ++i) dt += q[lane + 32 * i] * k[lane + 32 * i];
    const float l = warp_sum(dt) * a.scale;
    const float nm = fmaxf(mx, l), cold = expf(mx - nm), e = expf(l - nm);
    den = den * cold + e;
    for (int64_t i = 0; i < per; ++i) acc[i] = acc[i] * cold + e * k[lane + 32 * i];
    mx = nm;
  };
  const QueryEntries e = entries_of(a, t);
  for (int64_t j = 0; j < e.t_win; ++j) {
    const int64_t kp = e.win_pos[j];
    if (kp > p || kp <= p - a.window) continue;
    visit(e.win + j * d);
  }
  if (e.sel)
    for (int64_t j = 0; j < e.t_comp; ++j)
      if (e.sel[j]) visit(e.comp + j * d);
  for (int64_t i = 0; i < per; ++i) a.out[warp * d + lane + 32 * i] = acc[i] / den;
}

// ---------------------------------------------------------------------------------------
// Attention: a CTA per (query, 32 heads, split).
//
// Thread layout (per warp w of NW, lane = hg * 8 + dg): the lane holds, for the 8 heads
// hg*8 .. hg*8+7 of the CTA, the DW channels d(i) = w*8*DW + 4*dg + (i & 3) + 32*(i >> 2) of
// the query (registers q) and of the output accumulator (registers o). A warp covers 8*DW
// channels, the NW warps the whole head dimension D = NW * 8 * DW.

// One head's online-softmax step over a tile (lane = entry, sv = its scaled score, -inf past
// ne): returns the lane's weight e^(sv - m_new); lane 0 updates the head's running max m, sum l
// and the factor alpha its accumulator is rescaled by.
__device__ inline float softmax_tile_step(float sv, int lane, int ne, float* m, float* l, float* alpha) {
  const float mo = *m, mn = fmaxf(mo, warp_max(sv));
  const float pe = lane < ne && mn != -INFINITY ? expf(sv - mn) : 0.0f;  // nothing finite yet: no weight
  const float ls = warp_sum(pe);  // every lane has read *m: the shuffles synchronise the warp
  if (lane == 0) {
    const float al = mo == mn ? 1.0f : expf(mo - mn);
    *alpha = al;
    *l = *l * al + ls;
    *m = mn;
  }
  return pe;
}

template <int DW, int NW>
struct AttnCfg {
  static constexpr int D = NW * 8 * DW, T = NW * 32;
  static constexpr int kOff = 0;                                            // [2][TN][D]
  static constexpr int partOff = 2 * kAttnTile * D;                         // [NW][HC][TN+1]
  static constexpr int pOff = partOff + NW * kAttnHeads * (kAttnTile + 1);  // [TN][HC+4]
  static constexpr int alphaOff = pOff + kAttnTile * (kAttnHeads + 4);      // [HC]
  static constexpr int mOff = alphaOff + kAttnHeads;                        // [HC]
  static constexpr int lOff = mOff + kAttnHeads;                            // [HC]
  static constexpr int listOff = lOff + kAttnHeads;                         // [LCAP] int
  static constexpr int scanOff = listOff + kAttnListCap;                    // [64] int
  static constexpr size_t bytes = static_cast<size_t>(scanOff + 64) * 4;
  static_assert(pOff % 4 == 0 && alphaOff % 4 == 0, "float4 alignment");
  static_assert(DW == 4 || DW == 8, "DW");
};

template <int DW, int NW>
__global__ void __launch_bounds__(NW * 32, 1)
    attention_tiled_k(AttentionArgs a, int nsplit, float* part_o, float* part_ml, int64_t t_base) {
  DI_PDL_ENTRY();
  using C = AttnCfg<DW, NW>;
  constexpr int D = C::D, T = C::T, HC = kAttnHeads, TN = kAttnTile;
  extern __shared__ __align__(16) float smem[];
  float* s_k = smem + C::kOff;
  float* s_part = smem + C::partOff;
  float* s_p = smem + C::pOff;
  float* s_alpha = smem + C::alphaOff;
  float* s_m = smem + C::mOff;
  float* s_l = smem + C::lOff;
  int* s_list = reinterpret_cast<int*>(smem + C::listOff);
  int* s_scan = reinterpret_cast<int*>(smem + C::scanOff);

  const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, dg = lane & 7, hg = lane >> 3;
  const int64_t tl = blockIdx.x, t = t_base + tl;  // local (partials) and global query row
  const int64_t h0 = static_cast<int64_t>(blockIdx.y) * HC;
  const int split = static_cast<int>(blockIdx.z);
  const int64_t heads = a.heads;
  const int64_t p = a.q_pos[t];
  const QueryEntries qe = entries_of(a, t);
  const int64_t c_win = qe.t_win;
  const uint8_t* sel = qe.sel;
  const int64_t c_all = c_win + (sel ? qe.t_comp : 0);
  auto visible = [&](int64_t c) { return visible_entry(a, qe, p, c); };

  // The range of visible-entry ordinals this split handles (empty past the last entry).
  VisibleList<T> vl;
  start_split(vl, a, nsplit, split, c_all, h0, HC, s_m, s_l);

  // q row j holds head hg*8 + (j ^ dg) (a per-lane rotation that makes the reduce-scatter
  // below select-free); o row j holds head hg*8 + j.
  const int dbase = w * 8 * DW + 4 * dg;
  float q[8][DW], o[8][DW];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int64_t hh = h0 + hg * 8 + (j ^ dg);
    if (hh < heads) {
      const float* src = a.q + (t * heads + hh) * D + dbase;
      ld4(&q[j][0], src);
      if constexpr (DW == 8) ld4(&q[j][4], src + 32);
    } else {
#pragma unroll
      for (int i = 0; i < DW; ++i) q[j][i] = 0.0f;
    }
#pragma unroll
    for (int i = 0; i < DW; ++i) o[j][i] = 0.0f;
  }
  __syncthreads();  // s_scan reads done, s_m / s_l written

  while (vl.next(visible, s_list, s_scan)) {
    const int n_list = vl.n_list;
    const bool last_batch = vl.exhausted();
    const int ntiles = vl.tiles(TN);

    auto issue = [&](int tile, int buf) {
      const int e0 = tile * TN, ne = min(TN, n_list - e0);
      float* dst = s_k + buf * TN * D;
      constexpr int CPR = D / 4;
      for (int idx = tid; idx < ne * CPR; idx += T) {
        const int e = idx / CPR, c4 = idx - e * CPR;
        const int c = s_list[e0 + e];
        const float* src = (c < c_win ? qe.win + static_cast<int64_t>(c) * D : qe.comp + (static_cast<int64_t>(c) - c_win) * D) + c4 * 4;
        cp_async16(dst + e * D + c4 * 4, src);
      }
      cp_async_commit();
    };

    issue(0, 0);
    for (int tile = 0; tile < ntiles; ++tile) {
      const int buf = tile & 1, ne = min(TN, n_list - tile * TN);
      cp_async_wait<0>();
      __syncthreads();  // tile in shared memory; the previous tile's readers are done
      if (tile + 1 < ntiles) issue(tile + 1, buf ^ 1);
      const float* kt = s_k + buf * TN * D + dbase;

      // Partial scores over this warp's channels, reduce-scattered over the 8 dg lanes: v[j] is
      // head j ^ dg, the partner across bit b sends its v[b + j] = the same head, and the lane
      // ends with head hg*8 + dg = lane.
#pragma unroll 2
      for (int e = 0; e < ne; ++e) {
        float kv[DW];
        ld4(&kv[0], kt + e * D);
        if constexpr (DW == 8) ld4(&kv[4], kt + e * D + 32);
        float v[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          float acc = 0.0f;
#pragma unroll
          for (int i = 0; i < DW; ++i) acc = fmaf(q[j][i], kv[i], acc);
          v[j] = acc;
        }
        float u[4], x[2];
#pragma unroll
        for (int j = 0; j < 4; ++j) u[j] = v[j] + __shfl_xor_sync(kFull, v[4 + j], 4);
#pragma unroll
        for (int j = 0; j < 2; ++j) x[j] = u[j] + __shfl_xor_sync(kFull, u[2 + j], 2);
        s_part[(w * HC + lane) * (TN + 1) + e] = x[0] + __shfl_xor_sync(kFull, x[1], 1);
      }
      __syncthreads();

      // Online softmax: warp w owns heads w, w + NW, ...; lane = entry of the tile.
#pragma unroll
      for (int k2 = 0; k2 < HC / NW; ++k2) {
        const int hh = w + k2 * NW;
        float sv = -INFINITY;
        if (lane < ne) {
          float acc = 0.0f;
#pragma unroll
          for (int ww = 0; ww < NW; ++ww) acc += s_part[(ww * HC + hh) * (TN + 1) + lane];
          sv = acc * a.scale;
        }
        s_p[lane * (HC + 4) + hh] = softmax_tile_step(sv, lane, ne, s_m + hh, s_l + hh, s_alpha + hh);
      }
      __syncthreads();

      // acc = acc * alpha + P · V_tile.
      {
        float al[8];
        ld4(&al[0], s_alpha + hg * 8);
        ld4(&al[4], s_alpha + hg * 8 + 4);
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
          for (int i = 0; i < DW; ++i) o[j][i] *= al[j];
        const float* pp = s_p + hg * 8;
#pragma unroll 4
        for (int e = 0; e < ne; ++e) {
          float pv[8], kv[DW];
          ld4(&pv[0], pp + e * (HC + 4));
          ld4(&pv[4], pp + e * (HC + 4) + 4);
          ld4(&kv[0], kt + e * D);
          if constexpr (DW == 8) ld4(&kv[4], kt + e * D + 32);
#pragma unroll
          for (int j = 0; j < 8; ++j)
#pragma unroll
            for (int i = 0; i < DW; ++i) o[j][i] = fmaf(pv[j], kv[i], o[j][i]);
        }
      }
    }
    vl.drop(min(n_list, ntiles * TN), s_list);
    if (last_batch) break;
  }
  __syncthreads();

#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int hl = hg * 8 + j;
    const int64_t hh = h0 + hl;
    if (hh >= heads) continue;
    if (nsplit == 1) {
      const float l = s_l[hl];
      float* dst = a.out + (t * heads + hh) * D + dbase;
      st4(dst, o[j][0] / l, o[j][1] / l, o[j][2] / l, o[j][3] / l);
      if constexpr (DW == 8) st4(dst + 32, o[j][4] / l, o[j][5] / l, o[j][6] / l, o[j][7] / l);
    } else {
      float* dst = part_o + ((tl * nsplit + split) * heads + hh) * D + dbase;
      st4(dst, o[j][0], o[j][1], o[j][2], o[j][3]);
      if constexpr (DW == 8) st4(dst + 32, o[j][4], o[j][5], o[j][6], o[j][7]);
    }
  }
  if (nsplit > 1) store_split_ml<T>(part_ml, tl, nsplit, split, heads, h0, HC, s_m, s_l);
}

template <int DW, int NW>
void launch_attention_tiled(const AttentionArgs& a, Temp& tmp, Stream s) {
  using C = AttnCfg<DW, NW>;
  opt_in_smem(attention_tiled_k<DW, NW>, C::bytes);
  launch_attention(kAttnHeads, a, tmp, s, [&](dim3 g, int nsplit, float* po, float* pml, int64_t q0) {
    launch_k(attention_tiled_k<DW, NW>, g, C::T, C::bytes, s, a, nsplit, po, pml, q0);
  });
}

}  // namespace

namespace detail {

bool attention_tiled(const AttentionArgs& a, Temp& tmp, Stream s) {
  switch (a.head_dim) {
    case 32: launch_attention_tiled<4, 1>(a, tmp, s); return true;
    case 64: launch_attention_tiled<8, 1>(a, tmp, s); return true;
    case 128: launch_attention_tiled<8, 2>(a, tmp, s); return true;
    case 256: launch_attention_tiled<8, 4>(a, tmp, s); return true;
    case 512: launch_attention_tiled<8, 8>(a, tmp, s); return true;
    default: return false;
  }
}

void attention_simple(const AttentionArgs& a, Stream s) {
  if (a.head_dim % 32 != 0 || a.head_dim > kMaxHeadDim) {
    std::fprintf(stderr, "deepinfer: CUDA attention needs head_dim a multiple of 32 up to %d, got %lld\n", kMaxHeadDim,
                 static_cast<long long>(a.head_dim));
    std::abort();
  }
  launch_k(attention_k, grid(a.s * a.heads * 32), kThreads, 0, s, a);
  DI_CUDA_LAUNCHED();
}

}  // namespace detail

}  // namespace deepinfer::kernels::cuda
