// CPU reference implementations of the kernels::Backend ops, one file per op family (the
// same stems as the CUDA backend's files in kernels/cuda): linear, norm (RMSNorm, RoPE),
// elementwise, quant, mhc, attention, indexer, select (top-k), moe (router, permutation),
// gather, sample, weights; backend.cpp is the backend object.
//
// Each function is the plain reference: float32, a fixed reduction order per output element
// (so a row's result never depends on the batch or the thread split), parallel over
// independent rows through the backend's thread pool. Vectorisation comes from fixed-width
// lane accumulators that the compiler maps onto AVX-512 / AVX2 / SSE through function
// multiversioning (target_clones) chosen at run time; the lane order is in the source, so
// every instruction set gives the same bits.
#pragma once

#include "core/thread_pool.h"
#include "kernels/backend.h"

namespace deepinfer::kernels::cpu {

// Dot product with 16 lane accumulators and a fixed tree reduction.
float dot(const float* a, const float* b, int64_t k);

// The rotation of `rope_dim` channels at x (interleaved pairs) by angles (c, s), s negated for
// the inverse: rope() and attention()'s on-the-fly RoPE share it.
inline void rope_pairs(float* x, const float* c, const float* s, int64_t rope_dim, bool inverse) {
  for (int64_t i = 0; i < rope_dim / 2; ++i) {
    const float sn = inverse ? -s[i] : s[i];
    const float e = x[2 * i], o = x[2 * i + 1];
    x[2 * i] = e * c[i] - o * sn;
    x[2 * i + 1] = e * sn + o * c[i];
  }
}

void matmul(core::ThreadPool& pool, const MatmulArgs& a);
void rms_norm(core::ThreadPool& pool, const RmsNormArgs& a);
void rope(core::ThreadPool& pool, const RopeArgs& a);
void fake_quant(core::ThreadPool& pool, const FakeQuantArgs& a);
void hc_mixes(core::ThreadPool& pool, const HcMixesArgs& a);
void hc_collapse(core::ThreadPool& pool, const HcCollapseArgs& a);
void hc_expand(core::ThreadPool& pool, const HcExpandArgs& a);
void attention(core::ThreadPool& pool, const AttentionArgs& a);
void compress_pool(core::ThreadPool& pool, const CompressPoolArgs& a);
void indexer_scores(core::ThreadPool& pool, const IndexerScoreArgs& a);
void candidate_blocks(core::ThreadPool& pool, const CandidateBlocksArgs& a);
void topk_mask(core::ThreadPool& pool, const TopkMaskArgs& a);
void router(core::ThreadPool& pool, const RouterArgs& a);
void swiglu(core::ThreadPool& pool, const SwigluArgs& a);
void engram_gate(core::ThreadPool& pool, const EngramGateArgs& a);
void gather_weight_rows(core::ThreadPool& pool, const GatherWeightRowsArgs& a);
void scale(core::ThreadPool& pool, const ScaleArgs& a);
void gather_rows(core::ThreadPool& pool, const GatherRowsArgs& a);
void moe_combine(core::ThreadPool& pool, const MoeCombineArgs& a);
void moe_permute(core::ThreadPool& pool, const MoePermuteArgs& a);
void sample_rows(core::ThreadPool& pool, const SampleRowsArgs& a);
void dequant_packed(core::ThreadPool& pool, const DequantPackedArgs& a);
void fill_random(core::ThreadPool& pool, const RandomFillArgs& a);
void quantize_weight(core::ThreadPool& pool, const QuantizeWeightArgs& a);
void copy_batch(core::ThreadPool& pool, const CopyBatchArgs& a);
void dequant_packed_batch(core::ThreadPool& pool, const DequantPackedBatchArgs& a);

// Single-block fake quantisers (exposed for unit tests). codes/scale (optional) receive the
// stored form: FP8 one e4m3 byte per value, FP4 packed pairs (n even), one scale byte.
void fake_quant_fp8_pow2(float* x, int64_t n, uint8_t* codes = nullptr, uint8_t* scale = nullptr);
void fake_quant_fp4_pow2(float* x, int64_t n, uint8_t* codes = nullptr, uint8_t* scale = nullptr);
void fake_quant_fp4_e4m3(float* x, int64_t n, uint8_t* codes = nullptr, uint8_t* scale = nullptr);

}  // namespace deepinfer::kernels::cpu
