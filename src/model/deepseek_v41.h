// DeepseekV41: the text model's forward pass as a straight-line sequence of backend ops.
//
// Purpose: run a chunk of tokens of one sequence at positions state.length()...
// through embedding, the L layers (mHC, shared-latent attention with window + compressed
// sparse branch, MoE) and the head, appending to the sequence's state. Any chunking of a
// prompt gives the same logits as one call (absolute positions everywhere; partial groups
// carried in the state). Engram layers add their gated n-gram lookup to the streams before
// the layer's mixes. The DSpark stages come with speculative decoding.
// Invariants: the model holds no per-sequence state of its own; all of it is in
// SequenceState. It calls only kernels::Backend ops for arithmetic.
// Memory: every tensor lives in the backend's memory (the weights are copied there when the
// backend is a device); token ids, positions and the window/cache bookkeeping are computed on
// the host and uploaded (the MoE grouping stays on the backend); logits, or only the greedy
// token ids, are downloaded into the caller's host buffers.
// Graphs (backends that have them): a forward of at most kGraphRows rows without replay runs
// the two static halves of every layer (before and after the attention) as captured graphs
// over a Scratch kept per row bucket (padding rows are zero tokens at position 0; every op is
// row-independent, so they never change a real row); the attention in between runs eagerly.
// A layer's second half and the next layer's first are one graph (unless Engram comes between).
// The kept Scratches and their graph pools hold device memory until set_graphs(false) or
// the model's end.
// Threading: one forward at a time per model object (scratch is per call or per bucket).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "kernels/backend.h"
#include "kernels/buffer.h"
#include "loader/config.h"
#include "model/engram.h"
#include "model/rope.h"
#include "model/state.h"
#include "model/weights.h"

namespace deepinfer::model {

class DeepseekV41 {
 public:
  // `engram` is required when the config has engram layers (it carries the tokenizer-derived
  // hash state); an Error says so otherwise.
  DeepseekV41(loader::ModelConfig config, Weights weights, kernels::Backend& backend,
              std::shared_ptr<const EngramHasher> engram = nullptr);

  const loader::ModelConfig& config() const { return cfg_; }
  const Weights& weights() const { return w_; }
  ~DeepseekV41();
  DeepseekV41(const DeepseekV41&) = delete;
  DeepseekV41& operator=(const DeepseekV41&) = delete;
  // A fresh sequence state in this model's backend memory.
  SequenceState new_state() const { return SequenceState(cfg_, be_); }
  kernels::Backend& backend() const { return be_; }

  // One sequence's chunk in a batched forward.
  struct SeqChunk {
    const int64_t* tokens = nullptr;  // [n] token ids, at positions state->length() ...
    int64_t n = 0;
    SequenceState* state = nullptr;
    // CED bounded replay: rows [0, replay_from) run only the layers up to the last KV source
    // (the encoder half plus the decoder's KV source); the later (decoder) layers run on rows
    // [replay_from, n). 0 = every layer on every row (exact).
    int64_t replay_from = 0;
    bool all_logits = false;  // logits of every row (needs replay_from == 0), else the last row
    float* logits = nullptr;  // [n or 1, vocab] fp32, or null for none
    // Host: the last row's token drawn on the backend by `draw` (greedy, or temperature,
    // top-k, top-p, min-p with the host's uniform), so only the id comes back; with or
    // without `logits` (not with all_logits).
    int32_t* token = nullptr;
    kernels::DrawParams draw{};
    // With draw.logprobs >= 0, host: the token's logprob, and [draw.logprobs] best ids and
    // logprobs (past the vocabulary: -1).
    float* logprob = nullptr;
    int32_t* top_ids = nullptr;
    float* top_logprobs = nullptr;
  };

  // Runs several sequences' chunks in one pass: every matrix product covers all rows, the
  // stateful parts (window, compressor, indexer, attention) run per sequence. A sequence's
  // logits are bitwise the same alone or batched. Token ids outside the vocabulary are an
  // Error, thrown before any state changes.
  void forward(std::span<SeqChunk> batch);
  // Convenience for one sequence: logits [n, vocab] (every row), or [1, vocab] (last_only).
  void forward(const int64_t* tokens, int64_t n, SequenceState& state, float* logits, bool last_only = false);
  // First layer that bounded replay skips for non-tail rows (= last KV source + 1; L if none).
  int64_t late_layer_start() const;
  // Graphs on backends that have them (on by default): decode-sized forwards run the static
  // half of every layer as replayed graphs. Off frees them.
  void set_graphs(bool on);
  bool graphs() const { return graphs_ && be_.graphs(); }

 private:
  struct Shared;  // per-forward published tensors (compressed KV, indexer keys, top-k)
  struct Scratch;
  // Pointers below are backend memory unless they say host.
  // A layer: size_layer (buffers for `rows` rows), attention_in (mixes, norm, projections:
  // a graph piece), attention (windows, compressed branch, attention: eager, per sequence),
  // attention_out_and_ffn (output projection, FFN site, MoE: a graph piece).
  void size_layer(int64_t layer, Scratch& s, int64_t rows);
  void attention_in(int64_t layer, Scratch& s, int64_t rows);
  void attention(int64_t layer, Scratch& s);
  void attention_out_and_ffn(int64_t layer, Scratch& s, int64_t rows);
  void head(std::span<SeqChunk> batch, Scratch& s);
  // One mHC site: its mixes (into pre, post, comb) from the streams s.X, then the streams
  // collapsed with `collapse_pre` and RMS-normalised with `norm` into s.xn.
  void mhc_site(const Mat& fn, const float* scale, const float* base, float* pre, float* post, float* comb,
                const float* collapse_pre, const float* norm, Scratch& s, int64_t rows);
  // Layer l's RoPE tables (cos, sin) for s's rows: the compress RoPE on compressed layers.
  std::pair<const float*, const float*> rope_of(int64_t layer, const Scratch& s) const;
  // Runs `ops` (which only touch s's buffers, weights and their own temporaries) as graph
  // `which` of layer l of s's bucket: eagerly the first time, then captured and replayed.
  void piece(Scratch& s, int64_t layer, int which, const std::function<void()>& ops);
  static int64_t graph_bucket(int64_t rows);
  // A KV source layer, every sequence at once: the compressor (its rows of s.ckv / s.cgate
  // join the open group; complete groups pooled), the new groups' indexer keys (index
  // sources), both published into the sequence's caches, then each sequence's caches read as
  // float into its Shared (comp, index_k).
  void publish_sources(int64_t layer, Scratch& s);
  // Every sequence's top-k selection at once, one job per sequence: q [n, heads, d_idx] rotated,
  // FP4-rounded indexer queries, w [n, heads] head weights and the positions of its n rows,
  // against sh->index_k; sets sh->topk (and the candidate blocks at the candidate layer).
  struct IndexJob {
    const float* q = nullptr;
    const float* w = nullptr;
    const int64_t* pos = nullptr;
    int64_t n = 0;
    Shared* sh = nullptr;
  };
  void index_select(int64_t layer, const std::vector<IndexJob>& jobs);
  void compact_to_tail(std::span<SeqChunk> batch, Scratch& s, std::vector<int64_t>& hash_ids, int64_t hash_w);
  // The FFN's MoE of xn into y, then `expand` (the streams expanded with y).
  void moe(int64_t layer, const float* xn, int64_t rows, float* y, const kernels::HcExpandArgs& expand);
  // hash_ids: host [rows, n_engram_layers, cols].
  void engram(int64_t layer, const std::vector<int64_t>& hash_ids, Scratch& s, float* X);
  void rope_rows(float* x, int64_t rows, int64_t heads, int64_t head_dim, const float* cos, const float* sin, bool inverse);
  // Host arrays for several backend buffers, sent as one op (Backend::upload_batch): add()
  // sizes the buffer and keeps a copy of the array until send().
  struct Uploads {
    explicit Uploads(kernels::Backend& b) : be(b) {}
    template <class T>
    void add(kernels::Buf<T>& dst, const std::vector<T>& src);
    void send();
    kernels::Backend& be;
    std::vector<std::vector<uint8_t>> held;
    std::vector<kernels::UploadItem> items;
  };
  // Adds s.pos and its rope tables to `up`.
  void set_positions(Scratch& s, Uploads& up);
  // The copies (backend memory) as one op.
  void copy_batch(const std::vector<kernels::CopyDesc>& copies);
  // Small host arrays (descriptors, tables) for several ops in one upload: add() places each at
  // a 16-byte aligned offset of one byte buffer, alloc() makes the backend buffer (so at() gives
  // device addresses that other arrays may hold), set() fills a reserved array, upload() sends
  // the whole buffer once, in one op with the copies given (Backend::upload_batch).
  struct Staged {
    explicit Staged(kernels::Backend& be) : dev(be) {}
    std::vector<uint8_t> host;
    std::map<int64_t, int64_t> room;  // bytes of the array at each offset
    kernels::Buf<uint8_t> dev;
    template <class T>
    int64_t add(const T* p, int64_t n);
    template <class T>
    int64_t add(const std::vector<T>& v) { return add(v.data(), static_cast<int64_t>(v.size())); }
    template <class T>
    void set(int64_t off, const std::vector<T>& v);
    void alloc() { dev.resize(static_cast<int64_t>(host.size())); }
    template <class T>
    const T* at(int64_t off) const { return reinterpret_cast<const T*>(dev.data() + off); }
    void upload(const std::vector<kernels::CopyDesc>& then_copy = {});
  };
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
  StagedReads stage_reads(const std::vector<std::pair<const PackedRows*, float*>>& reads, Staged& st);
  void run_reads(const StagedReads& r, const Staged& st);
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
  // Graphs (backends that have them): forwards of at most kGraphRows rows without replay run
  // their static pieces as graphs, one Scratch per row bucket.
  static constexpr int64_t kGraphRows = 256;
  bool graphs_ = true;
  std::map<int64_t, std::unique_ptr<Scratch>> graph_scratch_;
};

}  // namespace deepinfer::model
