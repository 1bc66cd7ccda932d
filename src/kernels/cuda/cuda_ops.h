// The CUDA backend's op functions (device pointers in every args struct; each takes the
// backend's Stream, which carries its Settings). One file per op family, with the CPU
// reference's stems (kernels/cpu): linear.cu (bf16 conversion, the any-format grouped product)
// and linear_bf16.cu / .cuh (the bf16 GEMM), norm.cu (RMSNorm, RoPE, norm_rope_quant),
// elementwise.cu (SwiGLU, compressor pooling), quant.cu (fake and weight quantisation), mhc.cu
// (mHC mixes, collapse, expand, Engram gate), attention.cu (dispatch; attention_f32.cu, attention_mma.cu,
// attention_staging.cu the kernels), indexer.cu, select.cu (top-k, candidate blocks), moe.cu
// (router, MoE permutation), gather.cu (gathers, scale, MoE combine, packed dequantisation,
// batched copies, random fills), sample.cu, weights.cu (weight dequantisation); backend.cu is the
// Backend object (memory, cuBLAS matmul), backend_launch.cu / backend_upload.cu its launch
// helpers and upload kernels, backend_settings.h its settings. tiling.cuh holds the helpers the
// attention/indexer/selection kernels share.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/backend.h"
#include "kernels/cuda/cuda_common.cuh"

namespace deepinfer::kernels::cuda {

void rms_norm(const RmsNormArgs& a, Stream s);
void rope(const RopeArgs& a, Stream s);
void swiglu(const SwigluArgs& a, Stream s);
void compress_pool(const CompressPoolArgs& a, Stream s);
void fake_quant(const FakeQuantArgs& a, Stream s);
// A warp per scale block (kernels::quantize_weight_rows's rule, the same bytes).
void quantize_weight(const QuantizeWeightArgs& a, Stream s);
// part: scratch of hc_mixes_scratch(rows) floats; counters: kGemmCounters zeroed ints, left
// zeroed (or null: a second launch finishes the mixes).
void hc_mixes(const HcMixesArgs& a, float* part, int* counters, Stream s);
int64_t hc_mixes_scratch(int64_t rows);
void hc_collapse(const HcCollapseArgs& a, Stream s);
// Every item's norm, RoPE and fake quantisation: the items that fit in one launch (a block per
// row), the others as rms_norm, rope and fake_quant.
void norm_rope_quant(const NormRopeQuantArgs* items, int64_t n, Stream s);
// Both in one launch (the collapse's rows in blocks of the mixes' launch) where the collapse
// takes its fused norm kernel, else hc_mixes then hc_collapse; part and counters as hc_mixes'.
void hc_mixes_collapse(const HcMixesArgs& m, const HcCollapseArgs& c, float* part, int* counters, Stream s);
void hc_expand(const HcExpandArgs& a, Stream s);
void engram_gate(const EngramGateArgs& a, Stream s);
// Stream-ordered temporary memory for an op's launches (the backend's cached blocks: taking or
// giving one back is no driver call, where a cudaMallocAsync between two launches would end
// their programmatic overlap).
class Temp {
 public:
  virtual void* take(size_t bytes) = 0;
  virtual void give(void* p) = 0;
  template <class T>
  T* take_n(int64_t n) {
    return static_cast<T*>(take(static_cast<size_t>(n) * sizeof(T)));
  }

 protected:
  ~Temp() = default;
};
// bf16: a bf16 backend (its tensor-core kernel rounds Q and the entries to bf16).
void attention(const AttentionArgs& a, bool bf16, Temp& temp, Stream s);
void indexer_scores(const IndexerScoreArgs& a, Stream s);
void candidate_blocks(const CandidateBlocksArgs& a, Stream s);
void topk_mask(const TopkMaskArgs& a, Stream s);
// Batches (backend.h OpBatch): one launch over every item, the items' args copied to the device
// (dev_items) and read there; host_items sizes the grid. Each item's outputs are bitwise its own
// call's. The indexer's batch needs indexer_scores_batch_fits (every item takes the tiled
// kernel, one head count); the selections select_batch_fits.
bool indexer_scores_batch_fits(const IndexerScoreArgs* items, int64_t n);
void indexer_scores_batch(const IndexerScoreArgs* host_items, const IndexerScoreArgs* dev_items, int64_t n, Stream s);
bool select_batch_fits(int64_t n);
void topk_mask_batch(const TopkMaskArgs* host_items, const TopkMaskArgs* dev_items, int64_t n, Stream s);
void candidate_blocks_batch(const CandidateBlocksArgs* host_items, const CandidateBlocksArgs* dev_items, int64_t n,
                            Stream s);
void router(const RouterArgs& a, Stream s);
// router then moe_permute, in one launch for up to 32 rows (fewer with many experts: moe.cu).
void route(const RouterArgs& r, const MoePermuteArgs& p, Stream s);
// scratch: sample_rows_scratch_bytes(a) bytes of device memory (the rows' weights, fp64).
int64_t sample_rows_scratch_bytes(const SampleRowsArgs& a);
void sample_rows(const SampleRowsArgs& a, void* scratch, Stream s);
void gather_weight_rows(const GatherWeightRowsArgs& a, Stream s);
void scale(const ScaleArgs& a, Stream s);
void gather_rows(const GatherRowsArgs& a, Stream s);
void moe_combine(const MoeCombineArgs& a, Stream s);
// moe_combine with each element then expanded into the streams (e.y is a.y), one launch.
void moe_combine_expand(const MoeCombineArgs& a, const HcExpandArgs& e, Stream s);
void dequant_packed(const DequantPackedArgs& a, Stream s);
// x [m, k] (row stride ldx) rounded to bf16 into out [mp, k] (rows m.. zero); rows of w dequantised
// into bf16 (exact for bf16/FP8/FP4 storage); seeded random fills.
void to_bf16(const float* x, int64_t m, int64_t mp, int64_t k, int64_t ldx, void* out, Stream s);
void dequant_bf16(const WeightView& w, int64_t row0, int64_t n, void* out, Stream s);
// dst (device) = n bytes of src, pinned host memory the device reads directly (a kernel, so it
// joins the programmatic launch chain, where a copy-engine transfer would not).
void host_copy(void* dst, const void* src, int64_t n, Stream s);
// Up to kInlineCopyMax bytes to a 16-byte aligned dst, carried in the launch's parameters (src
// may be reused at once); false (nothing done) for other sizes or addresses.
constexpr int kInlineCopyMax = 4064;  // (its parameters within the classic 4 KB)
bool inline_copy(void* dst, const void* src, int64_t n, Stream s);
// Backend::upload_batch in one launch: the uploads' bytes in its parameters, then the copies
// (up to kInlineScatterItems items, kInlineScatterBytes bytes of uploads with each item's rounded
// up to 16, each upload's dst 16-byte aligned, kInlineScatterDeviceBytes of copies); false
// (nothing done) otherwise.
constexpr int kInlineScatterItems = 32, kInlineScatterBytes = 3072, kInlineScatterDeviceBytes = 32768;
bool inline_scatter(const UploadItem* items, int64_t n, Stream s);
void fill_random(const RandomFillArgs& a, Stream s);
void copy_batch(const CopyBatchArgs& a, Stream s);
void dequant_packed_batch(const DequantPackedBatchArgs& a, Stream s);
// The routing grouped by expert (one launch).
void moe_permute(const MoePermuteArgs& a, Stream s);
// y = x · wᵀ on bf16 tensor cores (mma.sync, float32 accumulation in one fixed k order: a
// row's bits depend on nothing but its own x row and w). Dense (offsets null: rows [0, m),
// one weight, `groups` strided problems on grid z) or grouped by expert (offsets as
// MoePermuteArgs.offsets, w_table a device copy of the experts' bf16 views). Needs
// gemm_bf16_fits(n, k), 16-byte aligned rows (ldx, strides multiples of 8) and even ldy.
// One of several products in one launch: the same x (rows, k), its own weights (dense, or an
// expert table when grouped), output and columns; the parts' column tiles follow each other
// along grid x. Each part's k segments are the ones it has alone (gemm_split.h), so its bits
// are the same as in a launch of its own.
struct Bf16Part {
  const void* w_dense = nullptr;           // [n, k] in Bf16Gemm::w_format (+ w_scale)
  const uint8_t* w_scale = nullptr;
  const WeightView* w_table = nullptr;     // grouped: [experts] (device)
  float* y = nullptr;                      // [m, ldy]
  int64_t ldy = 0;
  int n = 0;
  // Set by gemm_bf16: the k segment length, the first grid-x index and tile counter, and the
  // partial sums' offset in Bf16Gemm::part.
  int ks = 0, unit0 = 0, counter0 = 0;
  int64_t part_off = 0;
};
constexpr int kMaxBf16Parts = 6;
struct Bf16Gemm {
  const __nv_bfloat16* x = nullptr;  // [m, ldx] bf16, or
  const float* x_f32 = nullptr;      // [m, ldx] float32 (rounded in the kernel; see gemm_bf16_takes_f32;
                                     // y must not overlap it: blocks read x while others write y)
  int64_t ldx = 0;
  // The weights' stored format, the same for every weight of the launch: bf16, or FP8 e4m3
  // (32x32 blocks) or MXFP4 codes decoded into bf16 on their way to the tensor cores (exact:
  // the same products as on the weights dequantised to bf16). Dense FP8 / MXFP4 weights:
  // w_dense and w_scale are the matrix's first row and its scales, w_row0 the first row used
  // (a multiple of 32 for FP8 blocks); bf16 ones: w_dense is the first row used.
  WeightFormat w_format = WeightFormat::kBF16;
  const void* w_dense = nullptr;  // [n, k] (+ g * w_group_stride elements)
  const uint8_t* w_scale = nullptr;
  int64_t w_row0 = 0;
  const WeightView* w_table = nullptr;     // grouped: [experts]
  const int32_t* offsets = nullptr;        // grouped: [experts + 1]
  const int32_t* x_rows = nullptr;         // grouped, bf16 x: row r of the product reads x row x_rows[r]
  float* y = nullptr;                      // [m, ldy] fp32
  int64_t ldy = 0;
  int m = 0, n = 0, k = 0, experts = 0, groups = 1;
  int64_t x_group_stride = 0, w_group_stride = 0, y_group_stride = 0;  // elements
  // Split over k (dense products only; see gemm_bf16_split): the partial sums of
  // gemm_bf16_workspace(*this) floats, and kGemmCounters zeroed ints that the launch leaves
  // zeroed. Null: the segments are folded in registers (same bits).
  float* part = nullptr;
  int* counters = nullptr;
  // Several products of this x in one launch (parts > 0: w_dense, w_table, y, ldy and n above
  // are unused; groups 1; dense parts only in the decode tiling, see gemm_bf16_parts_fit).
  int parts = 0;
  Bf16Part part_list[kMaxBf16Parts] = {};
  // Set by gemm_bf16: the weights are loaded with an L2 evict_first policy; the k segments
  // (cluster of them, > 0) are added up inside clusters of that many blocks.
  bool stream_w = false;
  int cluster = 0;
  // The weights were written by an earlier launch on the stream (a dequantised temporary): the
  // kernel reads none of them before its programmatic wait.
  bool w_fresh = false;
};
// Zeroed tile counters a launch leaves zeroed: the split products' and hc_mixes' row groups
// (ops on one stream share one buffer).
constexpr int64_t kGemmCounters = 1 << 16;
bool gemm_bf16_fits(int64_t n, int64_t k);
// Whether the bf16 GEMM reads weights stored as `f` whose codes start at `codes` (16-byte
// aligned) and scales at `scale` (4-byte aligned), as the first row used `row0` of a matrix of
// k columns: bf16 (k a multiple of 32), FP8 32x32 blocks (row0 a multiple of 32) and MXFP4 (k a
// multiple of 128 for both).
bool gemm_bf16_reads(WeightFormat f, const void* codes, const uint8_t* scale, int64_t row0, int64_t k);
// The k segment length of a product (gemm_split.h).
int gemm_bf16_split(const Bf16Gemm& p);
// Whether the launch reads x as float32 (x_f32, 16-byte aligned rows and group strides): dense
// products in the decode tiling (at most 16 rows, k a multiple of 128).
bool gemm_bf16_takes_f32(const Bf16Gemm& p);
// Whether p's parts can share one launch: grouped ones always, dense ones at most 16 rows with k
// a multiple of 128 (the split decode tiling), within the tile counters.
bool gemm_bf16_parts_fit(const Bf16Gemm& p);
// Floats of partial sums the launch uses when p.part is given (0: no split, or one that folds
// in registers: many rows, or more tiles than counters).
int64_t gemm_bf16_workspace(const Bf16Gemm& p);
void gemm_bf16(const Bf16Gemm& p, Stream s);
// The experts' products in float32 math from any weight format (x float32; bf16: both
// operands rounded to bf16 first, as the bf16 path does). w: device copy of the views.
void grouped_gemm_any(const float* x, const WeightView* w, const int32_t* offsets, float* y, int64_t rows, int64_t n,
                      int64_t k, int64_t experts, bool bf16, Stream s);
// Rows [row0, row0 + n) of w as float32: out [n, w.cols] (device).
void dequant(const WeightView& w, int64_t row0, int64_t n, float* out, Stream s);

}  // namespace deepinfer::kernels::cuda
