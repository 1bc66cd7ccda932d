// CUDA attention on the tensor cores (bf16 backends; attention.cu dispatches): attention_mma_k,
// a CTA of 8 warps per (query, HC heads[, split]) on bf16 mma.sync with float32 softmax and
// accumulation, over the entries attention_staging.cu rounds to bf16; its launch choices (heads
// per CTA, output channels over several CTAs, clusters, folding the splits).
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdlib>

#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/mma.cuh"

#include <cooperative_groups.h>

namespace deepinfer::kernels::cuda {

namespace cg = cooperative_groups;

namespace {

using namespace detail;

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

// The entries rounded to bf16 (entries_bf16_k), then the tensor-core kernel at HC heads per CTA,
// the output channels split over DS CTAs.
template <int D, int HC, int DS = 1>
void launch_attention_mma_hc(const AttentionArgs& a, Temp& tmp, Stream s, bool fold = false) {
  using C = MmaCfg<D, HC>;
  opt_in_smem(attention_mma_k<D, HC, DS>, C::bytes);
  const int64_t n_seqs = a.seqs ? a.n_seqs : 1;
  const int64_t max_rows = a.seqs ? a.max_t_win + a.max_t_comp : a.t_win + ((a.comp && a.comp_sel) ? a.t_comp : 0);
  const int64_t total = a.seqs ? (a.total_entries > 0 ? a.total_entries : n_seqs * max_rows) : max_rows;
  auto* staged = tmp.take_n<__nv_bfloat16>(std::max<int64_t>(total, 1) * D);
  int64_t* seq_e0 = a.seqs ? tmp.take_n<int64_t>(n_seqs) : nullptr;
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(ceil_div(max_rows * (D / 8), kThreads), 4096));
  stage_entries_bf16(a, staged, total, seq_e0, chunks, s);
  if (fold) {  // every query's splits in its own CTAs, merged there: no partial sums, no combine
    const dim3 g(static_cast<unsigned>(a.s), static_cast<unsigned>(ceil_div(a.heads, HC) * DS), 1);
    launch_k(attention_mma_k<D, HC, DS>, g, kMmaT, C::bytes, s, a, staged, seq_e0, attention_splits(a), true,
             static_cast<float*>(nullptr), static_cast<float*>(nullptr), int64_t{0});
    DI_CUDA_LAUNCHED();
  } else if (const int nsplit = attention_splits(a);
             HC <= 32 && nsplit > 1 && nsplit <= 8 && s.settings->clusters &&
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
// partial sums' round trip through memory had cost 10% of a prefill. (At 64
// queries, folding or not measured within the run-to-run spread: 27.9-28.2 against 28.0-28.4
// ms a step. Long windows, of many splits, keep them in CTAs of their own below
// kAttnFoldCtas queries.)
constexpr int64_t kAttnFoldCtas = 132, kAttnFoldCtasFew = 64, kAttnFoldSplits = 8;
template <int D>
void launch_attention_mma(const AttentionArgs& a, Temp& tmp, Stream s) {
  // (64 heads: 1.24 / 1.95 s for the replayed / exact prefill, 32 heads 1.25 / 1.99 s; at head
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

namespace detail {

bool attention_mma(const AttentionArgs& a, Temp& tmp, Stream s) {
  switch (a.head_dim) {
    case 64: launch_attention_mma<64>(a, tmp, s); return true;
    case 128: launch_attention_mma<128>(a, tmp, s); return true;
    case 256: launch_attention_mma<256>(a, tmp, s); return true;
    case 512: launch_attention_mma<512>(a, tmp, s); return true;
    default: return false;
  }
}

}  // namespace detail

}  // namespace deepinfer::kernels::cuda
