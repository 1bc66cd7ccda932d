// DeepseekV41: the text model's forward pass as a straight-line sequence of backend ops.
//
// Purpose: compute the logits of a ForwardBatch (chunks of several sequences' tokens at
// positions state.length()...) through embedding, the L layers (mHC, shared-latent attention
// with window + compressed sparse branch, MoE) and the head, appending to each sequence's state.
// Any chunking of a prompt gives the same logits as one call (absolute positions everywhere;
// partial groups carried in the state). Engram layers add their gated n-gram lookup to the
// streams before the layer's mixes. The DSpark stages come with speculative decoding.
// A forward is three calls, driven by the runner (runner::BatchRunner), which lays the batch out
// and owns graphs and the draw: embed (the streams from the tokens), the stages of
// layer_program (run in order; the graphable ones may be captured and replayed per row bucket),
// then logits for the rows the caller wants.
// Files: this one has construction, the layer program, the mHC sites, embedding and head;
// attention.cpp the attention (window rings, compressed branch), sources.cpp the compressor and
// indexer (KV and index sources), moe.cpp the MoE and Engram, replay.cpp bounded replay.
// Invariants: the model holds no per-sequence state of its own; all of it is in
// SequenceState. It calls only kernels::Backend ops for arithmetic.
// Memory: every tensor lives in the backend's memory (the weights are copied there when the
// backend is a device); token ids, positions and the window/cache bookkeeping are computed on
// the host and uploaded (the MoE grouping stays on the backend).
// Threading: one forward at a time per model object.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "kernels/backend.h"
#include "kernels/buffer.h"
#include "kernels/staging.h"
#include "loader/config.h"
#include "model/engram.h"
#include "model/forward_batch.h"
#include "model/rope.h"
#include "model/state.h"
#include "model/weights.h"

namespace deepinfer::model {

// One sequence's DSpark draft (DeepseekV41::draft): the target has processed positions
// [0, state->length()), so its stages' rings hold their keys, and chose `anchor` for the next.
struct DraftRequest {
  SequenceState* state = nullptr;
  int64_t anchor = 0;
  // Host [dspark_block_size]: how each drafted token is drawn from its biased logits (as
  // Backend::sample_rows draws); null: greedy (the largest, ties to the lowest id).
  const kernels::DrawParams* draw = nullptr;
};
// Every request's draft block, in request order. B = dspark_block_size.
struct Drafts {
  std::vector<int64_t> ids;         // host [requests, B + 1]: the anchor, then the B drafted tokens
  std::vector<float> confidence;    // host [requests, B] fp32: the confidence head's raw logits
  kernels::Buf<float> logits;       // backend [requests, B, vocab] fp32: the Markov-biased logits each was drawn from
};

// Model options the engine sets at load.
struct ModelOptions {
  // Device backends: the Engram hash-bucket tables stay in host memory (mapped or host-made) and
  // each step uploads the rows it reads (model/engram_rows.h); false: tables in device memory.
  // A host backend reads its tables in place either way.
  bool engram_tables_on_host = true;
  // Host backends (tests): read the tables through the same staged rows a device backend uses.
  bool stage_engram_rows = false;
  // DSpark speculative decoding: every forward also takes the taps and fills the draft stages'
  // rings (SequenceState::draft_ring), and draft() may be called. Needs the draft stages'
  // weights (an Error otherwise).
  bool dspark = false;
};

class DeepseekV41 {
 public:
  // `engram` is required when the config has engram layers (it carries the tokenizer-derived
  // hash state); an Error says so otherwise.
  DeepseekV41(loader::ModelConfig config, Weights weights, kernels::Backend& backend,
              std::shared_ptr<const EngramHasher> engram = nullptr, ModelOptions options = {});

  const loader::ModelConfig& config() const { return cfg_; }
  const Weights& weights() const { return w_; }
  ~DeepseekV41();
  DeepseekV41(const DeepseekV41&) = delete;
  DeepseekV41& operator=(const DeepseekV41&) = delete;
  // A fresh sequence state in this model's backend memory.
  SequenceState new_state() const { return SequenceState(cfg_, be_); }
  kernels::Backend& backend() const { return be_; }
  const RopeTable& rope_main() const { return rope_main_; }
  const RopeTable& rope_compress() const { return rope_compress_; }
  // First layer that bounded replay skips for non-tail rows (= last KV source + 1; L if none).
  int64_t late_layer_start() const;

  // The streams of b's rows from its tokens (padding rows zero), and the Engram hash ids. `up`
  // holds the layout's uploads (positions, RoPE tables, token ids); the model adds its own and
  // sends them as one op.
  void embed(ForwardBatch& b, kernels::Uploads& up);
  // The layers as stages, to run in order on b (after embed).
  std::vector<Stage> layer_program(ForwardBatch& b);
  // The head: logits [rows.size(), vocab] fp32 of b's rows `rows` (after the layer program).
  kernels::Buf<float> logits(ForwardBatch& b, const std::vector<int32_t>& rows);
  // Whether forwards fill the draft stages' rings (ModelOptions.dspark).
  bool dspark() const { return dspark_; }
  // The DSpark draft of every request at once (spec section 3.11; needs ModelOptions.dspark):
  // the block [anchor, noise x (B-1)] at positions length() ... length() + B - 1 through the
  // draft stages, each attending over its ring and the whole block (no causal mask inside it),
  // then the heads: logits of the last stage's collapsed rows, plus the Markov head's bias from
  // the previous token, drawn position by position; confidence from the collapsed row and the
  // previous token's Markov embedding, in float32. Reads the states, changes none of them.
  Drafts draft(const std::vector<DraftRequest>& reqs);

 private:
  // Pointers below are backend memory unless they say host.
  // A layer: size_layer (buffers for b.n_pad rows), attention_in (mixes, norm, projections:
  // graphable), attention (windows, compressed branch, attention: eager, per sequence),
  // attention_out_and_ffn (output projection, FFN site, MoE: graphable).
  void size_layer(int64_t layer, ForwardBatch& b);
  void attention_in(int64_t layer, ForwardBatch& b);
  void attention(int64_t layer, ForwardBatch& b);
  void attention_out_and_ffn(int64_t layer, ForwardBatch& b);
  // Block l's weights: backbone layer l, or (l >= num_hidden_layers) draft stage l - L.
  const LayerWeights& block(int64_t l) const;
  // A draft stage's attention (block l = L + stage): every query of a sequence's block sees its
  // ring and every row of its block.
  void draft_attention(int64_t l, ForwardBatch& b);
  // One mHC site: its mixes (into pre, post, comb) from the streams b.X, then the streams
  // collapsed with `collapse_pre` and RMS-normalised with `norm` into b.xn.
  void mhc_site(const Mat& fn, const float* scale, const float* base, float* pre, float* post, float* comb,
                const float* collapse_pre, const float* norm, ForwardBatch& b, int64_t rows);
  // Layer l's RoPE tables (cos, sin) for b's rows: the compress RoPE on compressed layers.
  std::pair<const float*, const float*> rope_of(int64_t layer, const ForwardBatch& b) const;
  // A KV source layer, every sequence at once: the compressor (its rows of b.ckv / b.cgate
  // join the open group; complete groups pooled), the new groups' indexer keys (index
  // sources), both published into the sequence's caches, then each sequence's caches read as
  // float into its Published (comp, index_k).
  void publish_sources(int64_t layer, ForwardBatch& b);
  // Every sequence's top-k selection at once, one job per sequence: q [n, heads, d_idx] rotated,
  // FP4-rounded indexer queries, w [n, heads] head weights and the positions of its n rows,
  // against pub->index_k; sets pub->topk (and the candidate blocks at the candidate layer).
  struct IndexJob {
    const float* q = nullptr;
    const float* w = nullptr;
    const int64_t* pos = nullptr;
    int64_t n = 0;
    Published* pub = nullptr;
  };
  void index_select(int64_t layer, const std::vector<IndexJob>& jobs);
  // Bounded replay: keeps, per sequence, only the rows at or after replay_from.
  void compact_to_tail(ForwardBatch& b);
  // The FFN's MoE of xn into y, then `expand` (the streams expanded with y).
  void moe(int64_t layer, const float* xn, int64_t rows, float* y, const kernels::HcExpandArgs& expand);
  // Engram's gated n-gram rows into the streams b.X, from the step's block b.engram (graphable).
  void engram(int64_t layer, ForwardBatch& b);
  // Packs the block of every Engram layer's rows for b.hash_ids into b.engram (EngramStep) and
  // sends it ahead (Backend::upload_ahead); the stage that awaits it comes before the first
  // Engram stage.
  void stage_engram(ForwardBatch& b);
  void rope_rows(float* x, int64_t rows, int64_t heads, int64_t head_dim, const float* cos, const float* sin, bool inverse);
  // read_rows in two steps: its descriptors into a Staged (packed caches per stored format;
  // float ones as copies, which Staged::upload makes), then, once uploaded, the dequantisations.
  struct StagedReads {
    std::vector<kernels::CopyDesc> copies;  // for Staged::upload
    struct Format {
      const PackedRows* rows;  // one cache of the format
      std::vector<kernels::PackedDesc> descs;
      int64_t at = 0;
    };
    std::vector<Format> formats;
  };
  StagedReads stage_reads(const std::vector<std::pair<const PackedRows*, float*>>& reads, kernels::Staged& st);
  void run_reads(const StagedReads& r, const kernels::Staged& st);
  template <class T>
  kernels::Buf<T>& buf(kernels::Buf<T>& b, int64_t n);  // binds b to the backend, size n
  // Compressed-branch rows: compress RoPE at pos[i] (a group's first token), then the given
  // fake quantisation, rounded in place in x [pos.size(), dim]; dest takes them in order, each
  // (rows, count) appending its count in its stored format.
  void publish_rows(float* x, const std::vector<int64_t>& pos, int64_t dim, kernels::FakeQuant kind, int64_t block,
                    const std::vector<std::pair<PackedRows*, int64_t>>& dest);
  // Every row of each cache as float32 into its destination (backend memory, [size, dim]),
  // in one op per stored format (window rings, compressed KV, indexer keys).
  void read_rows(const std::vector<std::pair<const PackedRows*, float*>>& reads);
  // DSpark (dspark.cpp). The tap of layer l's input (the hc mean, after its Engram) into b.taps
  // (graphable; a no-op for other layers).
  void tap(int64_t layer, ForwardBatch& b);
  // b.taps' layout for b.n_pad rows: its size and the uploads of tap_pre and tap_concat.
  void tap_layout(ForwardBatch& b, kernels::Uploads& up);
  // main_x of every row from its taps, then each stage's keys into b.dkv (graphable).
  void draft_keys(ForwardBatch& b);
  // Each sequence's last rows' keys into its stages' rings, which keep sliding_window (eager).
  void fill_draft_rings(ForwardBatch& b);
  void rms(const float* x, const float* w, float* y, int64_t rows, int64_t dim);
  void linear(const float* x, int64_t rows, const Mat& w, float* y);
  // Products of one x (the projections that read the same activations), in one backend op.
  void linears(const float* x, int64_t rows, const std::vector<std::pair<const Mat*, float*>>& outs);

  loader::ModelConfig cfg_;
  Weights w_;
  kernels::Backend& be_;
  RopeTable rope_main_, rope_compress_;
  std::shared_ptr<const EngramHasher> engram_;
  std::vector<kernels::Buf<float>> engram_qk_;  // per engram layer: q_weight * k_weight [hc, D]
  std::vector<kernels::WeightView> engram_tables_;  // per engram layer: its table, where it is read
  bool engram_staged_ = false;  // Engram tables in host memory, read through staged rows
  bool dspark_ = false;         // ModelOptions.dspark
};

template <class T>
kernels::Buf<T>& DeepseekV41::buf(kernels::Buf<T>& t, int64_t n) {
  t.bind(be_);
  t.resize(n);
  return t;
}

}  // namespace deepinfer::model
