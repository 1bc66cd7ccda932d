// CUDA: shared-latent attention (window + selected compressed entries, sink).
//
// attention: one CTA per (query, block of 32 heads[, split of the visible entries]). The CTA
// first compacts the indices of the entries its query sees (window ∪ selected compressed) into
// shared memory, then walks them in tiles of 32 entries staged in shared memory (cp.async,
// double-buffered) and shared by all its heads: scores = Q·K_tileᵀ (Q in registers, the lanes
// split the head dimension, a reduce-scatter across lanes and warps), an online softmax per
// head started from the sink, then acc += P·V_tile (V = K: the same tile). Float32 FMA
// throughout. The visible entries split at fixed segments, combined afterwards. The first
// version (a warp per (query, head)) stays as the fallback for shapes the tiled kernel does
// not cover (DEEPINFER_CUDA_LEGACY=1 forces it).
#include <algorithm>
#include <cstdlib>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/tiling.cuh"

namespace deepinfer::kernels::cuda {

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
}  // namespace deepinfer::kernels::cuda
