// The CUDA backend's op functions (device pointers in every args struct), one file per op
// family: elementwise.cu (norms, RoPE, fake quantisation, mHC, SwiGLU, Engram gate),
// attention.cu, indexer.cu, select.cu (top-k, candidate blocks, router), gather.cu (gathers,
// scale, MoE combine, packed dequantisation, batched copies), moe.cu (MoE permutation, grouped
// expert GEMM), matmul.cu (bf16 conversion,
// random fills), cuda_backend.cu (matmul, memory and the Backend object); tiling.cuh holds the
// helpers the attention/indexer/selection kernels share.
#pragma once

#include <cuda_runtime.h>

#include "kernels/backend.h"
#include "kernels/cuda/cuda_common.cuh"

namespace deepinfer::kernels::cuda {

void rms_norm(const RmsNormArgs& a, cudaStream_t s);
void rope(const RopeArgs& a, cudaStream_t s);
void swiglu(const SwigluArgs& a, cudaStream_t s);
void compress_pool(const CompressPoolArgs& a, cudaStream_t s);
void fake_quant(const FakeQuantArgs& a, cudaStream_t s);
// part: scratch of hc_mixes_scratch(rows) floats.
void hc_mixes(const HcMixesArgs& a, float* part, cudaStream_t s);
int64_t hc_mixes_scratch(int64_t rows);
void hc_collapse(const HcCollapseArgs& a, cudaStream_t s);
void hc_expand(const HcExpandArgs& a, cudaStream_t s);
void engram_gate(const EngramGateArgs& a, cudaStream_t s);
void attention(const AttentionArgs& a, cudaStream_t s);
void indexer_scores(const IndexerScoreArgs& a, cudaStream_t s);
void candidate_blocks(const CandidateBlocksArgs& a, cudaStream_t s);
void topk_mask(const TopkMaskArgs& a, cudaStream_t s);
void router(const RouterArgs& a, cudaStream_t s);
void gather_weight_rows(const GatherWeightRowsArgs& a, cudaStream_t s);
void scale(const ScaleArgs& a, cudaStream_t s);
void gather_rows(const GatherRowsArgs& a, cudaStream_t s);
void moe_combine(const MoeCombineArgs& a, cudaStream_t s);
void dequant_packed(const DequantPackedArgs& a, cudaStream_t s);
// matmul.cu: x [m, k] (row stride ldx) rounded to bf16 into out [mp, k] (rows m.. zero); rows of w dequantised
// into bf16 (exact for bf16/FP8/FP4 storage); seeded random fills.
void to_bf16(const float* x, int64_t m, int64_t mp, int64_t k, int64_t ldx, void* out, cudaStream_t s);
void dequant_bf16(const WeightView& w, int64_t row0, int64_t n, void* out, cudaStream_t s);
void fill_random(const RandomFillArgs& a, cudaStream_t s);
void copy_batch(const CopyBatchArgs& a, cudaStream_t s);
void dequant_packed_batch(const DequantPackedBatchArgs& a, cudaStream_t s);
// moe.cu: the routing grouped by expert (counts: scratch of a.experts ints); the experts'
// products on bf16 tensor cores: x bf16 [rows, k], w a device table of `experts` bf16 [n, k]
// matrices (16-byte aligned), offsets as MoePermuteArgs.offsets; needs grouped_gemm_bf16_fits.
void moe_permute(const MoePermuteArgs& a, int32_t* counts, cudaStream_t s);
bool grouped_gemm_bf16_fits(int64_t n, int64_t k);
void grouped_gemm_bf16(const void* x, const void* const* w, const int32_t* offsets, float* y, int64_t rows, int64_t n,
                       int64_t k, int64_t experts, cudaStream_t s);
// Rows [row0, row0 + n) of w as float32: out [n, w.cols] (device).
void dequant(const WeightView& w, int64_t row0, int64_t n, float* out, cudaStream_t s);

}  // namespace deepinfer::kernels::cuda
