// CUDA: shared-latent attention (window + selected compressed entries, sink).
//
// attention: one CTA per (query, block of 32 heads[, split of the visible entries]). The CTA
// first compacts the indices of the entries its query sees (window ∪ selected compressed) into
// shared memory, then walks them in tiles of 32 entries staged in shared memory (cp.async,
// double-buffered) and shared by all its heads: scores = Q·K_tileᵀ (Q in registers, the lanes
// split the head dimension, a reduce-scatter across lanes and warps), an online softmax per
// head started from the sink, then acc += P·V_tile (V = K: the same tile). Float32 FMA
// throughout. The visible entries split at fixed segments, combined afterwards (by a combine
// kernel, or inside a cluster of the query's CTAs, or in the CTA that runs them all). The first
// version (a warp per (query, head)) stays as the fallback for shapes the tiled kernel does
// not cover (DEEPINFER_CUDA_LEGACY=1 forces it). On a bf16 backend the same CTA structure runs
// on the tensor cores (attention_mma_k: bf16 mma.sync, float32 softmax and accumulation).
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdlib>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/packed.cuh"
#include "kernels/cuda/tiling.cuh"

#include <cooperative_groups.h>

namespace deepinfer::kernels::cuda {

namespace cg = cooperative_groups;

namespace {

using namespace detail;

// ---------------------------------------------------------------------------------------
// First versions (fallback; DEEPINFER_CUDA_LEGACY=1).

constexpr int kMaxHeadDim = 1024;  // per-lane registers: head_dim / 32 values

// The entries query t sees: the call's, or its sequence's in a multi-sequence call.
struct QueryEntries {
  const float* win;
  const int64_t* win_pos;
  const float* comp;
  const uint8_t* sel;  // the query's selection row, or null
  int64_t t_win, t_comp;
};
__device__ inline QueryEntries entries_of(const AttentionArgs& a, int64_t t) {
  if (a.seqs) {
    const AttentionSeq e = a.seqs[a.q_seq[t]];
    return {e.win, e.win_pos, e.comp, (e.comp && e.comp_sel) ? e.comp_sel + (t - e.q0) * e.t_comp : nullptr, e.t_win,
            e.t_comp};
  }
  return {a.win, a.win_pos, a.comp, (a.comp && a.comp_sel) ? a.comp_sel + t * a.t_comp : nullptr, a.t_win, a.t_comp};
}

// Whether candidate c (window entries first, then compressed ones) is visible to a query at
// position p: a window entry inside (p - window, p], or a selected compressed entry.
__device__ inline int visible_entry(const AttentionArgs& a, const QueryEntries& qe, int64_t p, int64_t c) {
  if (c < qe.t_win) {
    const int64_t kp = qe.win_pos[c];
    return (kp <= p && kp > p - a.window) ? 1 : 0;
  }
  return qe.sel[c - qe.t_win] != 0 ? 1 : 0;
}

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

constexpr int kAttnHeads = 32;   // heads per CTA
constexpr int kAttnTile = 32;    // entries per shared-memory tile (= lanes, for the softmax)
constexpr int kAttnPerThread = 4;  // candidates per thread per compaction round
constexpr int kAttnListCap = 4096;  // compacted entry indices held in shared memory
// Splits of the visible entries are fixed segments of kAttnSeg ordinals (a multiple of the
// tile), whatever the launch: a query's arithmetic (tiles, segments, the combine) depends only
// on its own visible entries, never on the chunk or the batch it came in (batch invariance).
// 128: a decode query of the released shape (window 128, 512 selected) spreads over 5 splits of
// 16 CTAs instead of 2, each running at most two 64-entry tiles instead of eight, one after the
// other (batch-1 step 6.14 -> 5.87 ms, run 108). Launches of many queries fold the splits in
// their CTAs (attention_mma_k), which makes the finer segments nearly free there (prefill 1.20
// -> 1.24 s against 512-entry segments, both folded; run 111).
constexpr int kAttnSeg = 128;
constexpr int64_t kAttnGroup = 256;  // queries per launch when split (bounds the partials),
constexpr int64_t kAttnPartialFloats = int64_t{1} << 26;  // and at most this many floats of them

// The indices of the entries a query sees (window first, then its selected compressed entries),
// compacted in ascending order into shared memory a batch at a time: the visible-entry ordinals
// [lo, hi) of the query's segment, at most CAP held. T threads, R candidates each per round;
// s_scan holds T / 32 ints.
template <int T, int CAP = kAttnListCap>
struct VisibleList {
  static constexpr int R = kAttnPerThread, CH = T * R, NW = T / 32;
  int64_t cand, ord, base_ord, lo, hi, c_all;
  int n_list;

  // A batch that is not the last holds at least one whole tile of up to 64 entries (else a
  // round could add nothing).
  static_assert(CAP >= CH + 64, "list capacity");
  __device__ void start(int64_t lo_, int64_t hi_, int64_t c_all_) {
    lo = lo_;
    hi = hi_;
    c_all = c_all_;
    cand = lo < hi ? 0 : c_all;
    ord = 0;
    base_ord = lo;
    n_list = 0;
  }
  // Split `split` of nsplit: the visible-entry ordinals [split, split + 1) x kAttnSeg, the last
  // split taking every ordinal left (the launch's bound on the visible entries sizes the splits,
  // it never drops entries).
  __device__ void start_segment(int split, int nsplit, int64_t c_all_) {
    start(static_cast<int64_t>(split) * kAttnSeg, split + 1 < nsplit ? static_cast<int64_t>(split + 1) * kAttnSeg : INT64_MAX,
          c_all_);
  }
  __device__ bool exhausted() const { return cand >= c_all; }
  // The tiles of tn entries the held list gives now: all of them once the candidates are
  // exhausted (the last one partial), else the full ones (the rest wait for the next batch).
  __device__ int tiles(int tn) const { return exhausted() ? (n_list + tn - 1) / tn : n_list / tn; }
  // Appends visible entries after the n_list held, while the list has room for a round.
  template <class Vis>
  __device__ void fill(Vis visible, int* s_list, int* s_scan) {
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
    while (cand < c_all && n_list + CH <= CAP) {
      int f[R], cnt = 0;
      const int64_t cb = cand + static_cast<int64_t>(tid) * R;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        f[r] = cb + r < c_all ? visible(cb + r) : 0;
        cnt += f[r];
      }
      int incl = cnt;
#pragma unroll
      for (int off = 1; off < 32; off <<= 1) {
        const int y = __shfl_up_sync(kFull, incl, off);
        if (lane >= off) incl += y;
      }
      if (lane == 31) s_scan[w] = incl;
      __syncthreads();
      int64_t woff = 0, tot = 0;
      for (int ww = 0; ww < NW; ++ww) {
        const int v = s_scan[ww];
        if (ww < w) woff += v;
        tot += v;
      }
      int64_t od = ord + woff + incl - cnt;
#pragma unroll
      for (int r = 0; r < R; ++r)
        if (f[r]) {
          if (od >= lo && od < hi) s_list[od - base_ord] = static_cast<int>(cb + r);
          ++od;
        }
      ord += tot;
      cand += CH;
      if (ord >= hi) cand = c_all;
      n_list = static_cast<int>(max(int64_t{0}, min(ord, hi) - base_ord));
      __syncthreads();  // list visible; s_scan free again
    }
  }
  // fill(), then whether any entry is held.
  template <class Vis>
  __device__ bool next(Vis visible, int* s_list, int* s_scan) {
    fill(visible, s_list, s_scan);
    return n_list > 0;
  }
  // The first `done` entries are consumed: the rest move to the front.
  __device__ void drop(int done, int* s_list) {
    const int left = n_list - done;
    __syncthreads();
    for (int i = threadIdx.x; i < left; i += T) s_list[i] = s_list[done + i];  // done >= a tile > left: no overlap
    __syncthreads();
    base_ord += done;
    n_list = left;
  }
};

// A CTA's start: its split's segment of visible-entry ordinals, and each of its hc heads'
// running softmax started from the sink (split 0) or empty (the other splits; the combine merges).
template <int T>
__device__ void start_split(VisibleList<T>& vl, const AttentionArgs& a, int nsplit, int split, int64_t c_all, int64_t h0,
                            int hc, float* s_m, float* s_l) {
  vl.start_segment(split, nsplit, c_all);
  for (int h = threadIdx.x; h < hc; h += T) {
    const bool valid = h0 + h < a.heads;
    s_m[h] = split == 0 ? (valid ? a.sink[h0 + h] : 0.0f) : -INFINITY;
    s_l[h] = split == 0 ? 1.0f : 0.0f;
  }
}

// A split's softmax state (m, l) per head, for the combine.
template <int T>
__device__ void store_split_ml(float* part_ml, int64_t tl, int nsplit, int split, int64_t heads, int64_t h0, int hc,
                               const float* s_m, const float* s_l) {
  for (int h = threadIdx.x; h < hc; h += T)
    if (h0 + h < heads) {
      float* ml = part_ml + ((tl * nsplit + split) * heads + h0 + h) * 2;
      ml[0] = s_m ? s_m[h] : -INFINITY;
      ml[1] = s_l ? s_l[h] : 0.0f;
    }
}

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

// The merge of a split's softmax state (m, l, o) into the running one (M, L, O) of the splits
// before it, in split order: the combine kernel's and the folding tensor-core kernel's one
// arithmetic (rounded products and sums, never contracted), so a query's bits do not depend on
// which of the two merged its splits.
__device__ __forceinline__ void merge_scale(float& M, float m, float& f_old, float& f_new) {
  const float Mn = fmaxf(M, m);
  f_old = expf(M - Mn);
  f_new = expf(m - Mn);
  M = Mn;
}
__device__ __forceinline__ float merge_term(float acc, float f_old, float v, float f_new) {
  return __fadd_rn(__fmul_rn(acc, f_old), __fmul_rn(v, f_new));
}

// Output channels (col, col + 1) (col even) of query t as stored: rotated back by the query's
// angles when the call carries the queries' RoPE (AttentionArgs.q_cos; rope_k's inverse).
__device__ __forceinline__ float2 out_pair(const AttentionArgs& a, int64_t t, int64_t col, float e, float o) {
  const int64_t r0 = a.head_dim - a.rope_dim;
  if (a.q_cos && col >= r0) {
    const int64_t half = a.rope_dim / 2, p = t * half + (col - r0) / 2;
    rope_pair(e, o, a.q_cos[p], -a.q_sin[p]);
  }
  return make_float2(e, o);
}

// Merges the splits' partial softmaxes in split order from split 0's (which holds the sink: m
// finite); empty splits (m = -inf) are skipped, so a query whose entries fit one segment gets
// exactly the unsplit kernel's o / l. A thread per pair of channels.
__global__ void attention_combine_k(AttentionArgs a, int nsplit, const float* part_o, const float* part_ml, int64_t t_base) {
  DI_PDL_ENTRY();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t D = a.head_dim;
  if (i >= a.s * a.heads * D / 2) return;
  const int64_t d = 2 * i % D, sh = 2 * i / D, t = sh / a.heads, hh = sh % a.heads;
  const int64_t r0 = t * nsplit * a.heads + hh;
  float M = part_ml[r0 * 2], L = part_ml[r0 * 2 + 1], O0 = part_o[r0 * D + d], O1 = part_o[r0 * D + d + 1];
  for (int k = 1; k < nsplit; ++k) {
    const int64_t r = (t * nsplit + k) * a.heads + hh;
    const float m = part_ml[r * 2];
    if (m == -INFINITY) continue;
    float fo, fn;
    merge_scale(M, m, fo, fn);
    L = merge_term(L, fo, part_ml[r * 2 + 1], fn);
    O0 = merge_term(O0, fo, part_o[r * D + d], fn);
    O1 = merge_term(O1, fo, part_o[r * D + d + 1], fn);
  }
  *reinterpret_cast<float2*>(a.out + (t_base * a.heads + sh) * D + d) = out_pair(a, t_base + t, d, O0 / L, O1 / L);
}

// ---------------------------------------------------------------------------------------
// Attention on the tensor cores (bf16 backends). The entries are first rounded to bf16 into one
// staging buffer (entries_bf16_k: each sequence's window rows, then its compressed rows, from
// the sequence's first row e0; the float32 kernels' rounding of K, done once per entry instead
// of once per query), so a tile of TN = 64 entries goes to shared memory by cp.async as it is,
// the next tile loading while this one computes. A CTA of 8 warps per (query, HC heads, split),
// or per (query, HC heads) running the query's splits one after the other (fold), HC = 64, 32
// or 16 (MT = HC / 16 mma row tiles, DG = 8 / MT warps per row tile):
// - S = Q·Kᵀ by mma.sync: warp w computes heads 16 (w % MT) .. +16 x entries SE (w / MT) ..
//   +SE (SE = TN / DG) over the whole head dimension, into shared memory (Q rounded to bf16 there);
// - every warp takes back its 16 heads' whole rows (TN entries) in the mma accumulator layout
//   and runs the online softmax in registers (a row's four lanes reduce by two shuffles, every
//   lane ending with the same bits), started from the sink;
// - P, rounded to bf16, is the A operand of O = O·alpha + P·V straight from registers (warp w:
//   channels D/DG (w / MT) .. +D/DG; V = K, the same tile, read transposed by ldmatrix).
// A score is one chain of mma steps over the head dimension, a row's softmax the same quad
// arithmetic and an output element one chain of mma steps over the entries whatever HC, so HC
// changes the CTAs, never the bits: fewer heads per CTA spread a few queries over more SMs. The
// visible-entry lists and segments are the float32 kernel's, and the splits merge by the
// combine's arithmetic (merge_scale / merge_term) in the combine kernel, in split 0's CTA of a
// cluster (CL: decode launches), or, folding, in the CTA, so a query's arithmetic depends only
// on its own entries.
constexpr int kMmaTile = 64, kMmaWarps = 8, kMmaT = kMmaWarps * 32, kMmaListCap = 2048;
constexpr size_t kMaxSmemPerBlock = 227 * 1024;  // sm_90's opt-in limit

template <int D, int HC>
struct MmaCfg {
  static constexpr int QS = D + 8, SS = kMmaTile + 8;                       // row strides (bf16, f32)
  static constexpr size_t qOff = 0;                                          // bf16 [HC][QS]
  static constexpr size_t kOff = qOff + size_t{HC} * QS * 2;                 // bf16 [2][TN][QS]
  static constexpr size_t sOff = kOff + size_t{2} * kMmaTile * QS * 2;       // f32 [HC][SS]
  static constexpr size_t listOff = sOff + size_t{HC} * SS * 4;              // int [kMmaListCap]
  static constexpr size_t scanOff = listOff + size_t{kMmaListCap} * 4;       // int [warps]
  static constexpr size_t bytes = scanOff + size_t{kMmaWarps} * 4;
  static_assert(D % 16 == 0 && kOff % 16 == 0 && sOff % 16 == 0, "alignment");
};

// 4 floats -> 4 bf16 (round to nearest even) at dst.
__device__ __forceinline__ void st_bf16x4(__nv_bfloat16* dst, float4 v) {
  *reinterpret_cast<uint2*>(dst) = make_uint2(pack_bf16(v.x, v.y), pack_bf16(v.z, v.w));
}

// The rows a query can see, staged: window rows first, then the compressed rows when a
// selection may name them (the kernels' entries_of rule).
struct StagedRows {
  const float* win;
  const uint8_t *win_codes, *win_scales;  // packed windows (win_block > 0)
  const float* comp;
  int64_t t_win, t_comp;
};
__device__ inline StagedRows staged_rows(const AttentionArgs& a, int64_t si) {
  if (a.seqs) {
    const AttentionSeq& e = a.seqs[si];
    return {e.win, e.win_codes, e.win_scales, e.comp, e.t_win, (e.comp && e.comp_sel) ? e.t_comp : 0};
  }
  return {a.win, nullptr, nullptr, a.comp, a.t_win, (a.comp && a.comp_sel) ? a.t_comp : 0};
}

// With at most this many queries in the call (decode), only the compressed rows some query of
// the sequence selected are staged (the tensor-core kernel reads no other row: at 4k tokens and
// ratio 1, 512 of 4096); the rest of their room is left as it was.
constexpr int64_t kStageSelectedQueries = 8;
__device__ inline bool comp_row_selected(const AttentionArgs& a, int64_t si, int64_t j) {
  if (a.s > kStageSelectedQueries) return true;
  const uint8_t* sel = a.seqs ? a.seqs[si].comp_sel : a.comp_sel;
  const int64_t q0 = a.seqs ? a.seqs[si].q0 : 0, tc = a.seqs ? a.seqs[si].t_comp : a.t_comp;
  for (int64_t t = 0; t < a.s; ++t)
    if ((!a.seqs || a.q_seq[t] == si) && sel[(t - q0) * tc + j]) return true;
  return false;
}

// Block (chunk, sequence si): the sequence's first row e0 = the staged rows of the sequences
// before it (written to seq_e0 by the chunk-0 block), then its rows rounded to bf16 at e0.
__global__ void entries_bf16_k(AttentionArgs a, __nv_bfloat16* out, int64_t cap, int64_t* seq_e0) {
  DI_PDL_ENTRY();
  const int64_t si = blockIdx.y, D = a.head_dim, C8 = D / 8;
  __shared__ long long s_part[kThreads / 32];
  long long before = 0;
  for (int64_t i = threadIdx.x; i < si; i += blockDim.x) {
    const StagedRows r = staged_rows(a, i);
    before += r.t_win + r.t_comp;
  }
  const int64_t e0 = block_sum_ordered(before, s_part);
  const StagedRows r = staged_rows(a, si);
  const int64_t n = r.t_win + r.t_comp;
  if (e0 + n > cap) __trap();  // AttentionArgs.total_entries below the truth
  if (blockIdx.x == 0 && threadIdx.x == 0 && seq_e0) seq_e0[si] = e0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n * C8;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = i / C8, c8 = i - row * C8;
    if (row >= r.t_win && !comp_row_selected(a, si, row - r.t_win)) continue;
    __nv_bfloat16* dst = out + (e0 + row) * D + c8 * 8;
    if (row < r.t_win && a.seqs && a.win_block > 0) {  // a packed window row: decoded as dequant_packed does
      float v[8];
      fp8_pow2_at8(r.win_codes + row * D, r.win_scales + row * (D / a.win_block), c8, a.win_block, v);
      *reinterpret_cast<uint4*>(dst) = pack_bf16x8(make_float4(v[0], v[1], v[2], v[3]), make_float4(v[4], v[5], v[6], v[7]));
      continue;
    }
    const float* src = (row < r.t_win ? r.win + row * D : r.comp + (row - r.t_win) * D) + c8 * 8;
    *reinterpret_cast<uint4*>(dst) = pack_bf16x8(*reinterpret_cast<const float4*>(src), *reinterpret_cast<const float4*>(src + 4));
  }
}

// Packed windows for the float32 kernels: block (chunk, sequence si) dequantises the sequence's
// window into wins from row e0 = the window rows of the sequences before it (dequant_packed's
// values), and the chunk-0 block writes its AttentionSeq there with win set.
__global__ void unpack_windows_k(AttentionArgs a, AttentionSeq* seqs, float* wins, int64_t cap) {
  DI_PDL_ENTRY();
  const int64_t si = blockIdx.y, D = a.head_dim;
  __shared__ long long s_part[kThreads / 32];
  long long before = 0;
  for (int64_t i = threadIdx.x; i < si; i += blockDim.x) before += a.seqs[i].t_win;
  const int64_t e0 = block_sum_ordered(before, s_part);
  const AttentionSeq e = a.seqs[si];
  if (e0 + e.t_win > cap) __trap();  // the rows' bound (AttentionArgs.total_entries) below the truth
  float* win = wins + e0 * D;
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    AttentionSeq u = e;
    u.win = win;
    u.win_codes = u.win_scales = nullptr;
    seqs[si] = u;
  }
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < e.t_win * D;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dequant_packed_at(static_cast<int>(FakeQuant::kFp8Pow2), e.win_codes, e.win_scales, win, i, a.win_block);
}

// DS: the output channels split over DS CTAs (grid y = head block x DS), each computing the
// same scores and softmax and its D / DS channels of P·V: more CTAs for a few queries, the
// same bits (every element is the same chain of mma steps).
// CL: the launch's clusters are each query's splits, merged in split 0's CTA (a template
// parameter: the merge's registers would cost the other launches, the 64-head fold spilling).
template <int D, int HC, int DS, bool CL = false>
__global__ void __launch_bounds__(kMmaT, 1)
    attention_mma_k(AttentionArgs a, const __nv_bfloat16* entries, const int64_t* seq_e0, int nsplit, bool fold,
                    float* part_o, float* part_ml, int64_t t_base) {
  // CL: the first phase of the cluster barrier, arrived at on entry and waited for before the
  // first store into another CTA's shared memory (which exists once every CTA has started).
  if constexpr (CL) asm volatile("barrier.cluster.arrive.relaxed;\n" ::: "memory");
  DI_PDL_ENTRY();
  using C = MmaCfg<D, HC>;
  constexpr int TN = kMmaTile, T = kMmaT, QS = C::QS, SS = C::SS;
  constexpr int MT = HC / 16, DG = kMmaWarps / MT, SE = TN / DG, NJ = SE / 8;  // S: a warp's n8 tiles
  constexpr int DC = D / DS / DG, NT = DC / 8, NS = TN / 8;  // P·V: a warp's channels and n8 tiles; a row's n8 tiles
  static_assert(HC % 16 == 0 && MT <= 4 && NT % 2 == 0 && (NJ == 1 || NJ % 2 == 0), "tiling");
  constexpr int C4 = D / 4, C8 = D / 8;  // float4 chunks of a query row, 16-byte chunks of an entry row
  static_assert(T % C8 == 0, "a thread's chunks of the entry rows share one column");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  auto* s_q = reinterpret_cast<__nv_bfloat16*>(smem_raw + C::qOff);
  auto* s_k = reinterpret_cast<__nv_bfloat16*>(smem_raw + C::kOff);
  auto* s_s = reinterpret_cast<float*>(smem_raw + C::sOff);
  auto* s_list = reinterpret_cast<int*>(smem_raw + C::listOff);
  auto* s_scan = reinterpret_cast<int*>(smem_raw + C::scanOff);
  // CL: split 0's CTA has, past C::bytes, a slot per other split (kMergeSlot floats: its o
  // [HC][D / DS], then (m, l) [HC][2]), which that split's CTA stores into.
  constexpr int kSlotO = HC * (D / DS), kMergeSlot = kSlotO + 2 * HC;
  float* merge_slots = reinterpret_cast<float*>(smem_raw + C::bytes);

  const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, mt = w % MT, grp = w / MT, quad = lane & 3;
  const int64_t tl = blockIdx.x, t = t_base + tl;
  const int64_t h0 = static_cast<int64_t>(blockIdx.y / DS) * HC, heads = a.heads;
  const int c0 = static_cast<int>(blockIdx.y % DS) * (D / DS);  // this CTA's first output channel
  // fold: this CTA runs every split of its query one after the other (grid z 1), merging each
  // into the running state in registers as the combine kernel would; else split blockIdx.z.
  const int split0 = fold ? 0 : static_cast<int>(blockIdx.z), split1 = fold ? nsplit : split0 + 1;
  const int64_t p = a.q_pos[t];
  const QueryEntries qe = entries_of(a, t);
  const int64_t c_win = qe.t_win, c_all = c_win + (qe.sel ? qe.t_comp : 0);
  const __nv_bfloat16* rows = entries + (a.seqs ? seq_e0[a.q_seq[t]] : 0) * D;
  auto visible = [&](int64_t c) { return visible_entry(a, qe, p, c); };
  for (int idx = tid; idx < HC * C4; idx += T) {
    const int h = idx / C4, c4 = idx - h * C4;
    const int64_t hh = h0 + h;
    float4 v = hh < heads ? *reinterpret_cast<const float4*>(a.q + (t * heads + hh) * D + c4 * 4)
                          : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (a.q_cos && c4 * 4 >= D - a.rope_dim) {  // the query's RoPE (rope_k's arithmetic; rope_dim % 4 == 0)
      const int64_t half = a.rope_dim / 2, ai = t * half + (c4 * 4 - (D - a.rope_dim)) / 2;
      rope_pair(v.x, v.y, a.q_cos[ai], a.q_sin[ai]);
      rope_pair(v.z, v.w, a.q_cos[ai + 1], a.q_sin[ai + 1]);
    }
    st_bf16x4(s_q + h * QS + c4 * 4, v);
  }

  const int r0 = mt * 16 + (lane >> 2);
  // f(j, hr, head, first channel) for each of this thread's output pairs: fragment j, row r0 + 8 hr.
  auto each_out = [&](auto&& f) {
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int64_t hh = h0 + r0 + 8 * hr;
        if (hh < heads) f(j, hr, hh, c0 + grp * DC + j * 8 + quad * 2);
      }
  };
  float Mt[2] = {}, Lt[2] = {}, Ot[NT][4] = {};  // fold: the splits merged so far
  for (int split = split0; split < split1; ++split) {
    if (split > split0) __syncthreads();  // every warp done with the last split's list and tiles
    VisibleList<T, kMmaListCap> vl;
    vl.start_segment(split, nsplit, c_all);
    vl.fill(visible, s_list, s_scan);
    if (vl.n_list == 0 && split > 0) {  // an empty segment: m = -inf, skipped by the merge
      if (fold) continue;
      if constexpr (CL) {
        cg::cluster_group cl = cg::this_cluster();
        asm volatile("barrier.cluster.wait;\n" ::: "memory");  // every CTA started
        float* slot = cl.map_shared_rank(merge_slots, 0u) + (split - 1) * kMergeSlot;
        for (int h = tid; h < HC; h += T) slot[kSlotO + 2 * h] = -INFINITY;
        cl.sync();
        return;
      }
      if (c0 == 0) store_split_ml<T>(part_ml, tl, nsplit, split, heads, h0, HC, nullptr, nullptr);
      return;
    }
    // This lane's rows r0 and r0 + 8 of the CTA's heads: running max m and sum l (split 0 starts
    // from the sink: its term is e^(sink - m) = 1 at m = sink), the same in the DG warps sharing them.
    float m[2], l[2];
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int64_t hh = h0 + r0 + 8 * hr;
      m[hr] = split == 0 ? (hh < heads ? a.sink[hh] : 0.0f) : -INFINITY;
      l[hr] = split == 0 ? 1.0f : 0.0f;
    }
    float o[NT][4];
#pragma unroll
    for (int j = 0; j < NT; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;

    while (vl.next(visible, s_list, s_scan)) {
      const int n_list = vl.n_list;
      const bool last_batch = vl.exhausted();
      const int ntiles = vl.tiles(TN);
      // Tile `tile`'s rows into buffer tile & 1 by cp.async; rows past the list's end zero.
      auto load = [&](int tile) {
        const int e0 = tile * TN, ne = min(TN, n_list - e0);
        __nv_bfloat16* dst = s_k + (tile & 1) * TN * QS;
        const int c8 = tid % C8;  // this thread's chunk of every (T / C8)-th row
#pragma unroll 4
        for (int e = tid / C8; e < TN; e += T / C8) {
          if (e < ne)
            cp_async16(dst + e * QS + c8 * 8, rows + static_cast<int64_t>(s_list[e0 + e]) * D + c8 * 8);
          else
            *reinterpret_cast<uint4*>(dst + e * QS + c8 * 8) = make_uint4(0u, 0u, 0u, 0u);
        }
        cp_async_commit();
      };
      load(0);
      for (int tile = 0; tile < ntiles; ++tile) {
        const int ne = min(TN, n_list - tile * TN);
        cp_async_wait<0>();
        __syncthreads();  // this tile landed; every warp is done with the other buffer and with s_s
        if (tile + 1 < ntiles) load(tile + 1);
        const __nv_bfloat16* kt = s_k + (tile & 1) * TN * QS;

        {  // S = Q·Kᵀ, this warp's 16 heads x SE entries, scaled, to shared memory.
          float sacc[NJ][4] = {};
#pragma unroll 4
          for (int kk = 0; kk < D; kk += 16) {
            uint32_t af[4], r[4];
            ldmatrix_x4(af, s_q + (mt * 16 + (lane & 15)) * QS + kk + (lane >> 4) * 8);
            if constexpr (NJ == 1) {  // lanes 16-31 repeat the rows
              ldmatrix_x4(r, kt + (grp * SE + (lane & 7)) * QS + kk + ((lane >> 3) & 1) * 8);
              mma_bf16(sacc[0], af, r[0], r[1]);
            } else {
#pragma unroll
              for (int jj = 0; jj < NJ; jj += 2) {
                ldmatrix_x4(r, kt + (grp * SE + jj * 8 + ((lane >> 4) << 3) + (lane & 7)) * QS + kk + ((lane >> 3) & 1) * 8);
                mma_bf16(sacc[jj], af, r[0], r[1]);
                mma_bf16(sacc[jj + 1], af, r[2], r[3]);
              }
            }
          }
#pragma unroll
          for (int j = 0; j < NJ; ++j) {
            const int col = grp * SE + j * 8 + quad * 2;
            *reinterpret_cast<float2*>(s_s + r0 * SS + col) = make_float2(sacc[j][0] * a.scale, sacc[j][1] * a.scale);
            *reinterpret_cast<float2*>(s_s + (r0 + 8) * SS + col) = make_float2(sacc[j][2] * a.scale, sacc[j][3] * a.scale);
          }
        }
        __syncthreads();

        // Online softmax over the tile for rows r0, r0 + 8 (entries past ne: no weight).
        // e^x as __expf (ex2.approx of x·log2 e: relative error ~1e-6 here, far below the bf16
        // rounding of P; the same instructions whatever the batch).
        float sv[NS][4];
#pragma unroll
        for (int j = 0; j < NS; ++j) {
          const int col = j * 8 + quad * 2;
          const float2 x = *reinterpret_cast<const float2*>(s_s + r0 * SS + col);
          const float2 y = *reinterpret_cast<const float2*>(s_s + (r0 + 8) * SS + col);
          sv[j][0] = x.x;
          sv[j][1] = x.y;
          sv[j][2] = y.x;
          sv[j][3] = y.y;
        }
        if (ne < TN)  // the last tile of the list: entries past its end get no weight
#pragma unroll
          for (int j = 0; j < NS; ++j)
#pragma unroll
            for (int i = 0; i < 4; ++i)
              if (j * 8 + quad * 2 + (i & 1) >= ne) sv[j][i] = -INFINITY;
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int j = 0; j < NS; ++j) {
          mx[0] = fmaxf(mx[0], fmaxf(sv[j][0], sv[j][1]));
          mx[1] = fmaxf(mx[1], fmaxf(sv[j][2], sv[j][3]));
        }
        float mn[2], ls[2] = {0.0f, 0.0f}, al[2];
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(kFull, mx[hr], 1));
          mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(kFull, mx[hr], 2));
          mn[hr] = fmaxf(m[hr], mx[hr]);
        }
#pragma unroll
        for (int j = 0; j < NS; ++j)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int hr = i >> 1;
            const float pe = mn[hr] == -INFINITY ? 0.0f : __expf(sv[j][i] - mn[hr]);  // nothing finite yet: no weight
            sv[j][i] = pe;
            ls[hr] += pe;
          }
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          ls[hr] += __shfl_xor_sync(kFull, ls[hr], 1);
          ls[hr] += __shfl_xor_sync(kFull, ls[hr], 2);
          al[hr] = m[hr] == mn[hr] ? 1.0f : __expf(m[hr] - mn[hr]);
          l[hr] = l[hr] * al[hr] + ls[hr];
          m[hr] = mn[hr];
        }

        // O = O·alpha + P·V for this warp's 16 heads x DC channels (alpha = 1 on every row of
        // the warp, the common case once the maxima settle: the product by 1 skipped, same bits).
        if (__any_sync(kFull, al[0] != 1.0f || al[1] != 1.0f))
#pragma unroll
          for (int j = 0; j < NT; ++j) {
            o[j][0] *= al[0];
            o[j][1] *= al[0];
            o[j][2] *= al[1];
            o[j][3] *= al[1];
          }
#pragma unroll
        for (int k = 0; k < TN / 16; ++k) {
          const uint32_t pa[4] = {pack_bf16(sv[2 * k][0], sv[2 * k][1]), pack_bf16(sv[2 * k][2], sv[2 * k][3]),
                                  pack_bf16(sv[2 * k + 1][0], sv[2 * k + 1][1]), pack_bf16(sv[2 * k + 1][2], sv[2 * k + 1][3])};
#pragma unroll
          for (int j = 0; j < NT; j += 2) {
            uint32_t r[4];
            ldmatrix_x4_trans(r, kt + (k * 16 + (lane & 15)) * QS + c0 + grp * DC + j * 8 + (lane >> 4) * 8);
            mma_bf16(o[j], pa, r[0], r[1]);
            mma_bf16(o[j + 1], pa, r[2], r[3]);
          }
        }
      }
      vl.drop(min(n_list, ntiles * TN), s_list);
      if (last_batch) break;
    }

    if (fold) {
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        if (split == 0) {
          Mt[hr] = m[hr];
          Lt[hr] = l[hr];
#pragma unroll
          for (int j = 0; j < NT; ++j) {
            Ot[j][2 * hr] = o[j][2 * hr];
            Ot[j][2 * hr + 1] = o[j][2 * hr + 1];
          }
        } else if (m[hr] != -INFINITY) {  // the combine's skip (a row whose scores were all NaN or -inf)
          float fo, fn;
          merge_scale(Mt[hr], m[hr], fo, fn);
          Lt[hr] = merge_term(Lt[hr], fo, l[hr], fn);
#pragma unroll
          for (int j = 0; j < NT; ++j) {
            Ot[j][2 * hr] = merge_term(Ot[j][2 * hr], fo, o[j][2 * hr], fn);
            Ot[j][2 * hr + 1] = merge_term(Ot[j][2 * hr + 1], fo, o[j][2 * hr + 1], fn);
          }
        }
      }
      continue;
    }
    if constexpr (CL) {
      // The query's splits are one cluster (split = rank): the others store their state into
      // split 0's slots (distributed shared memory) and arrive; split 0's CTA, past the barrier,
      // merges them into its registers in split order by the combine kernel's arithmetic, then
      // writes o / l. One barrier; split 0's reads are its own shared memory.
      cg::cluster_group cl = cg::this_cluster();
      asm volatile("barrier.cluster.wait;\n" ::: "memory");  // every CTA started (the entry's phase)
      if (split > 0) {
        float* slot = cl.map_shared_rank(merge_slots, 0u) + (split - 1) * kMergeSlot;
        each_out([&](int j, int hr, int64_t, int col) {
          *reinterpret_cast<float2*>(slot + (r0 + 8 * hr) * (D / DS) + col - c0) = make_float2(o[j][2 * hr], o[j][2 * hr + 1]);
        });
        if (grp == 0 && quad == 0)
#pragma unroll
          for (int hr = 0; hr < 2; ++hr) {
            slot[kSlotO + 2 * (r0 + 8 * hr)] = m[hr];
            slot[kSlotO + 2 * (r0 + 8 * hr) + 1] = l[hr];
          }
        cl.sync();
        return;
      }
      cl.sync();
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int row = r0 + 8 * hr;
        if (h0 + row >= heads) continue;
        float M = m[hr], L = l[hr];
        for (int k = 1; k < nsplit; ++k) {
          const float* slot = merge_slots + (k - 1) * kMergeSlot;
          const float mk = slot[kSlotO + 2 * row];
          if (mk == -INFINITY) continue;
          const float* ro = slot + row * (D / DS);
          float fo, fn;
          merge_scale(M, mk, fo, fn);
          L = merge_term(L, fo, slot[kSlotO + 2 * row + 1], fn);
#pragma unroll
          for (int j = 0; j < NT; ++j) {
            const float2 v = *reinterpret_cast<const float2*>(ro + grp * DC + j * 8 + quad * 2);
            o[j][2 * hr] = merge_term(o[j][2 * hr], fo, v.x, fn);
            o[j][2 * hr + 1] = merge_term(o[j][2 * hr + 1], fo, v.y, fn);
          }
        }
        l[hr] = L;
      }
      each_out([&](int j, int hr, int64_t hh, int col) {
        *reinterpret_cast<float2*>(a.out + (t * heads + hh) * D + col) = out_pair(a, t, col, o[j][2 * hr] / l[hr], o[j][2 * hr + 1] / l[hr]);
      });
      return;
    }
    each_out([&](int j, int hr, int64_t hh, int col) {
      if (nsplit == 1)
        *reinterpret_cast<float2*>(a.out + (t * heads + hh) * D + col) = out_pair(a, t, col, o[j][2 * hr] / l[hr], o[j][2 * hr + 1] / l[hr]);
      else
        *reinterpret_cast<float2*>(part_o + ((tl * nsplit + split) * heads + hh) * D + col) =
            make_float2(o[j][2 * hr], o[j][2 * hr + 1]);
    });
    if (nsplit > 1 && grp == 0 && quad == 0 && c0 == 0)
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int64_t hh = h0 + r0 + 8 * hr;
        if (hh >= heads) continue;
        float* ml = part_ml + ((tl * nsplit + split) * heads + hh) * 2;
        ml[0] = m[hr];
        ml[1] = l[hr];
      }
  }  // splits
  if (fold)
    each_out([&](int j, int hr, int64_t hh, int col) {
      *reinterpret_cast<float2*>(a.out + (t * heads + hh) * D + col) = out_pair(a, t, col, Ot[j][2 * hr] / Lt[hr], Ot[j][2 * hr + 1] / Lt[hr]);
    });
}
// Segments of a launch: enough for the most entries a query can see (its window plus every
// compressed entry it may select, at most all candidates); with one segment the kernel
// finishes the softmax itself.
int attention_splits(const AttentionArgs& a) {
  const bool multi = a.seqs != nullptr;
  const int64_t t_win = multi ? a.max_t_win : a.t_win;
  int64_t t_comp = multi ? a.max_t_comp : ((a.comp && a.comp_sel) ? a.t_comp : 0);
  if (a.max_selected > 0) t_comp = std::min(t_comp, a.max_selected);
  const int64_t bound = std::min<int64_t>(t_win + t_comp, a.window + t_comp);
  return static_cast<int>(std::max<int64_t>(1, ceil_div(bound, kAttnSeg)));
}

// Runs launch(grid, nsplit, part_o, part_ml, first query) over the queries (heads_per_cta heads
// per CTA), split into fixed segments of kAttnSeg visible entries when a query can see more,
// the splits merged by attention_combine_k.
template <class Launch>
void launch_attention(int heads_per_cta, const AttentionArgs& a, Temp& tmp, cudaStream_t s, Launch launch) {
  const int64_t hb = ceil_div(a.heads, heads_per_cta);
  const int nsplit = attention_splits(a);
  if (nsplit == 1) {
    launch(dim3(static_cast<unsigned>(a.s), static_cast<unsigned>(hb), 1), 1, nullptr, nullptr, 0);
    DI_CUDA_LAUNCHED();
    return;
  }
  const int64_t group = std::min<int64_t>(
      {a.s, kAttnGroup, std::max<int64_t>(1, kAttnPartialFloats / (int64_t{nsplit} * a.heads * a.head_dim))});
  float* part_o = tmp.take_n<float>(group * nsplit * a.heads * a.head_dim);
  float* part_ml = tmp.take_n<float>(group * nsplit * a.heads * 2);
  for (int64_t q0 = 0; q0 < a.s; q0 += group) {
    const int64_t n = std::min(group, a.s - q0);  // queries [q0, q0 + n) as one launch
    launch(dim3(static_cast<unsigned>(n), static_cast<unsigned>(hb), static_cast<unsigned>(nsplit)), nsplit, part_o, part_ml, q0);
    DI_CUDA_LAUNCHED();
    AttentionArgs g = a;
    g.s = n;
    const int64_t pairs = n * a.heads * a.head_dim / 2;
    launch_k(attention_combine_k, static_cast<unsigned>(ceil_div(pairs, 256)), 256, 0, s, g, nsplit, part_o, part_ml, q0);
    DI_CUDA_LAUNCHED();
  }
  tmp.give(part_o);
  tmp.give(part_ml);
}

template <int DW, int NW>
void launch_attention_tiled(const AttentionArgs& a, Temp& tmp, cudaStream_t s) {
  using C = AttnCfg<DW, NW>;
  opt_in_smem(attention_tiled_k<DW, NW>, C::bytes);
  launch_attention(kAttnHeads, a, tmp, s, [&](dim3 g, int nsplit, float* po, float* pml, int64_t q0) {
    launch_k(attention_tiled_k<DW, NW>, g, C::T, C::bytes, s, a, nsplit, po, pml, q0);
  });
}

// The entries rounded to bf16 (entries_bf16_k), then the tensor-core kernel at HC heads per CTA,
// the output channels split over DS CTAs.
template <int D, int HC, int DS = 1>
void launch_attention_mma_hc(const AttentionArgs& a, Temp& tmp, cudaStream_t s, bool fold = false) {
  using C = MmaCfg<D, HC>;
  opt_in_smem(attention_mma_k<D, HC, DS>, C::bytes);
  const int64_t n_seqs = a.seqs ? a.n_seqs : 1;
  const int64_t max_rows = a.seqs ? a.max_t_win + a.max_t_comp : a.t_win + ((a.comp && a.comp_sel) ? a.t_comp : 0);
  const int64_t total = a.seqs ? (a.total_entries > 0 ? a.total_entries : n_seqs * max_rows) : max_rows;
  auto* staged = tmp.take_n<__nv_bfloat16>(std::max<int64_t>(total, 1) * D);
  int64_t* seq_e0 = a.seqs ? tmp.take_n<int64_t>(n_seqs) : nullptr;
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(ceil_div(max_rows * (D / 8), kThreads), 4096));
  launch_k(entries_bf16_k, dim3(static_cast<unsigned>(chunks), static_cast<unsigned>(n_seqs)), kThreads, 0, s, a, staged, total, seq_e0);
  DI_CUDA_LAUNCHED();
  if (fold) {  // every query's splits in its own CTAs, merged there: no partial sums, no combine
    const dim3 g(static_cast<unsigned>(a.s), static_cast<unsigned>(ceil_div(a.heads, HC) * DS), 1);
    launch_k(attention_mma_k<D, HC, DS>, g, kMmaT, C::bytes, s, a, staged, seq_e0, attention_splits(a), true,
             static_cast<float*>(nullptr), static_cast<float*>(nullptr), int64_t{0});
    DI_CUDA_LAUNCHED();
  } else if (const int nsplit = attention_splits(a);
             HC <= 32 && nsplit > 1 && nsplit <= 8 && clusters_enabled() &&
             C::bytes + size_t(nsplit - 1) * HC * (D / DS + 2) * 4 <= kMaxSmemPerBlock) {
    // Each query's splits one cluster of CTAs (up to 32 heads per CTA: the decode launches),
    // merged by split 0's, which holds the others' states: no partial sums in global memory,
    // no combine launch.
    constexpr int HCL = HC <= 32 ? HC : 32;  // (instantiated only where taken)
    const size_t smem = C::bytes + size_t(nsplit - 1) * HC * (D / DS + 2) * 4;
    const dim3 g(static_cast<unsigned>(a.s), static_cast<unsigned>(ceil_div(a.heads, HC) * DS), static_cast<unsigned>(nsplit));
    opt_in_smem(attention_mma_k<D, HCL, DS, true>, smem);
    launch_k_cluster(attention_mma_k<D, HCL, DS, true>, g, kMmaT, smem, s, dim3(1, 1, static_cast<unsigned>(nsplit)), a,
                     staged, seq_e0, nsplit, false, static_cast<float*>(nullptr), static_cast<float*>(nullptr), int64_t{0});
    DI_CUDA_LAUNCHED();
  } else {
    launch_attention(HC, a, tmp, s, [&](dim3 g, int nsplit, float* po, float* pml, int64_t q0) {
      launch_k(attention_mma_k<D, HC, DS>, dim3(g.x, g.y * DS, g.z), kMmaT, C::bytes, s, a, staged, seq_e0, nsplit, false, po,
               pml, q0);
    });
  }
  tmp.give(staged);
  if (seq_e0) tmp.give(seq_e0);
}

// Heads per CTA: 64 when the launch has CTAs enough for two per SM of an H200 (132 SMs),
// else 32, or 16 when even 32 leaves most SMs idle (decode: the same bits on more SMs; head
// dims of 128 and up, so a warp's D/8 channels hold two n8 tiles); at 16 heads, when four
// times the CTAs still fit the SMs in one wave (a few queries), the 512 output channels over 4
// CTAs each.
// Queries enough for kAttnFoldCtas CTAs of 64 heads without splitting (one per SM of an H200),
// or kAttnFoldCtasFew with at most kAttnFoldSplits splits each, fold their splits (prefill, decode
// batches from 64 at the released shape): the splits add little parallelism there, and their
// partial sums' round trip through memory had cost 10% of a prefill (runs 110-111). (At 64
// queries, folding or not measured within the run-to-run spread: 27.9-28.2 against 28.0-28.4
// ms a step; runs 112-114. Long windows, of many splits, keep them in CTAs of their own below
// kAttnFoldCtas queries.)
constexpr int64_t kAttnFoldCtas = 132, kAttnFoldCtasFew = 64, kAttnFoldSplits = 8;
template <int D>
void launch_attention_mma(const AttentionArgs& a, Temp& tmp, cudaStream_t s) {
  // (64 heads: 1.24 / 1.95 s for the replayed / exact prefill, 32 heads 1.25 / 1.99 s, run 111; at head
  // dim 512 the 64-head CTA spills 0.8 KB of the merged state, touched once per split.)
  const int64_t q64 = a.s * ceil_div(a.heads, 64), nsplit = attention_splits(a);
  if (nsplit > 1 && (q64 >= kAttnFoldCtas || (q64 >= kAttnFoldCtasFew && nsplit <= kAttnFoldSplits)))
    return launch_attention_mma_hc<D, 64>(a, tmp, s, true);
  const int64_t ctas64 = a.s * ceil_div(a.heads, 64) * attention_splits(a);
  if (ctas64 >= 264) return launch_attention_mma_hc<D, 64>(a, tmp, s);
  if constexpr (D >= 128)
    if (ctas64 * 2 < 264 && a.heads > 32) {
      if constexpr (D == 512) {
        const int64_t ctas16 = a.s * ceil_div(a.heads, 16) * attention_splits(a);
        if (ctas16 * 4 <= 132 && ceil_div(a.heads, 16) * 4 <= 65535) return launch_attention_mma_hc<D, 16, 4>(a, tmp, s);
      }
      return launch_attention_mma_hc<D, 16>(a, tmp, s);
    }
  launch_attention_mma_hc<D, 32>(a, tmp, s);
}

}  // namespace

void attention(const AttentionArgs& a, bool bf16, Temp& tmp, cudaStream_t s) {
  if (a.s * a.heads == 0) return;
  const bool comp = a.comp && a.comp_sel && a.t_comp > 0;
  // A multi-sequence call's entries are rows of float buffers: 16-byte aligned when the row is.
  const bool entries_aligned = a.seqs ? a.head_dim % 4 == 0 && a.max_t_win + a.max_t_comp < (int64_t{1} << 30)
                                      : (a.t_win == 0 || aligned16(a.win)) && (!comp || aligned16(a.comp)) &&
                                            a.t_win + (comp ? a.t_comp : 0) < (int64_t{1} << 30);
  const bool fast = !legacy_forced() && aligned16(a.q) && aligned16(a.out) && entries_aligned &&
                    ceil_div(a.heads, kAttnHeads) <= 65535;
  const bool mma = fast && bf16 && ceil_div(a.heads, 16) <= 65535 && (a.seqs ? a.n_seqs : 1) <= 65535 &&
                   (a.head_dim == 64 || a.head_dim == 128 || a.head_dim == 256 || a.head_dim == 512);
  if (a.seqs && a.win_block > 0 && a.head_dim % a.win_block != 0) {
    std::fprintf(stderr, "deepinfer: CUDA attention: head_dim %lld is not a multiple of win_block %lld\n",
                 static_cast<long long>(a.head_dim), static_cast<long long>(a.win_block));
    std::abort();
  }
  if (a.q_cos && (a.rope_dim > a.head_dim || a.rope_dim % 2 != 0)) {
    std::fprintf(stderr, "deepinfer: CUDA attention: RoPE over %lld of %lld channels\n", static_cast<long long>(a.rope_dim),
                 static_cast<long long>(a.head_dim));
    std::abort();
  }
  if (a.q_cos && (!mma || a.rope_dim % 4 != 0)) {
    // The queries' RoPE as rope() would do it, around a call without it: q rotated in a copy
    // (as aligned as q, so the call takes the kernel it would take on q), the output rotated
    // back in place. (The tensor-core kernel rotates on the fly.)
    const int64_t n = a.s * a.heads * a.head_dim;
    const size_t shift = reinterpret_cast<uintptr_t>(a.q) % 16;
    char* raw = tmp.take_n<char>(n * static_cast<int64_t>(sizeof(float)) + 16);
    float* q = reinterpret_cast<float*>(raw + shift);
    DI_CUDA_CHECK(cudaMemcpyAsync(q, a.q, static_cast<size_t>(n) * sizeof(float), cudaMemcpyDeviceToDevice, s));
    const RopeArgs r{.x = q, .cos = a.q_cos, .sin = a.q_sin, .rows = a.s, .heads = a.heads, .head_dim = a.head_dim,
                     .rope_dim = a.rope_dim};
    rope(r, s);
    AttentionArgs b = a;
    b.q = q;
    b.q_cos = b.q_sin = nullptr;
    attention(b, bf16, tmp, s);
    RopeArgs back = r;
    back.x = a.out;
    back.inverse = true;
    rope(back, s);
    tmp.give(raw);
    return;
  }
  if (a.seqs && a.win_block > 0 && (!mma || a.win_block % 8 != 0)) {
    // Packed windows for the float32 kernels (the tensor-core path decodes them as it stages its
    // entries): dequantised into a copy of the sequences' descriptors.
    // Σ t_win rows at most: total_entries when given (it counts the compressed rows too).
    const int64_t rows = a.total_entries > 0 ? a.total_entries : a.n_seqs * a.max_t_win;
    auto* seqs = tmp.take_n<AttentionSeq>(a.n_seqs);
    float* wins = tmp.take_n<float>(std::max<int64_t>(rows * a.head_dim, 1));
    const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(ceil_div(a.max_t_win * a.head_dim, kThreads), 4096));
    launch_k(unpack_windows_k, dim3(static_cast<unsigned>(chunks), static_cast<unsigned>(a.n_seqs)), kThreads, 0, s, a, seqs,
             wins, rows);
    DI_CUDA_LAUNCHED();
    AttentionArgs b = a;
    b.seqs = seqs;
    b.win_block = 0;
    attention(b, bf16, tmp, s);
    tmp.give(seqs);
    tmp.give(wins);
    return;
  }
  if (mma) {
    switch (a.head_dim) {
      case 64: return launch_attention_mma<64>(a, tmp, s);
      case 128: return launch_attention_mma<128>(a, tmp, s);
      case 256: return launch_attention_mma<256>(a, tmp, s);
      case 512: return launch_attention_mma<512>(a, tmp, s);
      default: break;
    }
  }
  if (fast) {
    switch (a.head_dim) {
      case 32: return launch_attention_tiled<4, 1>(a, tmp, s);
      case 64: return launch_attention_tiled<8, 1>(a, tmp, s);
      case 128: return launch_attention_tiled<8, 2>(a, tmp, s);
      case 256: return launch_attention_tiled<8, 4>(a, tmp, s);
      case 512: return launch_attention_tiled<8, 8>(a, tmp, s);
      default: break;
    }
  }
  if (a.head_dim % 32 != 0 || a.head_dim > kMaxHeadDim) {
    std::fprintf(stderr, "deepinfer: CUDA attention needs head_dim a multiple of 32 up to %d, got %lld\n", kMaxHeadDim,
                 static_cast<long long>(a.head_dim));
    std::abort();
  }
  launch_k(attention_k, grid(a.s * a.heads * 32), kThreads, 0, s, a);
  DI_CUDA_LAUNCHED();
}
}  // namespace deepinfer::kernels::cuda
