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
// not cover. On a bf16 backend the same CTA structure runs on the tensor cores (attention_mma_k:
// bf16 mma.sync, float32 softmax and accumulation).
//
// This file: the dispatch and the combine of the splits; the kernels are in attention_f32.cu
// (float32: the first version and the tiled kernel), attention_mma.cu (tensor cores) and
// attention_staging.cu (the entries rounded to bf16, packed windows unpacked); attention.cuh
// holds what they share.
#include <algorithm>
#include <cstdlib>

#include "kernels/cuda/attention.cuh"

namespace deepinfer::kernels::cuda {

namespace {

using namespace detail;

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

}  // namespace

namespace detail {

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

void launch_combine(const AttentionArgs& g, int nsplit, const float* part_o, const float* part_ml, int64_t q0, Stream s) {
  const int64_t pairs = g.s * g.heads * g.head_dim / 2;
  launch_k(attention_combine_k, static_cast<unsigned>(ceil_div(pairs, 256)), 256, 0, s, g, nsplit, part_o, part_ml, q0);
}

}  // namespace detail

void attention(const AttentionArgs& a, bool bf16, Temp& tmp, Stream s) {
  if (a.s * a.heads == 0) return;
  const bool comp = a.comp && a.comp_sel && a.t_comp > 0;
  // A multi-sequence call's entries are rows of float buffers: 16-byte aligned when the row is.
  const bool entries_aligned = a.seqs ? a.head_dim % 4 == 0 && a.max_t_win + a.max_t_comp < (int64_t{1} << 30)
                                      : (a.t_win == 0 || aligned16(a.win)) && (!comp || aligned16(a.comp)) &&
                                            a.t_win + (comp ? a.t_comp : 0) < (int64_t{1} << 30);
  const bool fast = aligned16(a.q) && aligned16(a.out) && entries_aligned &&
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
    unpack_windows(a, seqs, wins, rows, chunks, s);
    AttentionArgs b = a;
    b.seqs = seqs;
    b.win_block = 0;
    attention(b, bf16, tmp, s);
    tmp.give(seqs);
    tmp.give(wins);
    return;
  }
  // The tensor cores (head dims 64-512), else the float32 tiled kernel, else the first version.
  if (mma && attention_mma(a, tmp, s)) return;
  if (fast && attention_tiled(a, tmp, s)) return;
  attention_simple(a, s);
}
}  // namespace deepinfer::kernels::cuda