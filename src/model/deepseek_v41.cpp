#include "model/deepseek_v41.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "core/dtype.h"
#include "core/error.h"

namespace deepinfer::model {

using kernels::FakeQuant;

// Per sequence, per forward: what KV sources and index sources publish to later layers.
// Tensors are in the backend's memory.
struct DeepseekV41::Shared {
  kernels::Buf<float> comp;     // [t_comp, hd] running compressed KV of the latest KV source
  int64_t t_comp = 0;
  kernels::Buf<float> index_k;  // [t_index, d_idx] running indexer keys
  int64_t t_index = 0;
  bool has_topk = false;
  kernels::Buf<uint8_t> topk;   // [rows, topk_t] 1 = selected
  int64_t topk_t = 0;
  bool has_candidates = false;
  kernels::Buf<uint8_t> candidates;  // [rows, cand_t]
  int64_t cand_t = 0;
};

// The packed rows of one forward: every active row of every sequence, in sequence order,
// and the activations of a forward. With graphs, one Scratch per row bucket lives across
// forwards: its buffers keep their addresses, so the graphs captured over them stay valid.
// Host bookkeeping plus its copies in backend memory (d_*).
struct DeepseekV41::Scratch {
  explicit Scratch(kernels::Backend& b)
      : be(&b), d_pos(b), cos_main(b), sin_main(b), cos_comp(b), sin_comp(b), X(b), pre(b), a_pre(b), a_post(b), a_comb(b),
        f_post(b), f_comb(b), xc(b), xn(b), y(b), q(b), kv(b), ckv(b), cgate(b), iq(b), iw(b), o(b), kv_codes(b),
        kv_scales(b) {}
  ~Scratch() {
    if (pool >= 0) be->free_graph_pool(pool);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  kernels::Backend* be;
  int64_t n = 0;                              // active rows
  int64_t n_pad = 0;                          // rows the captured pieces run on (n, or n's bucket)
  std::vector<int64_t> pos;                   // [n] absolute positions
  kernels::Buf<int64_t> d_pos;                // [n]
  kernels::Buf<float> cos_main, sin_main;     // [n_pad, rd/2] (padding rows at position 0)
  kernels::Buf<float> cos_comp, sin_comp;     // [n_pad, rd/2]
  std::vector<int64_t> row0, rows;            // per sequence: first active row, active row count
  std::vector<SequenceState*> states;         // per sequence
  std::vector<Shared> shared;                 // per sequence
  // Activations, [n_pad, ...]: streams and mixes, then the attention's inputs and output.
  kernels::Buf<float> X, pre, a_pre, a_post, a_comb, f_post, f_comb, xc, xn, y;
  kernels::Buf<float> q, kv, ckv, cgate, iq, iw, o;
  kernels::Buf<uint8_t> kv_codes, kv_scales;  // the window entries' FP8 codes and scales
  // Graphs: the pool their temporaries come from (-1: no graphs), and per (layer, piece) the
  // graph (>= 0), -1 = not run yet, -2 = run once (warm: buffers sized, tables uploaded).
  int64_t pool = -1;
  std::vector<int64_t> graph;
  void begin_forward() {
    n = 0;
    pos.clear();
    row0.clear();
    rows.clear();
    states.clear();
    shared.clear();
  }
};

DeepseekV41::DeepseekV41(loader::ModelConfig config, Weights weights, kernels::Backend& backend,
                         std::shared_ptr<const EngramHasher> engram)
    : cfg_(std::move(config)), w_(std::move(weights)), be_(backend), engram_(std::move(engram)) {
  rope_main_.inv_freq = rope_inv_freq(cfg_.rope_main, cfg_.qk_rope_head_dim, cfg_.max_position_embeddings);
  rope_compress_.inv_freq = rope_inv_freq(cfg_.rope_compress, cfg_.qk_rope_head_dim, cfg_.max_position_embeddings);
  if (!cfg_.engram_layer_ids.empty() && !engram_)
    throw Error("config.json: field 'engram_layer_ids': Engram layers need the tokenizer-derived hash state "
                "(tokenizer.json in the checkpoint directory)");
  const int64_t D = cfg_.hidden_size, hc = cfg_.hc_mult;
  for (int64_t l : cfg_.engram_layer_ids) {
    const EngramWeights& e = w_.layers[static_cast<size_t>(l)].engram;
    std::vector<float> qk(static_cast<size_t>(hc * D)), kw(qk.size());
    if (w_.on_backend) {  // weights made in device memory
      be_.download(qk.data(), e.q_weight, hc * D * 4);
      be_.download(kw.data(), e.k_weight, hc * D * 4);
    } else {
      std::copy(e.q_weight, e.q_weight + hc * D, qk.begin());
      std::copy(e.k_weight, e.k_weight + hc * D, kw.begin());
    }
    for (int64_t i = 0; i < hc * D; ++i) qk[i] = qk[i] * kw[i];
    engram_qk_.emplace_back(be_);
    engram_qk_.back().upload(qk);
  }
  // A device backend computes on its own copy of every weight.
  if (!be_.host_memory()) upload_weights(cfg_, w_, be_);
}

DeepseekV41::~DeepseekV41() = default;

void DeepseekV41::set_graphs(bool on) {
  graphs_ = on;
  if (!on) graph_scratch_.clear();
}

template <class T>
kernels::Buf<T>& DeepseekV41::buf(kernels::Buf<T>& b, int64_t n) {
  b.bind(be_);
  b.resize(n);
  return b;
}

void DeepseekV41::engram(int64_t l, const std::vector<int64_t>& hash_ids, Scratch& s, float* X) {
  const auto& c = cfg_;
  const size_t j = static_cast<size_t>(std::find(c.engram_layer_ids.begin(), c.engram_layer_ids.end(), l) -
                                       c.engram_layer_ids.begin());
  const EngramWeights& e = w_.layers[static_cast<size_t>(l)].engram;
  const int64_t n = s.n, L = engram_->n_layers(), cols = engram_->n_cols(), hd = c.engram_head_dim;
  const int64_t D = c.hidden_size, hc = c.hc_mult;
  // Gather the hashed rows [n, cols * hd], project to hc keys + one value, gate into the streams.
  std::vector<int64_t> ids(static_cast<size_t>(n * cols));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < cols; ++k) {
      const int64_t row = hash_ids[static_cast<size_t>((i * L + static_cast<int64_t>(j)) * cols + k)];
      DI_CHECK(row >= 0 && row < e.table.rows, "engram hash id out of the table");
      ids[static_cast<size_t>(i * cols + k)] = row;
    }
  kernels::Buf<int64_t> d_ids(be_);
  d_ids.upload(ids);
  // Float rows, or FP8 rows times their power-of-two scales (exact in float).
  kernels::Buf<float> rows(be_, n * cols * hd), kv(be_, n * (hc + 1) * D);
  be_.gather_weight_rows({.w = e.table, .ids = d_ids.data(), .out = rows.data(), .rows = n * cols});
  linear(rows.data(), n, e.wkv, kv.data());
  be_.engram_gate({.x = X, .kv = kv.data(), .w = engram_qk_[j].data(), .rows = n, .hc = hc, .dim = D,
                   .eps = static_cast<float>(c.rms_norm_eps)});
}

void DeepseekV41::linear(const float* x, int64_t rows, const Mat& w, float* y) {
  be_.matmul({.x = x, .w = w, .y = y, .m = rows, .n = w.rows, .k = w.cols});
}

void DeepseekV41::linears(const float* x, int64_t rows, const std::vector<std::pair<const Mat*, float*>>& outs) {
  kernels::MultiMatmulArgs a{.x = x, .m = rows, .k = outs.front().first->cols};
  for (const auto& [w, y] : outs) {
    DI_CHECK(a.count < kernels::kMaxMatmulOuts, "linears: more than kMaxMatmulOuts outputs");
    DI_CHECK(w->cols == a.k, "linears: products of inputs of different widths");
    a.outs[a.count++] = {.w = *w, .y = y, .n = w->rows};
  }
  be_.multi_matmul(a);
}

void DeepseekV41::rms(const float* x, const float* w, float* y, int64_t rows, int64_t dim) {
  be_.rms_norm({.x = x, .w = w, .y = y, .rows = rows, .dim = dim, .eps = static_cast<float>(cfg_.rms_norm_eps)});
}

void DeepseekV41::rope_rows(float* x, int64_t rows, int64_t heads, int64_t head_dim, const float* cos, const float* sin,
                            bool inverse) {
  be_.rope({.x = x, .cos = cos, .sin = sin, .rows = rows, .heads = heads, .head_dim = head_dim,
            .rope_dim = cfg_.qk_rope_head_dim, .inverse = inverse});
}

void DeepseekV41::forward(const int64_t* tokens, int64_t n, SequenceState& st, float* logits, bool last_only) {
  SeqChunk chunk{.tokens = tokens, .n = n, .state = &st, .replay_from = 0, .all_logits = !last_only, .logits = logits};
  forward(std::span<SeqChunk>(&chunk, 1));
}

int64_t DeepseekV41::late_layer_start() const {
  if (cfg_.kv_source_layer_ids.empty()) return cfg_.num_hidden_layers;
  return *std::max_element(cfg_.kv_source_layer_ids.begin(), cfg_.kv_source_layer_ids.end()) + 1;
}

namespace {
std::vector<kernels::UploadItem> copy_items(const std::vector<kernels::CopyDesc>& copies) {
  std::vector<kernels::UploadItem> items;
  for (const auto& c : copies) items.push_back({.dst = c.dst, .src = c.src, .bytes = c.bytes, .from_device = true});
  return items;
}
}  // namespace

void DeepseekV41::copy_batch(const std::vector<kernels::CopyDesc>& copies) {
  const auto items = copy_items(copies);
  be_.upload_batch(items.data(), static_cast<int64_t>(items.size()));
}

template <class T>
int64_t DeepseekV41::Staged::add(const T* p, int64_t n) {
  const int64_t off = (static_cast<int64_t>(host.size()) + 15) / 16 * 16;
  host.resize(static_cast<size_t>(off + n * static_cast<int64_t>(sizeof(T))), 0);
  if (p && n > 0) std::memcpy(host.data() + off, p, static_cast<size_t>(n) * sizeof(T));
  room[off] = n * static_cast<int64_t>(sizeof(T));
  return off;
}

template <class T>
void DeepseekV41::Staged::set(int64_t off, const std::vector<T>& v) {
  const auto it = room.find(off);
  DI_CHECK(it != room.end() && static_cast<int64_t>(v.size() * sizeof(T)) <= it->second, "staged array past its room");
  if (!v.empty()) std::memcpy(host.data() + off, v.data(), v.size() * sizeof(T));
}

void DeepseekV41::Staged::upload(const std::vector<kernels::CopyDesc>& then_copy) {
  DI_CHECK(dev.size() == static_cast<int64_t>(host.size()), "staged arrays added after their buffer was made");
  auto items = copy_items(then_copy);
  items.insert(items.begin(), kernels::UploadItem{.dst = dev.data(), .src = host.data(), .bytes = static_cast<int64_t>(host.size())});
  dev.backend().upload_batch(items.data(), static_cast<int64_t>(items.size()));
}

template <class T>
void DeepseekV41::Uploads::add(kernels::Buf<T>& dst, const std::vector<T>& src) {
  const int64_t bytes = static_cast<int64_t>(src.size() * sizeof(T));
  dst.resize(static_cast<int64_t>(src.size()));
  held.emplace_back(reinterpret_cast<const uint8_t*>(src.data()), reinterpret_cast<const uint8_t*>(src.data()) + bytes);
  items.push_back({.dst = dst.data(), .src = held.back().data(), .bytes = bytes});
}

void DeepseekV41::Uploads::send() {
  be.upload_batch(items.data(), static_cast<int64_t>(items.size()));
  items.clear();
  held.clear();
}

void DeepseekV41::set_positions(Scratch& s, Uploads& up) {
  up.add(s.d_pos, s.pos);
  std::vector<int64_t> padded(s.pos);
  padded.resize(static_cast<size_t>(std::max(s.n, s.n_pad)), 0);
  const int64_t rows = static_cast<int64_t>(padded.size());
  std::vector<float> c, sn;
  rope_main_.compute(padded.data(), rows, &c, &sn);
  up.add(s.cos_main, c);
  up.add(s.sin_main, sn);
  rope_compress_.compute(padded.data(), rows, &c, &sn);
  up.add(s.cos_comp, c);
  up.add(s.sin_comp, sn);
}

// Rows a graph bucket holds: powers of two up to 8, then multiples of 16.
int64_t DeepseekV41::graph_bucket(int64_t n) {
  if (n <= 8) {
    int64_t b = 1;
    while (b < n) b *= 2;
    return b;
  }
  return (n + 15) / 16 * 16;
}

void DeepseekV41::piece(Scratch& s, int64_t l, int which, const std::function<void()>& ops) {
  if (s.pool < 0) return ops();
  int64_t& g = s.graph[static_cast<size_t>(2 * l + which)];
  if (g == -1) {  // first time: eagerly, which sizes every buffer and uploads every table
    ops();
    g = -2;
    return;
  }
  if (g == -2) {
    be_.begin_capture(s.pool);
    ops();
    g = be_.end_capture();
  }
  be_.replay(g);
}

void DeepseekV41::forward(std::span<SeqChunk> batch) {
  const auto& c = cfg_;
  const int64_t D = c.hidden_size, hc = c.hc_mult, V = c.vocab_size;
  const int64_t late = late_layer_start();
  const size_t nseq = batch.size();
  bool any_replay = false;
  int64_t total = 0;
  for (size_t q = 0; q < nseq; ++q) {
    const SeqChunk& ch = batch[q];
    for (int64_t i = 0; i < ch.n; ++i)
      if (ch.tokens[i] < 0 || ch.tokens[i] >= V)
        throw Error("token id " + std::to_string(ch.tokens[i]) + " at index " + std::to_string(i) +
                    " is outside the vocabulary [0, " + std::to_string(V) + ")");
    DI_CHECK(ch.replay_from >= 0 && ch.replay_from <= ch.n, "replay_from outside the chunk");
    DI_CHECK(!(ch.all_logits && ch.replay_from > 0), "all-row logits need every layer on every row");
    DI_CHECK(ch.replay_from == 0 || late < c.num_hidden_layers, "bounded replay needs a layer after the last KV source");
    any_replay = any_replay || ch.replay_from > 0;
    total += ch.n;
  }
  if (total == 0) return;
  // Small batches without replay (decode steps) run the static pieces of every layer as graphs
  // over a Scratch kept for their row bucket; the rest get a Scratch of their own.
  std::unique_ptr<Scratch> own;
  Scratch* sp = nullptr;
  const bool graphed = graphs_ && be_.graphs() && !any_replay && total <= kGraphRows;
  if (graphed) {
    const int64_t bucket = graph_bucket(total);
    std::unique_ptr<Scratch>& kept = graph_scratch_[bucket];
    if (!kept) {
      kept = std::make_unique<Scratch>(be_);
      kept->pool = be_.new_graph_pool();
      kept->graph.assign(static_cast<size_t>(2 * c.num_hidden_layers), -1);
    }
    sp = kept.get();
    sp->n_pad = bucket;
  } else {
    own = std::make_unique<Scratch>(be_);
    sp = own.get();
    sp->n_pad = total;
  }
  Scratch& s = *sp;
  s.begin_forward();
  s.row0.resize(nseq);
  s.rows.resize(nseq);
  s.states.resize(nseq);
  s.shared.resize(nseq);
  for (size_t q = 0; q < nseq; ++q) {
    s.row0[q] = s.n;
    s.rows[q] = batch[q].n;
    s.states[q] = batch[q].state;
    s.n += batch[q].n;
  }
  const int64_t np = s.n_pad;
  std::vector<int64_t> tok(static_cast<size_t>(total));
  s.pos.resize(static_cast<size_t>(total));
  for (size_t q = 0; q < nseq; ++q)
    for (int64_t i = 0; i < batch[q].n; ++i) {
      s.pos[static_cast<size_t>(s.row0[q] + i)] = batch[q].state->length() + i;
      tok[static_cast<size_t>(s.row0[q] + i)] = batch[q].tokens[i];
    }
  // The step's host inputs in one op: positions and their RoPE tables, the tokens, and the
  // previous site's pre mix (one-hot on stream 0, [n_pad, hc]).
  kernels::Buf<int64_t> d_tok(be_);
  {
    Uploads up(be_);
    set_positions(s, up);
    up.add(d_tok, tok);
    std::vector<float> one_hot(static_cast<size_t>(np * hc), 0.0f);
    for (int64_t i = 0; i < np; ++i) one_hot[static_cast<size_t>(i * hc)] = 1.0f;
    up.add(s.pre, one_hot);
    up.send();
  }
  // Streams: the embedding copied into every hc stream (padding rows zero). [n_pad, hc, D]
  s.X.resize(np * hc * D);
  be_.gather_weight_rows({.w = w_.embed, .ids = d_tok.data(), .out = s.X.data(), .rows = total, .copies = hc});
  if (np > total) be_.zero(s.X.data() + total * hc * D, (np - total) * hc * D * static_cast<int64_t>(sizeof(float)));
  // Engram hash ids of every row, for all engram layers: [rows, n_engram_layers, cols] (host).
  std::vector<int64_t> hash_ids;
  int64_t hash_w = 0;
  if (engram_) {
    hash_w = engram_->n_layers() * engram_->n_cols();
    hash_ids.resize(static_cast<size_t>(total * hash_w));
    for (size_t q = 0; q < nseq; ++q)
      engram_->hash(batch[q].tokens, s.pos.data() + s.row0[q], batch[q].n, batch[q].state->engram_history(),
                    hash_ids.data() + s.row0[q] * hash_w);
  }

  // Graphed, a layer's second piece also runs the next layer's first (one graph launch fewer
  // per layer: consecutive graphs do not overlap, kernels inside one do), unless an eager op
  // (Engram) comes between them.
  bool in_ran = false;  // this layer's attention_in ran in the previous layer's piece
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    if (l == late && any_replay) compact_to_tail(batch, s, hash_ids, hash_w);
    if (s.n == 0) continue;
    const int64_t rows = graphed ? np : s.n;  // the pieces' rows
    if (!in_ran) size_layer(l, s, rows);
    const LayerWeights& L = w_.layers[static_cast<size_t>(l)];
    if (L.has_engram) engram(l, hash_ids, s, s.X.data());
    if (!in_ran) piece(s, l, 0, [&] { attention_in(l, s, rows); });
    attention(l, s);
    const bool next_in = graphed && l + 1 < c.num_hidden_layers && !w_.layers[static_cast<size_t>(l + 1)].has_engram;
    // (Layer l + 1's sizes differ from l's only in buffers attention_out_and_ffn does not read;
    // the ones it reads keep their sizes, and the padding rows of s.o stay zero.)
    if (next_in) size_layer(l + 1, s, rows);
    piece(s, l, 1, [&] {
      attention_out_and_ffn(l, s, rows);
      if (next_in) attention_in(l + 1, s, rows);
    });
    in_ran = next_in;
  }
  for (size_t q = 0; q < nseq; ++q) batch[q].state->advance(batch[q].n);
  head(batch, s);
}

void DeepseekV41::size_layer(int64_t l, Scratch& s, int64_t rows) {
  const auto& c = cfg_;
  const int64_t D = c.hidden_size, hc = c.hc_mult, H = c.num_attention_heads, hd = c.head_dim;
  for (auto* b : {&s.a_pre, &s.a_post, &s.f_post}) b->resize(rows * hc);
  for (auto* b : {&s.a_comb, &s.f_comb}) b->resize(rows * hc * hc);
  for (auto* b : {&s.xc, &s.xn, &s.y}) b->resize(rows * D);
  s.q.resize(rows * H * hd);
  s.o.resize(rows * H * hd);
  s.kv.resize(rows * hd);
  const bool packed = hd % 32 == 0;
  s.kv_codes.resize(packed ? rows * hd : 0);
  s.kv_scales.resize(packed ? rows * hd / 32 : 0);
  s.ckv.resize(c.is_kv_source(l) ? rows * hd : 0);
  s.cgate.resize(c.is_kv_source(l) && c.ratio(l) > 1 ? rows * hd : 0);
  s.iq.resize(c.is_index_source(l) ? rows * c.index_n_heads * c.index_head_dim : 0);
  s.iw.resize(c.is_index_source(l) ? rows * c.index_n_heads : 0);
  // The attention writes the active rows: the padding rows stay zero (finite) for the pieces.
  if (rows > s.n)
    be_.zero(s.o.data() + s.n * H * hd, (rows - s.n) * H * hd * static_cast<int64_t>(sizeof(float)));
}

void DeepseekV41::mhc_site(const Mat& fn, const float* scale, const float* base, float* pre, float* post, float* comb,
                           const float* collapse_pre, const float* norm, Scratch& s, int64_t n) {
  const auto& c = cfg_;
  const int64_t D = c.hidden_size, hc = c.hc_mult;
  // The collapse takes the previous site's pre, not the one these mixes compute: one op.
  be_.hc_mixes_collapse({.x = s.X.data(), .fn = fn.f32(), .scale = scale, .base = base, .pre = pre, .post = post, .comb = comb,
                         .rows = n, .hc = hc, .dim = D, .sinkhorn_iters = c.hc_sinkhorn_iters,
                         .norm_eps = static_cast<float>(c.rms_norm_eps), .hc_eps = static_cast<float>(c.hc_eps)},
                        {.x = s.X.data(), .pre = collapse_pre, .y = s.xc.data(), .rows = n, .hc = hc, .dim = D, .norm_w = norm,
                         .norm_y = s.xn.data(), .norm_eps = static_cast<float>(c.rms_norm_eps)});
}

std::pair<const float*, const float*> DeepseekV41::rope_of(int64_t l, const Scratch& s) const {
  if (cfg_.ratio(l) > 0) return {s.cos_comp.data(), s.sin_comp.data()};
  return {s.cos_main.data(), s.sin_main.data()};
}

void DeepseekV41::attention_in(int64_t l, Scratch& s, int64_t n) {
  const auto& c = cfg_;
  const LayerWeights& L = w_.layers[static_cast<size_t>(l)];
  const AttentionWeights& A = L.attn;
  const int64_t hd = c.head_dim, ratio = c.ratio(l);
  mhc_site(L.hc_attn_fn, L.hc_attn_scale, L.hc_attn_base, s.a_pre.data(), s.a_post.data(), s.a_comb.data(), s.pre.data(),
           L.attn_norm, s, n);
  const float* xn = s.xn.data();
  const auto [cs, sn] = rope_of(l, s);
  // Queries through the low-rank path (qr also feeds the indexer), and the window K=V (norm,
  // RoPE, FP8 fake quantisation: its codes and scales are what the window rings store). Every
  // product of xn in one op: with those two the compressor's (KV sources) and the indexer's
  // head weights (index sources).
  kernels::Buf<float> qr(be_, n * c.q_lora_rank);
  const bool kv_src = c.is_kv_source(l), idx_src = c.is_index_source(l);
  std::vector<std::pair<const Mat*, float*>> of_xn = {{&A.wq_a, qr.data()}, {&A.wkv, s.kv.data()}};
  if (kv_src) of_xn.emplace_back(&A.c_wkv, s.ckv.data());
  if (kv_src && ratio > 1) of_xn.emplace_back(&A.c_wgate, s.cgate.data());
  if (idx_src) of_xn.emplace_back(&A.i_weights_proj, s.iw.data());
  linears(xn, n, of_xn);
  // The low rank's norm, and the window K=V's norm, RoPE and FP8 rounding, as one op.
  const bool packed = hd % 32 == 0;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const kernels::NormRopeQuantArgs finish[] = {
      {.x = qr.data(), .w = A.q_norm, .rows = n, .dim = c.q_lora_rank, .eps = eps},
      {.x = s.kv.data(), .w = A.kv_norm, .cos = cs, .sin = sn, .codes = packed ? s.kv_codes.data() : nullptr,
       .scales = packed ? s.kv_scales.data() : nullptr, .rows = n, .dim = hd, .rope_dim = c.qk_rope_head_dim, .block = 32,
       .eps = eps, .kind = FakeQuant::kFp8Pow2}};
  be_.norm_rope_quant({.items = finish, .n = 2});
  // The queries and the indexer's queries (index sources) from the normalised low rank.
  // (The queries' RoPE, and its inverse on the output, are the attention call's.)
  if (idx_src) linears(qr.data(), n, {{&A.wq_b, s.q.data()}, {&A.i_wq_b, s.iq.data()}});
  else linear(qr.data(), n, A.wq_b, s.q.data());
  // Indexer queries and head weights (index sources); the compressor's projections (KV
  // sources) are sliced per sequence by the attention.
  if (idx_src) {
    const int64_t nh = c.index_n_heads, di = c.index_head_dim;
    rope_rows(s.iq.data(), n, nh, di, s.cos_comp.data(), s.sin_comp.data(), false);
    be_.fake_quant({.x = s.iq.data(), .rows = n * nh, .dim = di, .block = 32, .kind = FakeQuant::kFp4Pow2});
    be_.scale({.x = s.iw.data(), .n = n * nh, .s = 1.0f / std::sqrt(static_cast<float>(nh))});
  }
}

void DeepseekV41::attention_out_and_ffn(int64_t l, Scratch& s, int64_t n) {
  const auto& c = cfg_;
  const LayerWeights& L = w_.layers[static_cast<size_t>(l)];
  const AttentionWeights& A = L.attn;
  const int64_t D = c.hidden_size, hc = c.hc_mult, H = c.num_attention_heads, hd = c.head_dim;
  // The grouped low-rank projection of the output (the attention removed the query's rotation).
  const int64_t G = c.o_groups, gw = H * hd / G, olr = c.o_lora_rank;
  kernels::Buf<float> z(be_, n * G * olr);
  be_.matmul({.x = s.o.data(), .w = A.wo_a, .y = z.data(), .m = n, .n = olr, .k = gw, .ldx = H * hd, .ldy = G * olr,
              .groups = G, .x_group_stride = gw, .y_group_stride = olr});
  be_.matmul({.x = z.data(), .w = A.wo_b, .y = s.y.data(), .m = n, .n = D, .k = G * olr});
  be_.hc_expand({.x = s.X.data(), .y = s.y.data(), .post = s.a_post.data(), .comb = s.a_comb.data(), .rows = n, .hc = hc,
                 .dim = D});
  // The FFN site: its own mixes for the streams after attention; the collapse uses the
  // attention site's pre (computed before attention). `pre` then holds the FFN site's pre:
  // the next layer's attention collapses with it.
  mhc_site(L.hc_ffn_fn, L.hc_ffn_scale, L.hc_ffn_base, s.pre.data(), s.f_post.data(), s.f_comb.data(), s.a_pre.data(),
           L.ffn_norm, s, n);
  moe(l, s.xn.data(), n, s.y.data(),
      {.x = s.X.data(), .y = s.y.data(), .post = s.f_post.data(), .comb = s.f_comb.data(), .rows = n, .hc = hc, .dim = D});
}

void DeepseekV41::head(std::span<SeqChunk> batch, Scratch& s) {
  // Every row, or each sequence's last row (its last active row under replay).
  const int64_t D = cfg_.hidden_size, hc = cfg_.hc_mult, V = cfg_.vocab_size;
  std::vector<int32_t> out_rows;
  std::vector<float*> out_ptrs;       // where each row's logits go (null: not wanted)
  std::vector<const SeqChunk*> drawn_by;  // the chunk whose token each row draws (null: none)
  for (size_t q = 0; q < batch.size(); ++q) {
    const SeqChunk& ch = batch[q];
    DI_CHECK(!(ch.token && ch.all_logits), "a drawn token is for the last row only");
    if ((!ch.logits && !ch.token) || s.rows[q] == 0) continue;
    if (ch.all_logits) {
      for (int64_t i = 0; i < s.rows[q]; ++i) {
        out_rows.push_back(static_cast<int32_t>(s.row0[q] + i));
        out_ptrs.push_back(ch.logits + i * V);
        drawn_by.push_back(nullptr);
      }
    } else {
      out_rows.push_back(static_cast<int32_t>(s.row0[q] + s.rows[q] - 1));
      out_ptrs.push_back(ch.logits);
      drawn_by.push_back(ch.token ? &ch : nullptr);
    }
  }
  const int64_t m = static_cast<int64_t>(out_rows.size());
  if (m == 0) {
    be_.synchronize();
    return;
  }
  kernels::Buf<int32_t> d_rows(be_);
  d_rows.upload(out_rows);
  kernels::Buf<float> Xo(be_, m * hc * D), pre_o(be_, m * hc), xc(be_, m * D), xn(be_, m * D);
  be_.gather_rows({.src = s.X.data(), .idx = d_rows.data(), .dst = Xo.data(), .rows = m, .width = hc * D});
  be_.gather_rows({.src = s.pre.data(), .idx = d_rows.data(), .dst = pre_o.data(), .rows = m, .width = hc});
  be_.hc_collapse({.x = Xo.data(), .pre = pre_o.data(), .y = xc.data(), .rows = m, .hc = hc, .dim = D, .norm_w = w_.norm,
                   .norm_y = xn.data(), .norm_eps = static_cast<float>(cfg_.rms_norm_eps)});
  kernels::Buf<float> lg(be_, m * V);
  linear(xn.data(), m, w_.head, lg.data());
  if (std::any_of(drawn_by.begin(), drawn_by.end(), [](const SeqChunk* ch) { return ch != nullptr; })) {
    std::vector<kernels::DrawParams> draws(static_cast<size_t>(m));  // greedy for the rows not drawn
    int64_t max_lp = 0;  // the most logprobs a row asks for
    bool any_lp = false;
    for (int64_t i = 0; i < m; ++i)
      if (const SeqChunk* ch = drawn_by[static_cast<size_t>(i)]) {
        draws[static_cast<size_t>(i)] = ch->draw;
        any_lp = any_lp || ch->draw.logprobs >= 0;
        max_lp = std::max<int64_t>(max_lp, ch->draw.logprobs);
      }
    // Every row plain greedy: no params (the backend then needs no scratch for weights).
    const bool all_greedy = !any_lp && std::all_of(draws.begin(), draws.end(), [](const kernels::DrawParams& d) {
      return d.temperature < kernels::kDrawGreedyTemperature;
    });
    kernels::Buf<int32_t> ids(be_, m);
    kernels::Buf<kernels::DrawParams> d_draws(be_);
    if (!all_greedy) d_draws.upload(draws);
    kernels::Buf<float> lp(be_, any_lp ? m : 0), top_lp(be_, any_lp ? m * max_lp : 0);
    kernels::Buf<int32_t> top_ids(be_, any_lp ? m * max_lp : 0);
    be_.sample_rows({.x = lg.data(), .params = all_greedy ? nullptr : d_draws.data(), .ids = ids.data(), .rows = m, .cols = V,
                     .logprob = any_lp ? lp.data() : nullptr, .top_ids = any_lp ? top_ids.data() : nullptr,
                     .top_logprobs = any_lp ? top_lp.data() : nullptr, .max_logprobs = max_lp});
    const std::vector<int32_t> h = ids.download();
    for (int64_t i = 0; i < m; ++i)
      if (const SeqChunk* ch = drawn_by[static_cast<size_t>(i)]) *ch->token = h[static_cast<size_t>(i)];
    if (any_lp) {
      const std::vector<float> hl = lp.download(), htl = top_lp.download();
      const std::vector<int32_t> hti = top_ids.download();
      for (int64_t i = 0; i < m; ++i) {
        const SeqChunk* ch = drawn_by[static_cast<size_t>(i)];
        if (!ch || ch->draw.logprobs < 0) continue;
        if (ch->logprob) *ch->logprob = hl[static_cast<size_t>(i)];
        for (int64_t j = 0; j < ch->draw.logprobs; ++j) {
          if (ch->top_ids) ch->top_ids[j] = hti[static_cast<size_t>(i * max_lp + j)];
          if (ch->top_logprobs) ch->top_logprobs[j] = htl[static_cast<size_t>(i * max_lp + j)];
        }
      }
    }
  }
  // Consecutive output rows usually land in one caller buffer: download runs of them at once.
  for (int64_t i = 0; i < m;) {
    int64_t j = i + 1;
    if (!out_ptrs[static_cast<size_t>(i)]) {
      i = j;
      continue;
    }
    while (j < m && out_ptrs[static_cast<size_t>(j)] == out_ptrs[static_cast<size_t>(j - 1)] + V) ++j;
    be_.download(out_ptrs[static_cast<size_t>(i)], lg.data() + i * V, (j - i) * V * static_cast<int64_t>(sizeof(float)));
    i = j;
  }
}

void DeepseekV41::compact_to_tail(std::span<SeqChunk> batch, Scratch& s, std::vector<int64_t>& hash_ids, int64_t hash_w) {
  // Keep, per sequence, only the rows at or after replay_from: the decoder layers run on the
  // tail. Per-row published tensors (top-k, candidates) are compacted with them.
  const int64_t D = cfg_.hidden_size, hc = cfg_.hc_mult;
  std::vector<int32_t> kept;
  std::vector<int64_t> pos;
  std::vector<int64_t> hashes;
  for (size_t q = 0; q < batch.size(); ++q) {
    const int64_t skip = batch[q].replay_from, keep = s.rows[q] - skip, from = s.row0[q] + skip;
    for (int64_t i = 0; i < keep; ++i) {
      kept.push_back(static_cast<int32_t>(from + i));
      pos.push_back(s.pos[static_cast<size_t>(from + i)]);
      if (hash_w)
        hashes.insert(hashes.end(), hash_ids.begin() + (from + i) * hash_w, hash_ids.begin() + (from + i + 1) * hash_w);
    }
    auto compact = [&](kernels::Buf<uint8_t>& b, int64_t width) {
      kernels::Buf<uint8_t> t(be_, keep * width);
      if (keep > 0) be_.copy(t.data(), b.data() + skip * width, keep * width);
      b = std::move(t);
    };
    Shared& sh = s.shared[q];
    if (sh.has_topk) compact(sh.topk, sh.topk_t);
    if (sh.has_candidates) compact(sh.candidates, sh.cand_t);
    s.row0[q] = static_cast<int64_t>(kept.size()) - keep;
    s.rows[q] = keep;
  }
  const int64_t n = static_cast<int64_t>(kept.size());
  kernels::Buf<int32_t> d_kept(be_);
  d_kept.upload(kept);
  kernels::Buf<float> X2(be_, n * hc * D), pre2(be_, n * hc);
  be_.gather_rows({.src = s.X.data(), .idx = d_kept.data(), .dst = X2.data(), .rows = n, .width = hc * D});
  be_.gather_rows({.src = s.pre.data(), .idx = d_kept.data(), .dst = pre2.data(), .rows = n, .width = hc});
  s.X = std::move(X2);
  s.pre = std::move(pre2);
  hash_ids = std::move(hashes);
  s.pos = std::move(pos);
  s.n = n;
  s.n_pad = n;
  Uploads up(be_);
  set_positions(s, up);
  up.send();
}

void DeepseekV41::attention(int64_t l, Scratch& s) {
  const auto& c = cfg_;
  const AttentionWeights& A = w_.layers[static_cast<size_t>(l)].attn;
  const int64_t n = s.n, H = c.num_attention_heads, hd = c.head_dim;
  const int64_t ratio = c.ratio(l);
  const float* kv = s.kv.data();
  const uint8_t* kv_codes = s.kv_codes.data();
  const uint8_t* kv_scales = s.kv_scales.data();
  const kernels::Buf<float>& iq = s.iq;
  const kernels::Buf<float>& iw = s.iw;

  // Window entries of every sequence: cached ring rows, then this chunk's; the compressed
  // branch for every sequence; then one attention call covers every query, each seeing its own
  // sequence's entries; then every ring takes its new rows.
  constexpr int64_t F = sizeof(float);
  const size_t nseq = s.states.size();
  std::vector<int64_t> win_off(nseq, 0), n_cached(nseq, 0);
  int64_t total_win = 0;
  for (size_t qi = 0; qi < nseq; ++qi) {
    if (s.rows[qi] == 0) continue;
    n_cached[qi] = static_cast<int64_t>(s.states[qi]->window(l).pos.size());
    win_off[qi] = total_win;
    total_win += n_cached[qi] + s.rows[qi];
  }
  // Packed rings (FP8, every ring alike): the attention reads each ring as it is stored, its
  // cached rows then the chunk's, whose codes and scales are first copied into the ring's next
  // slots (past the cached rows). Float rings (head dims that do not divide into blocks): the
  // cached rows and the chunk's copied into one float window.
  const bool packed = s.kv_codes.size() > 0;
  kernels::Buf<float> win(be_, packed ? 0 : total_win * hd);
  std::vector<int64_t> win_pos(static_cast<size_t>(total_win));
  std::vector<std::pair<const PackedRows*, float*>> ring_reads;
  std::vector<kernels::CopyDesc> copies;
  int64_t win_block = 0;  // packed: the rings' scale block
  for (size_t qi = 0; qi < nseq; ++qi) {
    const int64_t r0 = s.row0[qi], m = s.rows[qi], off = win_off[qi], nc = n_cached[qi];
    if (m == 0) continue;
    WindowRing& ring = s.states[qi]->window(l);
    DI_CHECK(ring.kv.packed() == packed && (!packed || ring.kv.kind() == kernels::FakeQuant::kFp8Pow2),
             "window ring of layer " + std::to_string(l) + " stored unlike its layer's rows");
    if (packed) win_block = ring.kv.block();
    std::copy(ring.pos.begin(), ring.pos.end(), win_pos.begin() + off);
    std::copy(s.pos.begin() + r0, s.pos.begin() + r0 + m, win_pos.begin() + off + nc);
    if (packed) {
      copies.push_back({ring.kv.code_slot(m), kv_codes + r0 * hd, m * hd});
      copies.push_back({ring.kv.scale_slot(m), kv_scales + r0 * hd / ring.kv.block(), m * hd / ring.kv.block()});
    } else {
      copies.push_back({win.data() + (off + nc) * hd, kv + r0 * hd, m * hd * F});
      ring_reads.push_back({&ring.kv, win.data() + off * hd});
    }
  }
  // One op uploads the ring reads' descriptors, the window's positions, the sequences and the
  // queries' sequence index, then makes those copies and the float rings' reads; it runs after
  // the sources below (which neither read nor write the window or the rings).
  int64_t live = 0;
  for (size_t qi = 0; qi < nseq; ++qi) live += s.rows[qi] > 0;
  Staged st(be_);
  const StagedReads reads = stage_reads(ring_reads, st);
  const int64_t win_pos_at = st.add(win_pos), seqs_at = st.add<kernels::AttentionSeq>(nullptr, live),
                q_seq_at = st.add<int32_t>(nullptr, n);
  st.alloc();
  const int64_t* d_win_pos = st.at<int64_t>(win_pos_at);

  // KV sources: every sequence's new compressed groups (and indexer keys) at once.
  if (ratio > 0 && c.is_kv_source(l)) publish_sources(l, s);
  // Index sources: every sequence's top-k of its compressed entries.
  if (ratio > 0 && c.is_index_source(l)) {
    std::vector<IndexJob> jobs;
    for (size_t qi = 0; qi < nseq; ++qi) {
      const int64_t r0 = s.row0[qi], m = s.rows[qi];
      if (m == 0) continue;
      jobs.push_back({.q = iq.data() + r0 * c.index_n_heads * c.index_head_dim, .w = iw.data() + r0 * c.index_n_heads,
                      .pos = s.d_pos.data() + r0, .n = m, .sh = &s.shared[qi]});
    }
    index_select(l, jobs);
  }
  std::vector<kernels::AttentionSeq> seqs;
  std::vector<int32_t> q_seq(static_cast<size_t>(n));
  int64_t max_t_win = 0, max_t_comp = 0, total_entries = 0;
  for (size_t qi = 0; qi < nseq; ++qi) {
    const int64_t r0 = s.row0[qi], m = s.rows[qi];
    if (m == 0) continue;
    Shared& sh = s.shared[qi];
    const float* comp = nullptr;
    const uint8_t* comp_sel = nullptr;
    int64_t t_comp = 0;
    if (ratio > 0) {
      if (sh.t_comp > 0) {
        comp = sh.comp.data();
        t_comp = sh.t_comp;
        if (sh.has_topk) {
          DI_CHECK(sh.topk_t == t_comp, "top-k width does not match the compressed KV of layer " + std::to_string(l));
          comp_sel = sh.topk.data();
        }
      }
    }
    const int64_t t_win = n_cached[qi] + m;
    for (int64_t i = 0; i < m; ++i) q_seq[static_cast<size_t>(r0 + i)] = static_cast<int32_t>(seqs.size());
    const PackedRows& ring = s.states[qi]->window(l).kv;  // (its slots reserved above: it no longer moves)
    seqs.push_back({.win = packed ? nullptr : win.data() + win_off[qi] * hd, .win_pos = d_win_pos + win_off[qi],
                    .comp = comp, .comp_sel = comp_sel, .t_win = t_win, .t_comp = t_comp, .q0 = r0,
                    .win_codes = packed ? ring.codes_at(0) : nullptr, .win_scales = packed ? ring.scales_at(0) : nullptr});
    max_t_win = std::max(max_t_win, t_win);
    max_t_comp = std::max(max_t_comp, t_comp);
    total_entries += t_win + (comp && comp_sel ? t_comp : 0);
  }
  {
    DI_CHECK(static_cast<int64_t>(seqs.size()) == live, "attention: sequences with rows miscounted");
    const auto [cs, sn] = rope_of(l, s);  // the queries' RoPE, applied by the call
    st.set(seqs_at, seqs);
    st.set(q_seq_at, q_seq);
    copies.insert(copies.end(), reads.copies.begin(), reads.copies.end());
    st.upload(copies);
    run_reads(reads, st);
    be_.attention({.q = s.q.data(), .q_pos = s.d_pos.data(), .sink = A.attn_sink, .out = s.o.data(), .s = n, .heads = H,
                   .head_dim = hd, .window = c.sliding_window, .scale = 1.0f / std::sqrt(static_cast<float>(hd)),
                   .seqs = st.at<kernels::AttentionSeq>(seqs_at), .q_seq = st.at<int32_t>(q_seq_at),
                   .n_seqs = static_cast<int64_t>(seqs.size()), .win_block = win_block,
                   .max_t_win = max_t_win, .max_t_comp = max_t_comp, .max_selected = c.index_topk,
                   .total_entries = total_entries, .q_cos = cs, .q_sin = sn, .rope_dim = c.qk_rope_head_dim});
  }
  // Every ring keeps its last window-1 entries (a packed ring's new codes and scales were copied
  // in above).
  for (size_t qi = 0; qi < nseq; ++qi) {
    const int64_t r0 = s.row0[qi], m = s.rows[qi];
    if (m == 0) continue;
    WindowRing& ring = s.states[qi]->window(l);
    const int64_t t_win = n_cached[qi] + m;
    const int64_t keep = std::min<int64_t>(c.sliding_window - 1, t_win), drop = t_win - keep;
    ring.kv.append(kv + r0 * hd, m);
    ring.kv.drop_front(drop);
    ring.pos.assign(win_pos.begin() + win_off[qi] + drop, win_pos.begin() + win_off[qi] + t_win);
  }
}

void DeepseekV41::publish_sources(int64_t l, Scratch& s) {
  const auto& c = cfg_;
  const AttentionWeights& A = w_.layers[static_cast<size_t>(l)].attn;
  const int64_t hd = c.head_dim, r = c.ratio(l);
  constexpr int64_t F = sizeof(float);
  const size_t nseq = s.states.size();
  // The compressor: this forward's rows of each sequence join its open group; every complete
  // group is pooled (ratio > 1) or is the row itself (ratio 1). latent: [G, hd], sequence by
  // sequence, groups[q] of them from row lat0[q], the first at group index first[q].
  std::vector<int64_t> groups(nseq, 0), lat0(nseq, 0), first(nseq, 0);
  int64_t G = 0;
  kernels::Buf<float> latent(be_);
  std::vector<kernels::CopyDesc> copies;
  for (size_t q = 0; q < nseq; ++q) {
    const int64_t m = s.rows[q];
    if (m == 0) continue;
    SourceState& src = s.states[q]->source(l);
    first[q] = src.n_comp;
    if (r == 1) {
      groups[q] = m;
    } else {
      const int64_t total = src.buf_rows + m;
      src.buf_kv.resize(total * hd, true);
      src.buf_gate.resize(total * hd, true);
      copies.push_back({src.buf_kv.data() + src.buf_rows * hd, s.ckv.data() + s.row0[q] * hd, m * hd * F});
      copies.push_back({src.buf_gate.data() + src.buf_rows * hd, s.cgate.data() + s.row0[q] * hd, m * hd * F});
      src.buf_rows = total;
      groups[q] = total / r;
    }
    lat0[q] = G;
    G += groups[q];
  }
  if (r == 1) {
    latent.resize(s.n * hd);  // every row, already in sequence order
    be_.copy(latent.data(), s.ckv.data(), s.n * hd * F);
  } else {
    copy_batch(copies);
    // The complete groups' rows side by side, pooled at once; the open groups' rows (fewer
    // than r, so never overlapping the first r) move to the front of their buffers.
    kernels::Buf<float> pool_kv(be_, G * r * hd), pool_gate(be_, G * r * hd);
    std::vector<kernels::CopyDesc> gather, rest;
    for (size_t q = 0; q < nseq; ++q) {
      if (groups[q] == 0) continue;
      SourceState& src = s.states[q]->source(l);
      const int64_t used = groups[q] * r * hd, left = src.buf_rows - groups[q] * r;
      gather.push_back({pool_kv.data() + lat0[q] * r * hd, src.buf_kv.data(), used * F});
      gather.push_back({pool_gate.data() + lat0[q] * r * hd, src.buf_gate.data(), used * F});
      if (left > 0) {
        rest.push_back({src.buf_kv.data(), src.buf_kv.data() + used, left * hd * F});
        rest.push_back({src.buf_gate.data(), src.buf_gate.data() + used, left * hd * F});
      }
      src.buf_rows = left;  // (shrinking keeps the memory the copies below use)
      src.buf_kv.resize(left * hd, true);
      src.buf_gate.resize(left * hd, true);
    }
    copy_batch(gather);
    copy_batch(rest);
    latent.resize(G * hd);
    if (G > 0)
      be_.compress_pool({.kv = pool_kv.data(), .gate = pool_gate.data(), .out = latent.data(), .groups = G, .ratio = r, .dim = hd});
  }
  if (G > 0) rms(latent.data(), A.c_norm, latent.data(), G, hd);
  // Group g of a sequence covers tokens from (first + g) * r: its entries rotate there.
  std::vector<int64_t> gpos(static_cast<size_t>(G));
  std::vector<std::pair<PackedRows*, int64_t>> comp_dest, key_dest;
  for (size_t q = 0; q < nseq; ++q) {
    for (int64_t g = 0; g < groups[q]; ++g) gpos[static_cast<size_t>(lat0[q] + g)] = (first[q] + g) * r;
    if (s.rows[q] == 0) continue;
    SourceState& src = s.states[q]->source(l);
    comp_dest.push_back({&src.comp, groups[q]});
    key_dest.push_back({&src.index_k, groups[q]});
  }
  // Indexer keys from the pre-RoPE, pre-FP4 latent (an index source's own keys).
  if (c.is_index_source(l) && G > 0) {
    const int64_t di = c.index_head_dim;
    kernels::Buf<float> k(be_, G * di);
    linear(latent.data(), G, A.i_wk, k.data());
    rms(k.data(), A.i_k_norm, k.data(), G, di);
    publish_rows(k.data(), gpos, di, FakeQuant::kFp4Pow2, 32, key_dest);
  }
  // The compressed entries: rotated at their group's first token, FP4-quantised, appended.
  if (G > 0) publish_rows(latent.data(), gpos, hd, FakeQuant::kFp4E4m3, 16, comp_dest);
  // Every sequence reads its whole running caches as float for this forward (one op each).
  std::vector<std::pair<const PackedRows*, float*>> reads;
  for (size_t q = 0; q < nseq; ++q) {
    if (s.rows[q] == 0) continue;
    SourceState& src = s.states[q]->source(l);
    Shared& sh = s.shared[q];
    src.n_comp += groups[q];
    sh.t_comp = src.n_comp;
    reads.push_back({&src.comp, buf(sh.comp, src.n_comp * hd).data()});
    if (c.is_index_source(l)) {
      src.n_index += groups[q];
      sh.t_index = src.n_index;
      reads.push_back({&src.index_k, buf(sh.index_k, src.n_index * c.index_head_dim).data()});
    }
  }
  read_rows(reads);
}

void DeepseekV41::publish_rows(float* x, const std::vector<int64_t>& pos, int64_t dim, FakeQuant kind, int64_t block,
                               const std::vector<std::pair<PackedRows*, int64_t>>& dest) {
  const int64_t rows = static_cast<int64_t>(pos.size());
  std::vector<float> gc, gs;
  rope_compress_.compute(pos.data(), rows, &gc, &gs);
  kernels::Buf<float> d_gc(be_), d_gs(be_);
  d_gc.upload(gc);
  d_gs.upload(gs);
  rope_rows(x, rows, 1, dim, d_gc.data(), d_gs.data(), false);
  const bool packed = !dest.empty() && dest.front().first->packed();
  const int64_t cb = packed ? dest.front().first->code_bytes() : 0, sb = packed ? dest.front().first->scale_bytes() : 0;
  kernels::Buf<uint8_t> codes(be_, rows * cb), scales(be_, rows * sb);
  be_.fake_quant({.x = x, .rows = rows, .dim = dim, .block = block, .kind = kind, .codes = packed ? codes.data() : nullptr,
                  .scales = packed ? scales.data() : nullptr});
  // Each destination takes its rows: the codes and scales into its slots, then the append.
  std::vector<kernels::CopyDesc> copies;
  int64_t off = 0;
  for (const auto& [d, k] : dest) {
    if (packed && k > 0) {
      copies.push_back({d->code_slot(k), codes.data() + off * cb, k * cb});
      copies.push_back({d->scale_slot(k), scales.data() + off * sb, k * sb});
    }
    off += k;
  }
  copy_batch(copies);
  off = 0;
  for (const auto& [d, k] : dest) {
    d->append(x + off * dim, k);
    off += k;
  }
}

void DeepseekV41::read_rows(const std::vector<std::pair<const PackedRows*, float*>>& reads) {
  Staged st(be_);
  const StagedReads r = stage_reads(reads, st);
  if (st.host.empty() && r.copies.empty()) return;
  st.alloc();
  st.upload(r.copies);
  run_reads(r, st);
}

DeepseekV41::StagedReads DeepseekV41::stage_reads(const std::vector<std::pair<const PackedRows*, float*>>& reads,
                                                  Staged& st) {
  // Packed caches of one format dequantised in one op per format; float ones copied.
  StagedReads r;
  for (const auto& [rows, out] : reads) {
    if (rows->size() == 0) continue;
    if (!rows->packed()) {
      r.copies.push_back({out, rows->values_at(0), rows->size() * rows->dim() * static_cast<int64_t>(sizeof(float))});
      continue;
    }
    auto it = std::find_if(r.formats.begin(), r.formats.end(), [&](const StagedReads::Format& f) {
      return f.rows->kind() == rows->kind() && f.rows->dim() == rows->dim() && f.rows->block() == rows->block();
    });
    if (it == r.formats.end()) it = r.formats.insert(r.formats.end(), {rows, {}, 0});
    it->descs.push_back({rows->codes_at(0), rows->scales_at(0), out, rows->size()});
  }
  for (auto& f : r.formats) f.at = st.add(f.descs);
  return r;
}

void DeepseekV41::run_reads(const StagedReads& r, const Staged& st) {
  for (const auto& f : r.formats) {
    int64_t max_rows = 0;
    for (const auto& d : f.descs) max_rows = std::max(max_rows, d.rows);
    be_.dequant_packed_batch({.kind = f.rows->kind(), .descs = st.at<kernels::PackedDesc>(f.at),
                              .n = static_cast<int64_t>(f.descs.size()), .dim = f.rows->dim(), .block = f.rows->block(),
                              .max_rows = max_rows});
  }
}

void DeepseekV41::index_select(int64_t l, const std::vector<IndexJob>& jobs) {
  // Every sequence's scores, candidate blocks and top-k: one op each over all sequences.
  const auto& c = cfg_;
  const int64_t nh = c.index_n_heads, di = c.index_head_dim, r = c.ratio(l);
  std::vector<const IndexJob*> live;
  int64_t total = 0;
  for (const IndexJob& j : jobs)
    if (j.sh->t_index > 0) {
      live.push_back(&j);
      total += j.n * j.sh->t_index;
    }
  if (live.empty()) return;
  kernels::Buf<float> scores(be_, total);
  std::vector<kernels::IndexerScoreArgs> score_ops;
  std::vector<kernels::CandidateBlocksArgs> cand_ops;
  std::vector<kernels::TopkMaskArgs> topk_ops;
  int64_t off = 0;
  for (const IndexJob* j : live) {
    Shared& sh = *j->sh;
    const int64_t T = sh.t_index, n = j->n;
    float* sc = scores.data() + off;
    off += n * T;
    score_ops.push_back({.q = j->q, .k = sh.index_k.data(), .w = j->w, .q_pos = j->pos, .scores = sc, .s = n, .heads = nh,
                         .dim = di, .t = T, .ratio = r, .score_scale = 1.0f / std::sqrt(static_cast<float>(di))});
    const uint8_t* restrict_to = nullptr;
    if (l == c.candidate_source_layer_id) {
      buf(sh.candidates, n * T);  // written entirely by the op
      cand_ops.push_back({.scores = sc, .q_pos = j->pos, .keep = sh.candidates.data(), .s = n, .t = T, .ratio = r,
                          .block_size = c.candidate_block_size, .topk_blocks = c.candidate_topk_blocks});
      sh.has_candidates = true;
      sh.cand_t = T;
    } else if (c.candidate_source_layer_id >= 0 && c.candidate_source_layer_id < l && sh.has_candidates) {
      DI_CHECK(sh.cand_t == T, "candidate mask width does not match the indexer keys of layer " + std::to_string(l));
      restrict_to = sh.candidates.data();
    }
    buf(sh.topk, n * T);  // written entirely by the op
    topk_ops.push_back({.scores = sc, .restrict_to = restrict_to, .selected = sh.topk.data(), .s = n, .t = T,
                        .k = std::min(c.index_topk, T)});
    sh.has_topk = true;
    sh.topk_t = T;
  }
  be_.indexer_scores_batch({.items = score_ops.data(), .n = static_cast<int64_t>(score_ops.size())});
  if (!cand_ops.empty()) be_.candidate_blocks_batch({.items = cand_ops.data(), .n = static_cast<int64_t>(cand_ops.size())});
  be_.topk_mask_batch({.items = topk_ops.data(), .n = static_cast<int64_t>(topk_ops.size())});
}

void DeepseekV41::moe(int64_t l, const float* xn, int64_t n, float* y, const kernels::HcExpandArgs& expand) {
  const auto& c = cfg_;
  const MoeWeights& F = w_.layers[static_cast<size_t>(l)].ffn;
  const int64_t D = c.hidden_size, E = c.n_routed_experts, K = c.num_experts_per_tok, I = c.moe_intermediate_size;
  // The shared expert (expert E of F's tables) runs as one more expert of the grouped products
  // when it is stored like the routed ones (a backend's fast grouped path takes one format);
  // otherwise (a release checkpoint: FP4 experts, an FP8 shared expert) as dense products, its
  // gate and up in one op with the router's.
  const auto same = [&](const std::vector<Mat>& w) { return w[static_cast<size_t>(E)].format == w[0].format; };
  const bool merged = same(F.w1) && same(F.w2) && same(F.w3);
  const int64_t R = n * K, rows = R + (merged ? n : 0), experts = E + (merged ? 1 : 0);
  kernels::Buf<float> logits(be_, n * E), sg(be_), su(be_), sa(be_), so(be_);
  if (merged) {
    linear(xn, n, F.gate, logits.data());
  } else {
    for (auto* b : {&sg, &su, &sa}) b->resize(n * I);
    so.resize(n * D);
    linears(xn, n, {{&F.gate, logits.data()}, {&F.w1[static_cast<size_t>(E)], sg.data()}, {&F.w3[static_cast<size_t>(E)], su.data()}});
  }
  kernels::Buf<int32_t> routed_ids(be_, n * K);
  kernels::Buf<float> routed_w(be_, n * K);
  int32_t* ids = routed_ids.data();
  float* wts = routed_w.data();
  kernels::ScoringFunc fn = c.scoring_func == "softmax"   ? kernels::ScoringFunc::kSoftmax
                            : c.scoring_func == "sigmoid" ? kernels::ScoringFunc::kSigmoid
                                                          : kernels::ScoringFunc::kSqrtSoftplus;
  // The routing, then (one op) its pairs grouped by expert (in backend memory: no round trip to the
  // host); expert e's rows are contiguous in the permuted order, and each product covers all experts.
  // Merged, the shared expert's rows follow: every token once, rows [n*K, n*K + n) in token
  // order, weight 1.
  kernels::Buf<int32_t> offsets(be_, E + 2), perm_token(be_, rows), slot_row(be_, R);
  kernels::Buf<float> perm_w(be_, rows);
  be_.route({.logits = logits.data(), .bias = F.bias, .ids = ids, .weights = wts, .rows = n, .experts = E,
             .top_k = K, .temp = static_cast<float>(c.gate_temp), .routed_scaling = static_cast<float>(c.routed_scaling_factor),
             .normalize = c.norm_topk_prob, .func = fn},
            {.ids = ids, .weights = wts, .offsets = offsets.data(), .perm_token = perm_token.data(),
             .perm_weight = perm_w.data(), .slot_row = slot_row.data(), .n = n, .k = K, .experts = E, .shared = merged});
  kernels::Buf<float> g(be_, rows * I), u(be_, rows * I), a(be_, rows * I), eo(be_, rows * D);
  const float limit = static_cast<float>(c.swiglu_limit);
  // Every expert's gate and up projections in one op, reading the tokens' rows in the permuted
  // order through the index (no gathered copy), then its down projection.
  be_.grouped_matmul({.x = xn, .w = F.w1.data(), .offsets = offsets.data(), .y = g.data(), .rows = rows, .n = I, .k = D,
                      .experts = experts, .w2 = F.w3.data(), .y2 = u.data(), .x_rows = perm_token.data(), .x_src_rows = n});
  be_.swiglu({.gate = g.data(), .up = u.data(), .weight = perm_w.data(), .out = a.data(), .rows = rows, .inter = I, .limit = limit});
  be_.grouped_matmul({.x = a.data(), .w = F.w2.data(), .offsets = offsets.data(), .y = eo.data(), .rows = rows, .n = D,
                      .k = I, .experts = experts});
  if (!merged) {
    be_.swiglu({.gate = sg.data(), .up = su.data(), .weight = nullptr, .out = sa.data(), .rows = n, .inter = I, .limit = limit});
    linear(sa.data(), n, F.w2[static_cast<size_t>(E)], so.data());
  }
  // Per token: routed outputs in ascending expert order (as the reference accumulates),
  // then the shared expert's; then (one op) the streams expanded with it.
  be_.moe_combine_expand({.expert_out = eo.data(), .slot_row = slot_row.data(), .ids = ids,
                          .shared = merged ? eo.data() + R * D : so.data(), .y = y, .n = n, .k = K, .dim = D},
                         expand);
}

}  // namespace deepinfer::model
