// kernels::Backend: the only seam between the model and a device.
//
// Purpose: a small set of ops the DeepSeek-V4.1 forward is written in. Each op takes one
// args struct of raw views (pointers + sizes, row-major, contiguous) and scalars; shapes and
// dtypes are commented on every field. The CPU backend (cpu/) is the reference: plain loops
// with a fixed reduction order and float32 accumulation; the CUDA backend will implement the
// same ops and be tested against it op by op.
// Invariants: an op reads only its inputs and writes only its outputs; the result of row r
// never depends on the other rows of the batch (batch invariance), nor on the thread count.
// Threading: one Backend per device; ops are called from one thread (the backend may use
// its own workers inside an op).
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>

namespace deepinfer::kernels {

// How a weight matrix [rows, cols] is stored. Every format dequantises exactly to float32.
enum class WeightFormat : uint8_t {
  kF32,         // float [rows, cols]
  kBF16,        // bf16 [rows, cols]
  kFP8Block32,  // e4m3 [rows, cols] + ue8m0 scale [ceil(rows/32), ceil(cols/32)] (32x32 blocks)
  kFP8Row32,    // e4m3 [rows, cols] + ue8m0 scale [rows, ceil(cols/32)] (32 channels of a row)
  kMXFP4,       // e2m1 pairs [rows, ceil(cols/2)] (low nibble = even column) + ue8m0 scale [rows, ceil(cols/32)]
};

// A weight matrix in its stored format (usually mapped from the checkpoint file).
struct WeightView {
  WeightFormat format = WeightFormat::kF32;
  const void* data = nullptr;
  const uint8_t* scale = nullptr;
  int64_t rows = 0, cols = 0;
  static WeightView f32(const float* p, int64_t rows, int64_t cols) { return {WeightFormat::kF32, p, nullptr, rows, cols}; }
  const float* f32() const { return format == WeightFormat::kF32 ? static_cast<const float*>(data) : nullptr; }
  explicit operator bool() const { return data != nullptr; }
};

// Row `row` of w as float32, exactly (out: [w.cols]).
void dequant_row(const WeightView& w, int64_t row, float* out);
// x · (row `row` of w) without materialising the row, bitwise equal to the float dot product
// over the dequantised row; false when w's format (or this CPU) has no fused path.
bool dot_quantized(const float* x, const WeightView& w, int64_t row, float* out);
// Bytes the stored format takes (values and scales), and of its scales alone.
int64_t weight_bytes(const WeightView& w);
int64_t weight_scale_bytes(const WeightView& w);

// y = x · wᵀ over weight rows [w_row0, w_row0 + n); with groups > 1, group g multiplies the
// columns [g*x_group_stride, +k) of x by weight rows [w_row0 + g*n, +n) into the columns
// [g*y_group_stride, +n) of y (the grouped low-rank output projection). y must not overlap x.
struct MatmulArgs {
  const float* x = nullptr;  // [m, k] fp32
  WeightView w;              // [>= w_row0 + n, k] any format (stored weight layout [out, in])
  float* y = nullptr;        // [m, n] fp32
  int64_t m = 0, n = 0, k = 0;
  int64_t ldx = 0;           // row stride of x (0: the columns the groups touch, k when groups = 1)
  int64_t ldy = 0;           // row stride of y (0: likewise, n when groups = 1)
  int64_t w_row0 = 0;        // first weight row used
  int64_t groups = 1;
  int64_t x_group_stride = 0, y_group_stride = 0;  // columns between groups (groups > 1)
  bool f32 = false;          // float32 math whatever the backend's precision (the DSpark confidence head)
};

// Several products of one x in one op (the projections that read the same activations):
// outs[i].y = x · outs[i].wᵀ, each exactly what matmul gives for it alone (a device backend
// may run them as one launch).
struct MatmulOut {
  WeightView w;       // [>= n, k]
  float* y = nullptr;  // [m, n] fp32
  int64_t n = 0;
};
constexpr int kMaxMatmulOuts = 6;
struct MultiMatmulArgs {
  const float* x = nullptr;  // [m, k] fp32
  int64_t m = 0, k = 0;
  int count = 0;
  MatmulOut outs[kMaxMatmulOuts] = {};
};

// y = w ⊙ x / sqrt(mean(x²) + eps), per row; w may be null (unweighted). In place allowed.
struct RmsNormArgs {
  const float* x = nullptr;  // [rows, dim] fp32
  const float* w = nullptr;  // [dim] fp32 or null
  float* y = nullptr;        // [rows, dim] fp32
  int64_t rows = 0, dim = 0;
  float eps = 1e-20f;
};

// Interleaved-pair RoPE on the trailing rope_dim channels of every head, in place.
struct RopeArgs {
  float* x = nullptr;          // [rows, heads, head_dim] fp32
  const float* cos = nullptr;  // [rows, rope_dim/2] fp32, angles of each row's position
  const float* sin = nullptr;  // [rows, rope_dim/2] fp32
  int64_t rows = 0, heads = 1, head_dim = 0, rope_dim = 0;
  bool inverse = false;        // conjugate rotation (uses -sin)
};

// The reference's always-on fake quantisation, per block of the last dim, in place.
enum class FakeQuant : uint8_t {
  kFp8Pow2,    // e4m3fn values, power-of-two (ue8m0) scale per block (window KV, block 32)
  kFp4Pow2,    // e2m1 values, ue8m0 scale per block (indexer q and k, block 32)
  kFp4E4m3,    // e2m1 values, e4m3 scale per block (compressed KV, block 16)
};
struct FakeQuantArgs {
  float* x = nullptr;  // [rows, dim] fp32
  int64_t rows = 0, dim = 0, block = 32;
  FakeQuant kind = FakeQuant::kFp8Pow2;
  // Optional: the stored form of the rounded values (written only when dim % block == 0):
  uint8_t* codes = nullptr;   // FP8: e4m3 [rows, dim]; FP4: e2m1 pairs [rows, dim/2] (low nibble = even channel)
  uint8_t* scales = nullptr;  // [rows, dim/block]: ue8m0 (kFp8Pow2, kFp4Pow2) or e4m3 (kFp4E4m3)
};

// x <- RMSNorm(x) (weight w, eps), then, with rope_dim > 0, RoPE on each row's last rope_dim
// channels (one head: rope with heads 1, head_dim dim), then, with block > 0, the fake
// quantisation (kind, block, codes, scales as FakeQuantArgs): those ops' results, in place.
struct NormRopeQuantArgs {
  float* x = nullptr;          // [rows, dim] fp32
  const float* w = nullptr;    // [dim] fp32 or null
  const float* cos = nullptr;  // [rows, rope_dim/2] fp32 (rope_dim > 0)
  const float* sin = nullptr;  // [rows, rope_dim/2] fp32
  uint8_t* codes = nullptr;    // as FakeQuantArgs (may be null)
  uint8_t* scales = nullptr;
  int64_t rows = 0, dim = 0, rope_dim = 0, block = 0;
  float eps = 1e-20f;
  FakeQuant kind = FakeQuant::kFp8Pow2;
};

// How far one block of a fake quantiser's input is from changing its codes: the smallest
// distance of a value to a rounding midpoint (as a fraction of the block's amax), and of the
// scale's input (amax / max code) to the point where its scale changes (relative). Another
// float32 order whose results differ by less than this rounds the block identically; nearer,
// either side is as legitimate as the other. FP8 values under amax / 16 are left out: a flip
// there moves a value by under 1/112 of the block's amax. Infinity when nothing is near.
double quant_margin(FakeQuant kind, const float* x, int64_t n);

// Values of rows stored by FakeQuantArgs.codes/scales (exact): out [rows, dim] fp32.
void dequant_fake_quant(FakeQuant kind, const uint8_t* codes, const uint8_t* scales, int64_t rows, int64_t dim,
                        int64_t block, float* out);

// mHC coefficients of one site: pre [hc], post [hc], comb [hc, hc] (Sinkhorn-normalised).
struct HcMixesArgs {
  const float* x = nullptr;      // [rows, hc * dim] fp32 residual streams
  const float* fn = nullptr;     // [(2+hc)*hc, hc*dim] fp32
  const float* scale = nullptr;  // [3] fp32
  const float* base = nullptr;   // [(2+hc)*hc] fp32
  float* pre = nullptr;          // [rows, hc] fp32
  float* post = nullptr;         // [rows, hc] fp32
  float* comb = nullptr;         // [rows, hc, hc] fp32, comb[j][k]: input stream j -> output k
  int64_t rows = 0, hc = 4, dim = 0;
  int64_t sinkhorn_iters = 20;
  float norm_eps = 1e-20f, hc_eps = 1e-6f;
};

// y = Σ_k pre_k · x_k
struct HcCollapseArgs {
  const float* x = nullptr;    // [rows, hc, dim] fp32
  const float* pre = nullptr;  // [rows, hc] fp32
  float* y = nullptr;          // [rows, dim] fp32
  int64_t rows = 0, hc = 4, dim = 0;
  // Optional: then norm_y = RMSNorm(y) (weight norm_w, may be null; eps norm_eps), exactly what
  // rms_norm gives on y (a device backend may do both in one pass).
  const float* norm_w = nullptr;
  float* norm_y = nullptr;  // [rows, dim] fp32, or null
  float norm_eps = 1e-20f;
};

// x_k <- post_k · y + Σ_j comb[j][k] · x_j  (in place on the streams)
struct HcExpandArgs {
  float* x = nullptr;           // [rows, hc, dim] fp32, residual in, streams out
  const float* y = nullptr;     // [rows, dim] fp32 sublayer output
  const float* post = nullptr;  // [rows, hc] fp32
  const float* comb = nullptr;  // [rows, hc, hc] fp32
  int64_t rows = 0, hc = 4, dim = 0;
};

// One sequence's entries in a multi-sequence attention call (AttentionArgs.seqs).
struct AttentionSeq {
  const float* win = nullptr;          // [t_win, head_dim] its window entries (float windows)
  const int64_t* win_pos = nullptr;    // [t_win]
  const float* comp = nullptr;         // [t_comp, head_dim] its compressed entries (may be null)
  const uint8_t* comp_sel = nullptr;   // [its query rows, t_comp] (may be null)
  int64_t t_win = 0, t_comp = 0;
  int64_t q0 = 0;                      // its first query row
  // Packed windows (AttentionArgs.win_block > 0): the window entries as stored in a window ring,
  // FakeQuant::kFp8Pow2 codes [t_win, head_dim] and scales [t_win, head_dim / win_block] (the
  // values dequant_packed gives), in place of win.
  const uint8_t* win_codes = nullptr;
  const uint8_t* win_scales = nullptr;
};

// Shared-latent attention (K = V) over a sliding window plus selected compressed entries,
// one softmax with a per-head sink in the denominator.
struct AttentionArgs {
  const float* q = nullptr;          // [s, heads, head_dim] fp32 (post-RoPE)
  const int64_t* q_pos = nullptr;    // [s] absolute positions of the queries
  const float* win = nullptr;        // [t_win, head_dim] fp32 window entries (post-RoPE, post-FP8)
  const int64_t* win_pos = nullptr;  // [t_win] absolute positions of the window entries
  const float* comp = nullptr;       // [t_comp, head_dim] fp32 compressed entries (may be null)
  const uint8_t* comp_sel = nullptr; // [s, t_comp] 1 = selected for that query; null = none selected
  const float* sink = nullptr;       // [heads] fp32
  float* out = nullptr;              // [s, heads, head_dim] fp32
  int64_t s = 0, heads = 0, head_dim = 0, t_win = 0, t_comp = 0;
  int64_t window = 0;                // entry q visible to query p iff p - window < q <= p
  float scale = 1.0f;
  // Several sequences in one call: query t sees the entries of seqs[q_seq[t]] (its selection
  // row is t - q0 of that sequence's comp_sel); win, win_pos, comp, comp_sel, t_win and t_comp
  // above are then unused. Both arrays in backend memory.
  const AttentionSeq* seqs = nullptr;  // [n_seqs]
  const int32_t* q_seq = nullptr;      // [s]
  int64_t n_seqs = 0;
  // Several sequences: 0 = their windows are float rows (AttentionSeq.win); > 0 = packed
  // (AttentionSeq.win_codes / win_scales), one scale per win_block channels (head_dim a multiple
  // of it). The bits are those of the call on the dequantised windows.
  int64_t win_block = 0;
  int64_t max_t_win = 0, max_t_comp = 0;  // the largest over the sequences (launch sizing)
  // At most this many compressed entries are selected per query (the indexer's top-k): launch
  // sizing only, 0 = up to t_comp. A bound below the truth never drops entries, but the rows'
  // bits then depend on the launch (the segments are sized from the bound).
  int64_t max_selected = 0;
  // Several sequences: Σ over them of t_win + (comp and comp_sel set ? t_comp : 0), the rows a
  // backend that stages the entries (CUDA, bf16) copies; 0 = not given (it then assumes
  // n_seqs x (max_t_win + max_t_comp)). A value below the truth is an error.
  int64_t total_entries = 0;
  // The queries' RoPE, applied in the call (null q_cos: q is already rotated): each query row t
  // is read rotated by its angles (q_cos/q_sin [s, rope_dim / 2], rope()'s tables) on its heads'
  // last rope_dim channels, q itself unchanged, and out is written with the inverse rotation on
  // those channels: the bits of rope(q), the call, then rope(out, inverse).
  const float* q_cos = nullptr;
  const float* q_sin = nullptr;
  int64_t rope_dim = 0;
};

// One host array for Backend::upload_batch.
struct UploadItem {
  void* dst = nullptr;        // backend memory
  const void* src = nullptr;  // host memory, or backend memory when from_device
  int64_t bytes = 0;
  bool from_device = false;
};

// Independent copies in one op (e.g. every sequence's new window entries into its ring).
struct CopyDesc {
  void* dst = nullptr;
  const void* src = nullptr;
  int64_t bytes = 0;
};
struct CopyBatchArgs {
  const CopyDesc* descs = nullptr;  // [n] in backend memory; regions must not overlap
  int64_t n = 0;
  int64_t max_bytes = 0;            // the largest copy (launch sizing)
};

// DequantPackedArgs for several row ranges in one op (every sequence's window ring).
struct PackedDesc {
  const uint8_t* codes = nullptr;
  const uint8_t* scales = nullptr;
  float* out = nullptr;
  int64_t rows = 0;
};
struct DequantPackedBatchArgs {
  FakeQuant kind = FakeQuant::kFp8Pow2;
  const PackedDesc* descs = nullptr;  // [n] in backend memory
  int64_t n = 0, dim = 0, block = 32;
  int64_t max_rows = 0;
};

// Compressor pooling: per group of `ratio` rows, per channel, softmax over the gate then
// the weighted sum of kv.
struct CompressPoolArgs {
  const float* kv = nullptr;    // [groups * ratio, dim] fp32
  const float* gate = nullptr;  // [groups * ratio, dim] fp32
  float* out = nullptr;         // [groups, dim] fp32
  int64_t groups = 0, ratio = 2, dim = 0;
};

// Indexer scores I[s, t] = Σ_h ReLU(q[s,h]·k[t]) · score_scale · w[s,h], then -inf where
// entry t is not yet visible to the query (t >= floor((pos+1)/ratio)).
struct IndexerScoreArgs {
  const float* q = nullptr;        // [s, heads, dim] fp32
  const float* k = nullptr;        // [t, dim] fp32
  const float* w = nullptr;        // [s, heads] fp32 head weights (already scaled)
  const int64_t* q_pos = nullptr;  // [s]
  float* scores = nullptr;         // [s, t] fp32
  int64_t s = 0, heads = 0, dim = 0, t = 0, ratio = 1;
  float score_scale = 1.0f;
};

// Level one of the two-level top-k: keep the `topk_blocks` best blocks of `block_size`
// positions (block score = max), the block of the newest visible position pinned.
struct CandidateBlocksArgs {
  const float* scores = nullptr;   // [s, t] fp32 (invisible = -inf)
  const int64_t* q_pos = nullptr;  // [s]
  uint8_t* keep = nullptr;         // [s, t] 1 = inside a kept block, 0 elsewhere (every element written)
  int64_t s = 0, t = 0, ratio = 1, block_size = 8, topk_blocks = 2048;
};

// Top-k per row; picks whose score is -inf are dropped. Ties: lower index first.
struct TopkMaskArgs {
  const float* scores = nullptr;      // [s, t] fp32
  const uint8_t* restrict_to = nullptr;  // [s, t] or null: scores outside are treated as -inf
  uint8_t* selected = nullptr;        // [s, t] 1 = picked, 0 elsewhere (every element written)
  int64_t s = 0, t = 0, k = 0;
};

enum class ScoringFunc : uint8_t { kSqrtSoftplus, kSoftmax, kSigmoid };

// Router: scores = f(x·gateᵀ / temp); top-k of scores + bias; weights from unbiased scores.
struct RouterArgs {
  const float* logits = nullptr;  // [rows, experts] fp32 = x·gateᵀ
  const float* bias = nullptr;    // [experts] fp32 selection-only bias (may be null)
  int32_t* ids = nullptr;         // [rows, top_k] chosen experts, ascending score order not guaranteed
  float* weights = nullptr;       // [rows, top_k] fp32 routing weights
  int64_t rows = 0, experts = 0, top_k = 0;
  float temp = 1.0f, routed_scaling = 1.0f;
  bool normalize = true;
  ScoringFunc func = ScoringFunc::kSqrtSoftplus;
};

// a = silu(min(g, limit)) · clamp(u, -limit, limit) · weight, on rows of [g | u].
struct SwigluArgs {
  const float* gate = nullptr;     // [rows, inter] fp32
  const float* up = nullptr;       // [rows, inter] fp32
  const float* weight = nullptr;   // [rows] fp32 per-row scale, or null (1)
  float* out = nullptr;            // [rows, inter] fp32
  int64_t rows = 0, inter = 0;
  float limit = 10.0f;             // <= 0: no clamps
};

// Engram residual write, per token and stream k: gate_k = sigmoid(signed sqrt of the
// normalised dot of x_k and key_k weighted by w_k), x_k += gate_k * value.
struct EngramGateArgs {
  float* x = nullptr;          // [rows, hc, dim] fp32 streams, updated in place
  const float* kv = nullptr;   // [rows, (hc+1)*dim] fp32: hc keys then the shared value
  const float* w = nullptr;    // [hc, dim] fp32 = q_weight * k_weight
  int64_t rows = 0, hc = 4, dim = 0;
  float eps = 1e-20f;
};

// Rows of a stored weight matrix by id, dequantised to float32: out row i (stride ldo) gets
// row ids[i] of w, repeated `copies` times side by side (the embedding into every mHC stream).
struct GatherWeightRowsArgs {
  WeightView w;                    // [rows_w, cols] any format
  const int64_t* ids = nullptr;    // [rows] row ids in [0, w.rows)
  float* out = nullptr;            // [rows, ldo] fp32
  int64_t rows = 0, copies = 1;
  int64_t ldo = 0;                 // 0: copies * w.cols
};

// x *= s, in place.
struct ScaleArgs {
  float* x = nullptr;  // [n] fp32
  int64_t n = 0;
  float s = 1.0f;
};

// dst[i] = src[idx[i]] (rows of `width` floats).
struct GatherRowsArgs {
  const float* src = nullptr;     // [>= max idx + 1, width] fp32
  const int32_t* idx = nullptr;   // [rows]
  float* dst = nullptr;           // [rows, width] fp32
  int64_t rows = 0, width = 0;
};

// MoE combine per token t: y[t] = Σ over its k slots in ascending expert id of
// expert_out[slot_row[t*K+k]], then + shared[t] (the reference's accumulation order).
struct MoeCombineArgs {
  const float* expert_out = nullptr;  // [n*K, D] fp32, routed outputs in any row order
  const int32_t* slot_row = nullptr;  // [n*K] row of expert_out holding slot (t, k)
  const int32_t* ids = nullptr;       // [n*K] expert of slot (t, k)
  const float* shared = nullptr;      // [n, D] fp32 shared-expert output (may be null)
  float* y = nullptr;                 // [n, D] fp32
  int64_t n = 0, k = 0, dim = 0;
};

// Groups the (token, slot) pairs of a routing by expert, stably: expert e's pairs become rows
// [offsets[e], offsets[e+1]) of the permuted order, in ascending pair index i = t*K + k.
// With `shared`, one more expert (number `experts`, the shared expert) follows, every token
// once in token order with weight 1: rows [n*K, n*K + n), so the shared expert's products run
// in the routed experts' grouped ops.
struct MoePermuteArgs {
  const int32_t* ids = nullptr;      // [n*K] expert of pair i, in [0, experts)
  const float* weights = nullptr;    // [n*K] routing weight of pair i
  int32_t* offsets = nullptr;        // [experts + 1 (+ 1 with shared)] first permuted row of each expert, then the rows
  int32_t* perm_token = nullptr;     // [n*K (+ n)] token of permuted row j
  float* perm_weight = nullptr;      // [n*K (+ n)] routing weight of permuted row j
  int32_t* slot_row = nullptr;       // [n*K] permuted row of pair i
  int64_t n = 0, k = 0, experts = 0;
  bool shared = false;
};

// y = x · w[e]ᵀ on the rows of each expert e (the routed experts' products in one op): rows
// [offsets[e], offsets[e+1]) of x and y use weight w[e]. A row's result is what matmul gives
// for it alone, whatever the other rows and their experts.
struct GroupedMatmulArgs {
  const float* x = nullptr;          // [rows, k] fp32, rows grouped by expert
  const WeightView* w = nullptr;     // [experts] host array of views, each [n, k] (any formats; CUDA's
                                     // tensor-core path needs them all in one of bf16, FP8 32x32
                                     // blocks or MXFP4, 16-byte aligned)
  const int32_t* offsets = nullptr;  // [experts + 1] in backend memory (MoePermuteArgs.offsets)
  float* y = nullptr;                // [rows, n] fp32
  int64_t rows = 0, n = 0, k = 0, experts = 0;
  // Optional: a second product of the same rows and shape, y2 = x · w2[e]ᵀ (an expert's gate
  // and up projections in one op), each exactly what it gives alone.
  const WeightView* w2 = nullptr;  // [experts] like w, or null
  float* y2 = nullptr;             // [rows, n] fp32
  // Optional: the rows gathered on the way in, as gather_rows into a [rows, k] copy and then
  // this op would (the same bits): product row r reads x row x_rows[r] (backend memory, each
  // below x_src_rows, the rows x then has).
  const int32_t* x_rows = nullptr;  // [rows], or null
  int64_t x_src_rows = 0;
};

// Several independent calls of one op in one (e.g. one sequence each): items[i] is what the
// op would be given alone, and the result is the same as n separate calls. The items may run
// concurrently: no item's output may be another's input. `items` is a host array (the
// descriptors; the pointers in them are backend memory).
template <class Args>
struct OpBatch {
  const Args* items = nullptr;
  int64_t n = 0;
};

// The values of rows stored by FakeQuantArgs.codes/scales (exact), on the backend.
struct DequantPackedArgs {
  FakeQuant kind = FakeQuant::kFp8Pow2;
  const uint8_t* codes = nullptr;   // as FakeQuantArgs.codes
  const uint8_t* scales = nullptr;  // as FakeQuantArgs.scales
  float* out = nullptr;             // [rows, dim] fp32
  int64_t rows = 0, dim = 0, block = 32;
};

// How the backend draws one row's token: the sampler's steps (3)-(5) (sample/sampler.h) for a
// row that nothing changed before them (no penalties, mask, pending min_tokens), and its raw
// logprobs (step (0)). temperature < kDrawGreedyTemperature: greedy, the largest value with ties to the lowest id (NaN counted as -inf,
// nothing finite: 0). Otherwise x = value / temperature in fp64 (+inf values share the mass
// equally), min-p keeps x - max >= log_min_p, top-k (0 < top_k < cols) keeps x >= the k-th
// largest, top-p (< 1) keeps the tokens ranked (weight descending, id ascending) while the mass
// ranked before them is < top_p * total, and the draw is the inverse CDF at u * total in
// ascending id order. u and log(min_p) come from the host (the request's seeded RNG), so the
// backend needs no RNG and no log.
inline constexpr float kDrawGreedyTemperature = 1e-5f;  // = sample::kGreedyTemperature
struct DrawParams {
  float temperature = 0.0f;
  int32_t top_k = 0;                // 0 or >= cols: off
  float top_p = 1.0f;               // >= 1: off
  double log_min_p = -std::numeric_limits<double>::infinity();  // log(min_p); -inf: off
  double u = 0.0;                   // uniform in [0, 1)
  // >= 0: also the drawn token's logprob (the raw row's log-softmax, core::log_softmax) and the
  // best `logprobs` tokens (logprob descending, id ascending) with theirs.
  int32_t logprobs = -1;
};

// Sampling on the backend: one token per row, only the ids (and requested logprobs) come back.
// A row with a NaN, or with no value above -inf, has no token: its id is kNoToken (its logprob
// -inf), and the engine fails the row's request (the host sampler's rule for such rows).
constexpr int32_t kNoToken = -1;
struct SampleRowsArgs {
  const float* x = nullptr;              // [rows, cols] fp32 raw logits
  const DrawParams* params = nullptr;    // [rows] backend memory; null: every row greedy
  int32_t* ids = nullptr;                // [rows] (kNoToken: see above)
  int64_t rows = 0, cols = 0;
  // For rows whose params ask for logprobs (may be null when none does): [rows] the drawn
  // token's logprob; [rows, max_logprobs] the best ids and logprobs (past the row's count: -1, 0).
  float* logprob = nullptr;
  int32_t* top_ids = nullptr;
  float* top_logprobs = nullptr;
  int64_t max_logprobs = 0;
};

// Seeded normal values for random weights: out[i] = mean + std * z_(first + i) with
// z_j = core::normal01(seed, j) (Box-Muller in double), stored as float32 or bf16 (round to
// nearest even). mean == 0 stores std * z exactly as the CPU's random_weights does. `first`
// lets a long stream be made in pieces (the same values as in one call).
struct RandomFillArgs {
  void* out = nullptr;                        // [n] float or bf16
  WeightFormat format = WeightFormat::kF32;   // kF32 or kBF16
  int64_t n = 0;
  uint64_t seed = 0;
  float mean = 0.0f, std = 1.0f;
  int64_t first = 0;                          // the stream index of out[0]
};

// Float32 rows quantised into a stored weight format, the bytes model::quantize_matrix gives
// (one rule: quantize_weight_rows). Per block (32 x 32 values for kFP8Block32, 32 columns of
// a row otherwise; the last ones partial) the scale is 2^ceil(log2(amax / max code)) (max code
// 448 for e4m3, 6 for e2m1; amax ignores NaN), as a ue8m0 code clamped to [0, 254], code 0 for
// a block with no nonzero value; each value x is stored as the code of clamp(x / scale, -max,
// max), rounded to nearest even (e2m1: the reference's tie rule; a NaN stays NaN in e4m3 and
// becomes a signed zero in e2m1). The rows are rows [row0, row0 + rows) of a matrix whose
// codes and scales are laid out as WeightFormat says; only their codes and scales are written,
// so a matrix can be quantised in row chunks. kFP8Block32: row0 is a multiple of 32, and so is
// rows unless the chunk ends the matrix (a block never spans two calls).
struct QuantizeWeightArgs {
  const float* x = nullptr;   // [rows, cols] fp32
  int64_t rows = 0, cols = 0;
  int64_t row0 = 0;           // the first row's index in the matrix
  WeightFormat format = WeightFormat::kFP8Block32;  // kFP8Block32, kFP8Row32 or kMXFP4
  uint8_t* codes = nullptr;   // the matrix's: e4m3 [row0 + rows, cols], or e2m1 pairs [row0 + rows, ceil(cols/2)]
  uint8_t* scales = nullptr;  // the matrix's ue8m0: [ceil((row0 + rows)/32) (kFP8Block32) or row0 + rows, ceil(cols/32)]
};
// The rule on host memory, serially (the CPU backend's op runs it over its threads).
void quantize_weight_rows(const QuantizeWeightArgs& a);

// How a backend multiplies matrices: kFloat32 = every weight dequantised exactly and float32
// math (the reference path); kBF16 = activations rounded to bf16 and weights in bf16
// (quantised ones dequantised into bf16, which is exact for FP8/FP4 codes with power-of-two
// scales), float32 accumulation: tensor cores on CUDA, emulated on the CPU.
enum class Precision : uint8_t { kFloat32, kBF16 };

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;

  // Memory. Every pointer an op takes is backend memory: host memory for the CPU backend
  // (which also accepts any host pointer), device memory (cudaMalloc) for CUDA. Copies are
  // ordered with the ops; download() returns once the bytes are on the host.
  virtual bool host_memory() const = 0;
  virtual void* alloc(int64_t bytes) = 0;
  virtual void release(void* p) = 0;
  virtual void upload(void* dst, const void* src, int64_t bytes) = 0;    // host -> backend
  // Several uploads, then copies within backend memory (items from_device), as one op where the
  // backend can (a step's small inputs, a layer's descriptors and ring writes: one launch on
  // CUDA); each host src may be reused once this returns, as upload's. The copies' regions must
  // not overlap each other or the uploads'. By default: upload per host item, then one
  // copy_batch.
  virtual void upload_batch(const UploadItem* items, int64_t n);
  // An upload of `bytes` that `fill` writes into host memory the backend provides (pinned on
  // CUDA: packed in place, copied once), which may run alongside the ops issued after it: the
  // copy starts once the ops issued before it are done (dst may be in use until then), and
  // the ops issued after await_uploads() see its bytes (synchronize() implies it). By default:
  // fill a host array, then upload.
  virtual void upload_ahead(void* dst, int64_t bytes, const std::function<void(uint8_t*)>& fill);
  virtual void await_uploads() {}
  virtual void download(void* dst, const void* src, int64_t bytes) = 0;  // backend -> host
  virtual void copy(void* dst, const void* src, int64_t bytes) = 0;      // backend -> backend, no overlap
  virtual void zero(void* p, int64_t bytes) = 0;
  // Bytes a memory budget may draw on: physical RAM (CPU), free device memory now (CUDA).
  virtual int64_t memory_available() const = 0;

  virtual void gather_weight_rows(const GatherWeightRowsArgs& a) = 0;
  virtual void scale(const ScaleArgs& a) = 0;
  virtual void gather_rows(const GatherRowsArgs& a) = 0;
  virtual void moe_combine(const MoeCombineArgs& a) = 0;
  virtual void dequant_packed(const DequantPackedArgs& a) = 0;
  virtual void fill_random(const RandomFillArgs& a) = 0;
  virtual void quantize_weight(const QuantizeWeightArgs& a) = 0;
  virtual void copy_batch(const CopyBatchArgs& a) = 0;
  virtual void dequant_packed_batch(const DequantPackedBatchArgs& a) = 0;
  virtual void moe_permute(const MoePermuteArgs& a) = 0;
  virtual void sample_rows(const SampleRowsArgs& a) = 0;
  // Default: the offsets read back to the host, then one matmul per expert with rows.
  virtual void grouped_matmul(const GroupedMatmulArgs& a);
  // Default: one matmul per output.
  virtual void multi_matmul(const MultiMatmulArgs& a);
  // Fused pairs of ops (default: the two calls, in this order; a device backend may run them as
  // one launch, with the same bits):
  // - an mHC site's mixes and its collapse, which uses the previous site's pre (c.pre is not
  //   m.pre: neither reads what the other writes);
  // - the router and the permutation of its choices (p.ids / p.weights are r.ids / r.weights);
  // - the MoE combine and the expand of its output (e.y is c.y, which is written too).
  // (Each pairing rule: the predicates below, which every implementation checks.)
  virtual void hc_mixes_collapse(const HcMixesArgs& m, const HcCollapseArgs& c);
  virtual void route(const RouterArgs& r, const MoePermuteArgs& p);
  virtual void moe_combine_expand(const MoeCombineArgs& c, const HcExpandArgs& e);
  static bool mixes_collapse_apart(const HcMixesArgs& m, const HcCollapseArgs& c) {
    return m.pre != c.pre || m.rows == 0 || c.rows == 0;
  }
  static bool route_paired(const RouterArgs& r, const MoePermuteArgs& p) {
    return p.ids == r.ids && p.weights == r.weights && p.n == r.rows && p.k == r.top_k && p.experts == r.experts;
  }
  static bool combine_expand_paired(const MoeCombineArgs& c, const HcExpandArgs& e) {
    return e.y == c.y && e.rows == c.n && e.dim == c.dim;
  }
  // Each item's norm, RoPE and fake quantisation (default: rms_norm, rope, fake_quant per item;
  // a device backend may run every item in one launch, with the same bits).
  virtual void norm_rope_quant(const OpBatch<NormRopeQuantArgs>& b);
  // The indexer's ops over several sequences at once (default: one call per item).
  virtual void indexer_scores_batch(const OpBatch<IndexerScoreArgs>& b);
  virtual void candidate_blocks_batch(const OpBatch<CandidateBlocksArgs>& b);
  virtual void topk_mask_batch(const OpBatch<TopkMaskArgs>& b);
  virtual Precision precision() const { return Precision::kFloat32; }

  virtual void matmul(const MatmulArgs& a) = 0;
  virtual void rms_norm(const RmsNormArgs& a) = 0;
  virtual void rope(const RopeArgs& a) = 0;
  virtual void fake_quant(const FakeQuantArgs& a) = 0;
  virtual void hc_mixes(const HcMixesArgs& a) = 0;
  virtual void hc_collapse(const HcCollapseArgs& a) = 0;
  virtual void hc_expand(const HcExpandArgs& a) = 0;
  virtual void attention(const AttentionArgs& a) = 0;
  virtual void compress_pool(const CompressPoolArgs& a) = 0;
  virtual void indexer_scores(const IndexerScoreArgs& a) = 0;
  virtual void candidate_blocks(const CandidateBlocksArgs& a) = 0;
  virtual void topk_mask(const TopkMaskArgs& a) = 0;
  virtual void router(const RouterArgs& a) = 0;
  virtual void swiglu(const SwigluArgs& a) = 0;
  virtual void engram_gate(const EngramGateArgs& a) = 0;
  // Waits for every op issued so far (device backends run them asynchronously).
  virtual void synchronize() {}

  // Graphs (device backends that have them; graphs() false: the others are never called).
  // The ops issued between begin_capture(pool) and end_capture() are recorded, not run, and
  // replay(graph) runs them again: the same pointers, sizes and launch shapes, so whatever
  // they read must be at the same addresses (and refreshed in place) at every replay. Memory
  // allocated during a capture comes from `pool`, is the graph's for good (a replay writes to
  // it) and is shared by every graph of the pool: a pool's graphs must never be in flight
  // together. Uploads, downloads, await_uploads, synchronising, and releasing memory allocated
  // outside the capture are not allowed during one (the backend aborts, naming the call).
  virtual bool graphs() const { return false; }
  virtual int64_t new_graph_pool() { return -1; }
  virtual void begin_capture(int64_t /*pool*/) {}
  virtual int64_t end_capture() { return -1; }
  virtual void replay(int64_t /*graph*/) {}
  // Frees the pool's memory and every graph captured into it.
  virtual void free_graph_pool(int64_t /*pool*/) {}
};

// The CPU reference backend; n_threads <= 0 picks DEEPINFER_THREADS or the core count.
// Precision::kBF16 emulates the CUDA bf16 path (x and weights rounded to bf16, float32 math).
std::unique_ptr<Backend> make_cpu_backend(int n_threads = 0, Precision precision = Precision::kFloat32);
// The CUDA backend: every pointer it is given is a device pointer. One stream per backend;
// ops are asynchronous until synchronize() or a download(). Without DEEPINFER_CUDA=ON at
// build time this throws an Error saying so.
// batch_invariant: every matmul as fixed-shape row tiles, so a row's result does not depend on
// the batch (the default; false = cuBLAS on the whole product, faster for some shapes).
// Its settings come from the environment (kernels/cuda/backend_settings.h; cuda::make_cuda_backend
// takes them explicitly).
std::unique_ptr<Backend> make_cuda_backend(int device = 0, Precision precision = Precision::kFloat32,
                                           bool batch_invariant = true);
// device "cpu", "cuda[:N]", "cuda-check", "cuda-profile", "cpu-profile" or "cpu-graphs"; dtype
// "float32" or "bfloat16". An Error names a device or dtype that is not one of these.
std::unique_ptr<Backend> make_backend(const std::string& device, int cpu_threads = 0, const std::string& dtype = "float32",
                                      bool batch_invariant = true);
// Runs every op on `device`, replays the discrete ops (rounding, routing, selections) on the CPU
// reference with the same inputs and reports disagreements on stderr ("cuda-check").
std::unique_ptr<Backend> make_cross_check_backend(std::unique_ptr<Backend> device);
// Checked ops and disagreements a cross-check backend has seen ({-1, -1} for any other).
struct CrossCheckCounts {
  int64_t checked = -1, disagreed = -1;
  // The smallest quant_margin of any block the fake quantisers rounded (infinity: none near).
  double closest_margin = std::numeric_limits<double>::infinity();
};
CrossCheckCounts cross_check_counts(const Backend& b);
// Times every op kind (synchronising after each) and prints the table when destroyed
// ("cuda-profile", "cpu-profile").
std::unique_ptr<Backend> make_profiling_backend(std::unique_ptr<Backend> device);
// Graphs emulated on a backend that has none: captures record the ops (arguments copied),
// replays run them, with the CUDA backend's capture rules enforced ("cpu-graphs"; for tests).
std::unique_ptr<Backend> make_graph_emulation_backend(std::unique_ptr<Backend> device);
// True when this build includes the CUDA backend.
bool cuda_built();

}  // namespace deepinfer::kernels
