// Internal to the CUDA attention (attention*.cu): the visible-entry lists and fixed segments
// the float32 tiled and tensor-core kernels share, the splits' merge arithmetic, the output's
// inverse RoPE, and the entry points of the files (attention.cu: dispatch and the combine;
// attention_f32.cu: float32 kernels; attention_mma.cu: tensor cores; attention_staging.cu: the
// entries rounded to bf16 and the packed windows unpacked).
#pragma once

#include <cuda_bf16.h>

#include <algorithm>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/tiling.cuh"

namespace deepinfer::kernels::cuda::detail {

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

constexpr int kAttnHeads = 32;   // heads per CTA
constexpr int kAttnTile = 32;    // entries per shared-memory tile (= lanes, for the softmax)
constexpr int kAttnPerThread = 4;  // candidates per thread per compaction round
constexpr int kAttnListCap = 4096;  // compacted entry indices held in shared memory
// Splits of the visible entries are fixed segments of kAttnSeg ordinals (a multiple of the
// tile), whatever the launch: a query's arithmetic (tiles, segments, the combine) depends only
// on its own visible entries, never on the chunk or the batch it came in (batch invariance).
// 128: a decode query of the released shape (window 128, 512 selected) spreads over 5 splits of
// 16 CTAs instead of 2, each running at most two 64-entry tiles instead of eight, one after the
// other (batch-1 step 6.14 -> 5.87 ms). Launches of many queries fold the splits in
// their CTAs (attention_mma_k), which makes the finer segments nearly free there (prefill 1.20
// -> 1.24 s against 512-entry segments, both folded; docs/lab/device-runs.md).
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

// attention.cu: the segments of a launch, and the combine of a launch's splits (a launch of
// attention_combine_k over g's queries, the first one q0 of the call).
int attention_splits(const AttentionArgs& a);
void launch_combine(const AttentionArgs& g, int nsplit, const float* part_o, const float* part_ml, int64_t q0, Stream s);

// Runs launch(grid, nsplit, part_o, part_ml, first query) over the queries (heads_per_cta heads
// per CTA), split into fixed segments of kAttnSeg visible entries when a query can see more,
// the splits merged by attention_combine_k.
template <class Launch>
void launch_attention(int heads_per_cta, const AttentionArgs& a, Temp& tmp, Stream s, Launch launch) {
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
    launch_combine(g, nsplit, part_o, part_ml, q0, s);
    DI_CUDA_LAUNCHED();
  }
  tmp.give(part_o);
  tmp.give(part_ml);
}

// attention_f32.cu: the float32 tiled kernel where its shapes allow (false: nothing launched),
// and the first version (a warp per (query, head)) for the others.
bool attention_tiled(const AttentionArgs& a, Temp& tmp, Stream s);
void attention_simple(const AttentionArgs& a, Stream s);
// attention_mma.cu: the tensor-core kernel for head dims 64, 128, 256 and 512 (false: nothing
// launched).
bool attention_mma(const AttentionArgs& a, Temp& tmp, Stream s);
// attention_staging.cu: entries_bf16_k over (chunks, sequences), and unpack_windows_k.
void stage_entries_bf16(const AttentionArgs& a, __nv_bfloat16* staged, int64_t total, int64_t* seq_e0, int64_t chunks,
                        Stream s);
void unpack_windows(const AttentionArgs& a, AttentionSeq* seqs, float* wins, int64_t rows, int64_t chunks, Stream s);

}  // namespace deepinfer::kernels::cuda::detail
