// CUDA: shared-latent attention (window + selected compressed entries, sink), indexer
// scores, candidate blocks, top-k selection and the MoE router.
//
// attention: one CTA per (query, block of 32 heads[, split of the visible entries]). The CTA
// first compacts the indices of the entries its query sees (window ∪ selected compressed) into
// shared memory, then walks them in tiles of 32 entries staged in shared memory (cp.async,
// double-buffered) and shared by all its heads: scores = Q·K_tileᵀ (Q in registers, the lanes
// split the head dimension, a reduce-scatter across lanes and warps), an online softmax per
// head started from the sink, then acc += P·V_tile (V = K: the same tile). Float32 FMA
// throughout. Few CTAs (decode) split the visible entries over several CTAs and combine the
// partial softmaxes afterwards.
// indexer_scores: a 128 x 128 tile of (query, head) rows x keys per CTA, the 32-deep chunks of
// the dot dimension staged in shared memory, then the per-(query, key) sum over heads in head
// order, as the reference.
// topk_mask / candidate_blocks: one CTA per row, radix select (4 passes of 8 bits) of the k-th
// largest order-preserving key, then entries above it and the lowest-index ties.
// The first versions (a warp per (query, head), a thread per (query, key), a thread per row
// with k passes) stay as the fallback for shapes the fast kernels do not cover; setting
// DEEPINFER_CUDA_LEGACY=1 forces them (benchmarks compare the two).
#include <algorithm>
#include <cstdlib>

#include "kernels/cuda/cuda_ops.h"

namespace deepinfer::kernels::cuda {

namespace {

constexpr unsigned kFull = 0xffffffffu;

bool legacy_forced() {
  const char* e = std::getenv("DEEPINFER_CUDA_LEGACY");
  return e && e[0] == '1';
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}
// Copies src_bytes (0 or 16) and zero-fills the rest of the 16 bytes.
__device__ __forceinline__ void cp_async16_zfill(void* smem, const void* gmem, int src_bytes) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ld4(float* d, const float* s) {
  const float4 v = *reinterpret_cast<const float4*>(s);
  d[0] = v.x;
  d[1] = v.y;
  d[2] = v.z;
  d[3] = v.w;
}
__device__ __forceinline__ void st4(float* d, float a, float b, float c, float e) {
  *reinterpret_cast<float4*>(d) = make_float4(a, b, c, e);
}

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

__global__ void attention_k(AttentionArgs a) {
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

__global__ void indexer_scores_k(IndexerScoreArgs a) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= a.s * a.t) return;
  const int64_t s = i / a.t, j = i % a.t;
  if (j >= (a.q_pos[s] + 1) / a.ratio) {
    a.scores[i] = -INFINITY;
    return;
  }
  float acc = 0.0f;
  for (int64_t h = 0; h < a.heads; ++h) {
    const float* q = a.q + (s * a.heads + h) * a.dim;
    const float* k = a.k + j * a.dim;
    float dt = 0.0f;
    for (int64_t c = 0; c < a.dim; ++c) dt += q[c] * k[c];
    acc += fmaxf(dt, 0.0f) * a.score_scale * a.w[s * a.heads + h];
  }
  a.scores[i] = acc;
}

// k best of v[0..n) (ties: lower index), -inf excluded, written as 1s into sel (0 elsewhere).
__device__ void select_topk(const float* v, int64_t n, int64_t k, uint8_t* sel, const uint8_t* restrict_to) {
  for (int64_t j = 0; j < n; ++j) sel[j] = 0;
  for (int64_t r = 0; r < k; ++r) {
    int64_t best = -1;
    float bv = -INFINITY;
    for (int64_t j = 0; j < n; ++j) {
      if (sel[j] || (restrict_to && !restrict_to[j])) continue;
      if (best < 0 || v[j] > bv) {
        best = j;
        bv = v[j];
      }
    }
    if (best < 0 || !(bv > -INFINITY)) break;
    sel[best] = 1;
  }
}

__global__ void topk_mask_k(TopkMaskArgs a) {
  const int64_t s = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (s >= a.s) return;
  select_topk(a.scores + s * a.t, a.t, a.k, a.selected + s * a.t, a.restrict_to ? a.restrict_to + s * a.t : nullptr);
}

__global__ void candidate_blocks_k(CandidateBlocksArgs a, float* block_scores, uint8_t* block_sel) {
  const int64_t s = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (s >= a.s) return;
  const int64_t nb = (a.t + a.block_size - 1) / a.block_size;
  float* bs = block_scores + s * nb;
  uint8_t* bsel = block_sel + s * nb;
  const float* sc = a.scores + s * a.t;
  for (int64_t b = 0; b < nb; ++b) {
    float m = -INFINITY;
    for (int64_t j = b * a.block_size; j < min(a.t, (b + 1) * a.block_size); ++j) m = fmaxf(m, sc[j]);
    bs[b] = m;
  }
  const int64_t len = (a.q_pos[s] + 1) / a.ratio;
  const int64_t last = len - 1 >= 0 ? (len - 1) / a.block_size : -1;
  if (last >= 0 && last < nb) bs[last] = INFINITY;
  select_topk(bs, nb, a.topk_blocks, bsel, nullptr);
  for (int64_t j = 0; j < a.t; ++j) a.keep[s * a.t + j] = bsel[j / a.block_size];
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
constexpr int kAttnSeg = 512;
constexpr int64_t kAttnGroup = 256;  // queries per launch when split (bounds the partials)

template <int DW, int NW>
struct AttnCfg {
  static constexpr int D = NW * 8 * DW, T = NW * 32, CH = T * kAttnPerThread;
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
  using C = AttnCfg<DW, NW>;
  constexpr int D = C::D, T = C::T, CH = C::CH, HC = kAttnHeads, TN = kAttnTile, R = kAttnPerThread;
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
  auto visible = [&](int64_t c) -> int {
    if (c < c_win) {
      const int64_t kp = qe.win_pos[c];
      return (kp <= p && kp > p - a.window) ? 1 : 0;
    }
    return sel[c - c_win] != 0 ? 1 : 0;
  };

  // The range of visible-entry ordinals this split handles (empty past the last entry).
  int64_t lo = 0, hi = INT64_MAX;
  if (nsplit > 1) {
    lo = static_cast<int64_t>(split) * kAttnSeg;
    hi = lo + kAttnSeg;
  }
  for (int h = tid; h < HC; h += T) {
    const bool valid = h0 + h < heads;
    s_m[h] = split == 0 ? (valid ? a.sink[h0 + h] : 0.0f) : -INFINITY;
    s_l[h] = split == 0 ? 1.0f : 0.0f;
  }

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

  int64_t cand = lo < hi ? 0 : c_all, ord = 0, base_ord = lo;
  int n_list = 0;
  for (;;) {
    // Compact the indices of visible entries (ascending) after the n_list already held.
    while (cand < c_all && n_list + CH <= kAttnListCap) {
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
    if (n_list == 0) break;
    const bool last_batch = cand >= c_all;
    const int ntiles = last_batch ? (n_list + TN - 1) / TN : n_list / TN;

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
        const float mt = warp_max(sv);
        const float mo = s_m[hh], mn = fmaxf(mo, mt);
        const float pe = lane < ne ? expf(sv - mn) : 0.0f;
        const float ls = warp_sum(pe);
        s_p[lane * (HC + 4) + hh] = pe;
        __syncwarp();
        if (lane == 0) {
          const float al = mo == mn ? 1.0f : expf(mo - mn);
          s_alpha[hh] = al;
          s_l[hh] = s_l[hh] * al + ls;
          s_m[hh] = mn;
        }
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
    const int done = min(n_list, ntiles * TN), left = n_list - done;
    __syncthreads();
    for (int i = tid; i < left; i += T) s_list[i] = s_list[done + i];  // done >= TN > left: no overlap
    __syncthreads();
    base_ord += done;
    n_list = left;
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
  if (nsplit > 1)
    for (int h = tid; h < HC; h += T)
      if (h0 + h < heads) {
        float* ml = part_ml + ((tl * nsplit + split) * heads + h0 + h) * 2;
        ml[0] = s_m[h];
        ml[1] = s_l[h];
      }
}

// Merges the splits' partial softmaxes: out = Σ o_i e^(m_i - M) / Σ l_i e^(m_i - M).
__global__ void attention_combine_k(AttentionArgs a, int nsplit, const float* part_o, const float* part_ml, int64_t t_base) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t D = a.head_dim;
  if (i >= a.s * a.heads * D) return;
  const int64_t d = i % D, sh = i / D, t = sh / a.heads, hh = sh % a.heads;
  float M = -INFINITY;
  for (int k = 0; k < nsplit; ++k) M = fmaxf(M, part_ml[((t * nsplit + k) * a.heads + hh) * 2]);
  // Split 0 holds the sink (m finite); empty splits (m = -inf) are skipped, so a query whose
  // entries fit one segment gets exactly the unsplit kernel's o / l.
  const int64_t r0 = t * nsplit * a.heads + hh;
  const float f0 = expf(part_ml[r0 * 2] - M);
  float L = part_ml[r0 * 2 + 1] * f0, O = part_o[r0 * D + d] * f0;
  for (int k = 1; k < nsplit; ++k) {
    const int64_t r = (t * nsplit + k) * a.heads + hh;
    const float m = part_ml[r * 2];
    if (m == -INFINITY) continue;
    const float f = expf(m - M);
    L += part_ml[r * 2 + 1] * f;
    O += part_o[r * D + d] * f;
  }
  a.out[t_base * a.heads * D + i] = O / L;
}

template <int DW, int NW>
void launch_attention_tiled(const AttentionArgs& a, cudaStream_t s) {
  using C = AttnCfg<DW, NW>;
  static bool attr_done[64] = {};
  int dev = 0;
  DI_CUDA_CHECK(cudaGetDevice(&dev));
  if (dev < 0 || dev >= 64 || !attr_done[dev]) {
    DI_CUDA_CHECK(cudaFuncSetAttribute(attention_tiled_k<DW, NW>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(C::bytes)));
    if (dev >= 0 && dev < 64) attr_done[dev] = true;
  }
  const int64_t hb = ceil_div(a.heads, kAttnHeads);
  // Segments: enough for the most entries a query can see (its window plus every compressed
  // entry, at most all candidates); with one segment the kernel finishes the softmax itself.
  const bool multi = a.seqs != nullptr;
  const int64_t t_win = multi ? a.max_t_win : a.t_win;
  const int64_t t_comp = multi ? a.max_t_comp : ((a.comp && a.comp_sel) ? a.t_comp : 0);
  const int64_t bound = std::min<int64_t>(t_win + t_comp, a.window + t_comp);
  const int nsplit = static_cast<int>(std::max<int64_t>(1, ceil_div(bound, kAttnSeg)));
  if (nsplit == 1) {
    const dim3 grid(static_cast<unsigned>(a.s), static_cast<unsigned>(hb), 1);
    attention_tiled_k<DW, NW><<<grid, C::T, C::bytes, s>>>(a, 1, nullptr, nullptr, 0);
    DI_CUDA_LAUNCHED();
    return;
  }
  const int64_t group = std::min<int64_t>(a.s, kAttnGroup);
  float *part_o = nullptr, *part_ml = nullptr;
  DI_CUDA_CHECK(cudaMallocAsync(&part_o, static_cast<size_t>(group * nsplit * a.heads * a.head_dim) * sizeof(float), s));
  DI_CUDA_CHECK(cudaMallocAsync(&part_ml, static_cast<size_t>(group * nsplit * a.heads * 2) * sizeof(float), s));
  for (int64_t q0 = 0; q0 < a.s; q0 += group) {
    const int64_t n = std::min(group, a.s - q0);  // queries [q0, q0 + n) as one launch
    const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>(hb), static_cast<unsigned>(nsplit));
    attention_tiled_k<DW, NW><<<grid, C::T, C::bytes, s>>>(a, nsplit, part_o, part_ml, q0);
    DI_CUDA_LAUNCHED();
    AttentionArgs g = a;
    g.s = n;
    const int64_t total = n * a.heads * a.head_dim;
    attention_combine_k<<<static_cast<unsigned>(ceil_div(total, 256)), 256, 0, s>>>(g, nsplit, part_o, part_ml, q0);
    DI_CUDA_LAUNCHED();
  }
  DI_CUDA_CHECK(cudaFreeAsync(part_o, s));

}

// ---------------------------------------------------------------------------------------
// Indexer scores: C[(s, h), t] = q[s, h] · k[t] on a 128 x 128 tile (256 threads, 8 x 8 each,
// rows ty + 16 ii, columns tx + 16 jj), then I[s, t] = Σ_h in order of ReLU(C) · scale · w.

constexpr int kIxBM = 128, kIxBN = 128, kIxBK = 32, kIxLD = kIxBK + 4, kIxThreads = 256, kIxCLD = kIxBN + 1;
constexpr size_t kIxSmem = static_cast<size_t>(2 * (kIxBM + kIxBN) * kIxLD) * 4;
static_assert(static_cast<size_t>(kIxBM * kIxCLD + kIxBM) * 4 <= kIxSmem, "epilogue fits the operand buffers");

__global__ void __launch_bounds__(kIxThreads, 2) indexer_tiled_k(IndexerScoreArgs a, int bq) {
  extern __shared__ __align__(16) float sm[];
  __shared__ int64_t s_vmax;
  float* As = sm;                       // [2][BM][LD]
  float* Bs = sm + 2 * kIxBM * kIxLD;   // [2][BN][LD]
  const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
  const int64_t H = a.heads, s0 = static_cast<int64_t>(blockIdx.y) * bq, t0 = static_cast<int64_t>(blockIdx.x) * kIxBN;
  const int nq = static_cast<int>(min(static_cast<int64_t>(bq), a.s - s0));
  if (tid == 0) {
    int64_t v = 0;
    for (int i = 0; i < nq; ++i) v = max(v, (a.q_pos[s0 + i] + 1) / a.ratio);
    s_vmax = v;
  }
  __syncthreads();
  if (t0 >= s_vmax) {  // no key of the tile is visible to any of its queries
    for (int o = tid; o < nq * kIxBN; o += kIxThreads) {
      const int64_t tt = t0 + o % kIxBN;
      if (tt < a.t) a.scores[(s0 + o / kIxBN) * a.t + tt] = -INFINITY;
    }
    return;
  }
  const int64_t qrows = a.s * H;
  auto load = [&](int kc, int buf) {
    float* A = As + buf * kIxBM * kIxLD;
    float* B = Bs + buf * kIxBN * kIxLD;
    for (int idx = tid; idx < kIxBM * (kIxBK / 4); idx += kIxThreads) {
      const int r = idx >> 3, c4 = idx & 7;
      const int64_t c = static_cast<int64_t>(kc) * kIxBK + c4 * 4;
      const int64_t gr = s0 * H + r, gt = t0 + r;
      const bool va = gr < qrows && c < a.dim, vb = gt < a.t && c < a.dim;
      cp_async16_zfill(A + r * kIxLD + c4 * 4, va ? a.q + gr * a.dim + c : a.q, va ? 16 : 0);
      cp_async16_zfill(B + r * kIxLD + c4 * 4, vb ? a.k + gt * a.dim + c : a.k, vb ? 16 : 0);
    }
    cp_async_commit();
  };

  float acc[8][8];
#pragma unroll
  for (int ii = 0; ii < 8; ++ii)
#pragma unroll
    for (int jj = 0; jj < 8; ++jj) acc[ii][jj] = 0.0f;
  const int nk = static_cast<int>((a.dim + kIxBK - 1) / kIxBK);
  load(0, 0);
  for (int kc = 0; kc < nk; ++kc) {
    if (kc + 1 < nk) {
      load(kc + 1, (kc + 1) & 1);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const float* A = As + (kc & 1) * kIxBM * kIxLD + ty * kIxLD;
    const float* B = Bs + (kc & 1) * kIxBN * kIxLD + tx * kIxLD;
#pragma unroll 1  // unrolled further, the loads hoisted across iterations spill at 128 registers
    for (int kk = 0; kk < kIxBK; kk += 4) {
      float4 b[8];
#pragma unroll
      for (int jj = 0; jj < 8; ++jj) b[jj] = *reinterpret_cast<const float4*>(B + jj * 16 * kIxLD + kk);
#pragma unroll
      for (int ii = 0; ii < 8; ++ii) {
        const float4 av = *reinterpret_cast<const float4*>(A + ii * 16 * kIxLD + kk);
#pragma unroll
        for (int jj = 0; jj < 8; ++jj) {
          acc[ii][jj] = fmaf(av.x, b[jj].x, acc[ii][jj]);
          acc[ii][jj] = fmaf(av.y, b[jj].y, acc[ii][jj]);
          acc[ii][jj] = fmaf(av.z, b[jj].z, acc[ii][jj]);
          acc[ii][jj] = fmaf(av.w, b[jj].w, acc[ii][jj]);
        }
      }
    }
    __syncthreads();
  }
  float* Cs = sm;                    // [BM][CLD], over the operand buffers
  float* Ws = sm + kIxBM * kIxCLD;   // [BM] head weights of the tile's rows
#pragma unroll
  for (int ii = 0; ii < 8; ++ii)
#pragma unroll
    for (int jj = 0; jj < 8; ++jj) Cs[(ty + 16 * ii) * kIxCLD + tx + 16 * jj] = acc[ii][jj];
  for (int r = tid; r < kIxBM; r += kIxThreads) {
    const int64_t gr = s0 * H + r;
    Ws[r] = gr < qrows ? a.w[gr] : 0.0f;
  }
  __syncthreads();
  for (int o = tid; o < nq * kIxBN; o += kIxThreads) {
    const int sl = o / kIxBN, col = o % kIxBN;
    const int64_t sq = s0 + sl, tt = t0 + col;
    if (tt >= a.t) continue;
    float res = -INFINITY;
    if (tt < (a.q_pos[sq] + 1) / a.ratio) {
      const float* cp = Cs + sl * H * kIxCLD + col;
      const float* wp = Ws + sl * H;
      float acc2 = 0.0f;
      for (int64_t h = 0; h < H; ++h) acc2 += fmaxf(cp[h * kIxCLD], 0.0f) * a.score_scale * wp[h];
      res = acc2;
    }
    a.scores[sq * a.t + tt] = res;
  }
}

// ---------------------------------------------------------------------------------------
// Top-k selection, a CTA per row.

// Order-preserving key of a score; 0 = never picked (-inf, NaN). -0 and +0 share a key (ties).
__device__ __forceinline__ uint32_t order_key(float v) {
  if (!(v > -INFINITY)) return 0u;
  const uint32_t u = v == 0.0f ? 0u : __float_as_uint(v);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

constexpr int kSelThreads = 256;
struct SelShared {
  int hist[256];
  int scan[32];
  int digit, above;
};

__device__ int64_t block_sum_i(int v, int* scan) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  __syncthreads();
  if (lane == 0) scan[w] = v;
  __syncthreads();
  int64_t tot = 0;
  for (int i = 0; i < nw; ++i) tot += scan[i];
  return tot;
}
__device__ int64_t block_excl_scan_i(int v, int* scan) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  int incl = v;
  for (int off = 1; off < 32; off <<= 1) {
    const int y = __shfl_up_sync(kFull, incl, off);
    if (lane >= off) incl += y;
  }
  __syncthreads();
  if (lane == 31) scan[w] = incl;
  __syncthreads();
  int64_t base = 0;
  for (int i = 0; i < w; ++i) base += scan[i];
  return base + incl - v;
}

// Marks the k largest keys of [0, n) (ties: lower index first; key 0 never), out(j, picked)
// for every j. blockDim.x: a multiple of 32, at least 32.
template <class KeyF, class OutF>
__device__ void block_topk(int64_t n, int64_t k, KeyF key, OutF out, SelShared& sh) {
  const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, T = blockDim.x;
  if (k <= 0) {
    for (int64_t j = tid; j < n; j += T) out(j, false);
    return;
  }
  int cnt = 0;
  for (int64_t j = tid; j < n; j += T) cnt += key(j) != 0u;
  const int64_t nvalid = block_sum_i(cnt, sh.scan);
  uint32_t thr = 0u;  // nvalid <= k: every valid key is above 0
  int64_t need = 0;   // ties at thr to take, lowest index first
  if (nvalid > k) {
    uint32_t prefix = 0u, mask = 0u;
    int64_t remaining = k;
    for (int shift = 24; shift >= 0; shift -= 8) {
      for (int b = tid; b < 256; b += T) sh.hist[b] = 0;
      __syncthreads();
      for (int64_t j = tid; j < n; j += T) {
        const uint32_t kk = key(j);
        if (kk != 0u && (kk & mask) == prefix) atomicAdd(&sh.hist[(kk >> shift) & 255u], 1);
      }
      __syncthreads();
      if (w == 0) {  // the digit where the count from the top reaches `remaining`
        int c[8], local = 0;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          c[i] = sh.hist[255 - (lane * 8 + i)];
          local += c[i];
        }
        int incl = local;
        for (int off = 1; off < 32; off <<= 1) {
          const int y = __shfl_up_sync(kFull, incl, off);
          if (lane >= off) incl += y;
        }
        const int excl = incl - local, rem = static_cast<int>(remaining);
        if (excl < rem && incl >= rem) {
          int cum = excl;
          bool found = false;
#pragma unroll
          for (int i = 0; i < 8; ++i) {
            if (!found && cum + c[i] >= rem) {
              sh.digit = 255 - (lane * 8 + i);
              sh.above = cum;
              found = true;
            }
            cum += c[i];
          }
        }
      }
      __syncthreads();
      prefix |= static_cast<uint32_t>(sh.digit) << shift;
      mask |= 0xFFu << shift;
      remaining -= sh.above;
    }
    thr = prefix;
    need = remaining;
  }
  // Each thread marks a contiguous segment; ties ranked by a block scan in index order.
  const int64_t seg = (n + T - 1) / T, j0 = min(n, tid * seg), j1 = min(n, j0 + seg);
  int64_t rank = 0;
  if (need > 0) {
    int ties = 0;
    for (int64_t j = j0; j < j1; ++j) ties += key(j) == thr;
    rank = block_excl_scan_i(ties, sh.scan);
  }
  for (int64_t j = j0; j < j1; ++j) {
    const uint32_t kk = key(j);
    bool pick = kk != 0u && kk > thr;
    if (need > 0 && kk == thr) {
      pick = rank < need;
      ++rank;
    }
    out(j, pick);
  }
}

__global__ void __launch_bounds__(kSelThreads) topk_mask_block_k(TopkMaskArgs a) {
  __shared__ SelShared sh;
  const int64_t s = blockIdx.x;
  const float* sc = a.scores + s * a.t;
  const uint8_t* rs = a.restrict_to ? a.restrict_to + s * a.t : nullptr;
  uint8_t* selected = a.selected + s * a.t;
  block_topk(
      a.t, a.k, [&](int64_t j) { return (rs && !rs[j]) ? 0u : order_key(sc[j]); },
      [&](int64_t j, bool v) { selected[j] = v ? 1 : 0; }, sh);
}

__global__ void __launch_bounds__(kSelThreads) candidate_blocks_block_k(CandidateBlocksArgs a) {
  __shared__ SelShared sh;
  const int64_t s = blockIdx.x, bs = a.block_size, nb = (a.t + bs - 1) / bs;
  const float* sc = a.scores + s * a.t;
  uint8_t* keep = a.keep + s * a.t;
  const int64_t len = (a.q_pos[s] + 1) / a.ratio;
  const int64_t last = len - 1 >= 0 ? (len - 1) / bs : -1;  // the newest visible position's block: pinned
  block_topk(
      nb, a.topk_blocks,
      [&](int64_t b) {
        if (b == last) return order_key(INFINITY);
        float m = -INFINITY;
        for (int64_t j = b * bs; j < min(a.t, (b + 1) * bs); ++j) m = fmaxf(m, sc[j]);
        return order_key(m);
      },
      [&](int64_t b, bool v) {
        for (int64_t j = b * bs; j < min(a.t, (b + 1) * bs); ++j) keep[j] = v ? 1 : 0;
      },
      sh);
}

__global__ void router_k(RouterArgs a, float* scratch) {
  const int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (r >= a.rows) return;
  const float* z = a.logits + r * a.experts;
  float* sc = scratch + r * a.experts * 2;
  float* biased = sc + a.experts;
  float mx = -INFINITY, den = 0.0f;
  if (a.func == ScoringFunc::kSoftmax) {
    for (int64_t e = 0; e < a.experts; ++e) mx = fmaxf(mx, z[e] / a.temp);
    for (int64_t e = 0; e < a.experts; ++e) den += expf(z[e] / a.temp - mx);
  }
  for (int64_t e = 0; e < a.experts; ++e) {
    const float v = z[e] / a.temp;
    sc[e] = a.func == ScoringFunc::kSoftmax ? expf(v - mx) / den
            : a.func == ScoringFunc::kSigmoid ? 1.0f / (1.0f + expf(-v))
                                               : sqrtf(v > 20.0f ? v : log1pf(expf(v)));
    biased[e] = sc[e] + (a.bias ? a.bias[e] : 0.0f);
  }
  float sum = 0.0f;
  for (int64_t i = 0; i < a.top_k; ++i) {
    int64_t best = -1;
    for (int64_t e = 0; e < a.experts; ++e) {
      bool taken = false;
      for (int64_t p = 0; p < i; ++p) taken = taken || a.ids[r * a.top_k + p] == e;
      if (!taken && (best < 0 || biased[e] > biased[best])) best = e;
    }
    a.ids[r * a.top_k + i] = static_cast<int32_t>(best);
    sum += sc[best];
  }
  for (int64_t i = 0; i < a.top_k; ++i) {
    float w = sc[a.ids[r * a.top_k + i]];
    if (a.normalize && a.top_k > 1) w = w / (sum + 1e-20f);
    a.weights[r * a.top_k + i] = w * a.routed_scaling;
  }
}

constexpr int kThreads = 256;
unsigned grid(int64_t n) { return static_cast<unsigned>(ceil_div(n, kThreads)); }

}  // namespace

void attention(const AttentionArgs& a, cudaStream_t s) {
  if (a.s * a.heads == 0) return;
  const bool comp = a.comp && a.comp_sel && a.t_comp > 0;
  // A multi-sequence call's entries are rows of float buffers: 16-byte aligned when the row is.
  const bool entries_aligned = a.seqs ? a.head_dim % 4 == 0 && a.max_t_win + a.max_t_comp < (int64_t{1} << 30)
                                      : (a.t_win == 0 || aligned16(a.win)) && (!comp || aligned16(a.comp)) &&
                                            a.t_win + (comp ? a.t_comp : 0) < (int64_t{1} << 30);
  const bool fast = !legacy_forced() && aligned16(a.q) && aligned16(a.out) && entries_aligned &&
                    ceil_div(a.heads, kAttnHeads) <= 65535;
  if (fast) {
    switch (a.head_dim) {
      case 32: return launch_attention_tiled<4, 1>(a, s);
      case 64: return launch_attention_tiled<8, 1>(a, s);
      case 128: return launch_attention_tiled<8, 2>(a, s);
      case 256: return launch_attention_tiled<8, 4>(a, s);
      case 512: return launch_attention_tiled<8, 8>(a, s);
      default: break;
    }
  }
  if (a.head_dim % 32 != 0 || a.head_dim > kMaxHeadDim) {
    std::fprintf(stderr, "deepinfer: CUDA attention needs head_dim a multiple of 32 up to %d, got %lld\n", kMaxHeadDim,
                 static_cast<long long>(a.head_dim));
    std::abort();
  }
  attention_k<<<grid(a.s * a.heads * 32), kThreads, 0, s>>>(a);
  DI_CUDA_LAUNCHED();
}
void indexer_scores(const IndexerScoreArgs& a, cudaStream_t s) {
  if (a.s * a.t == 0) return;
  const int64_t bq = a.heads > 0 && a.heads <= kIxBM && kIxBM % a.heads == 0 ? kIxBM / a.heads : 0;
  const bool fast = !legacy_forced() && bq > 0 && a.dim > 0 && a.dim % 4 == 0 && aligned16(a.q) && aligned16(a.k) &&
                    ceil_div(a.s, bq) <= 65535;
  if (fast) {
    static bool attr_done[64] = {};
    int dev = 0;
    DI_CUDA_CHECK(cudaGetDevice(&dev));
    if (dev < 0 || dev >= 64 || !attr_done[dev]) {
      DI_CUDA_CHECK(cudaFuncSetAttribute(indexer_tiled_k, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kIxSmem)));
      if (dev >= 0 && dev < 64) attr_done[dev] = true;
    }
    const dim3 g(static_cast<unsigned>(ceil_div(a.t, kIxBN)), static_cast<unsigned>(ceil_div(a.s, bq)));
    indexer_tiled_k<<<g, kIxThreads, kIxSmem, s>>>(a, static_cast<int>(bq));
    DI_CUDA_LAUNCHED();
    return;
  }
  indexer_scores_k<<<grid(a.s * a.t), kThreads, 0, s>>>(a);
  DI_CUDA_LAUNCHED();
}
void topk_mask(const TopkMaskArgs& a, cudaStream_t s) {
  if (a.s == 0) return;
  if (!legacy_forced()) {
    topk_mask_block_k<<<static_cast<unsigned>(a.s), kSelThreads, 0, s>>>(a);
  } else {
    topk_mask_k<<<grid(a.s), kThreads, 0, s>>>(a);
  }
  DI_CUDA_LAUNCHED();
}
void candidate_blocks(const CandidateBlocksArgs& a, cudaStream_t s) {
  if (a.s == 0) return;
  if (!legacy_forced()) {
    candidate_blocks_block_k<<<static_cast<unsigned>(a.s), kSelThreads, 0, s>>>(a);
    DI_CUDA_LAUNCHED();
    return;
  }
  const int64_t nb = (a.t + a.block_size - 1) / a.block_size;
  float* bs = nullptr;
  uint8_t* bsel = nullptr;
  DI_CUDA_CHECK(cudaMallocAsync(&bs, static_cast<size_t>(a.s * nb) * sizeof(float), s));
  DI_CUDA_CHECK(cudaMallocAsync(&bsel, static_cast<size_t>(a.s * nb), s));
  candidate_blocks_k<<<grid(a.s), kThreads, 0, s>>>(a, bs, bsel);
  DI_CUDA_LAUNCHED();
  DI_CUDA_CHECK(cudaFreeAsync(bs, s));
  DI_CUDA_CHECK(cudaFreeAsync(bsel, s));
}
void router(const RouterArgs& a, cudaStream_t s) {
  if (a.rows == 0) return;
  float* scratch = nullptr;
  DI_CUDA_CHECK(cudaMallocAsync(&scratch, static_cast<size_t>(a.rows * a.experts * 2) * sizeof(float), s));
  router_k<<<grid(a.rows), kThreads, 0, s>>>(a, scratch);
  DI_CUDA_LAUNCHED();
  DI_CUDA_CHECK(cudaFreeAsync(scratch, s));
}

}  // namespace deepinfer::kernels::cuda
