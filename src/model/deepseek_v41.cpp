#include "model/deepseek_v41.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>

#include "core/error.h"
#include "model/engram_rows.h"

namespace deepinfer::model {

using kernels::FakeQuant;

DeepseekV41::DeepseekV41(loader::ModelConfig config, Weights weights, kernels::Backend& backend,
                         std::shared_ptr<const EngramHasher> engram, ModelOptions options)
    : cfg_(std::move(config)), w_(std::move(weights)), be_(backend), engram_(std::move(engram)), dspark_(options.dspark) {
  rope_main_.inv_freq = rope_inv_freq(cfg_.rope_main, cfg_.qk_rope_head_dim, cfg_.max_position_embeddings);
  rope_compress_.inv_freq = rope_inv_freq(cfg_.rope_compress, cfg_.qk_rope_head_dim, cfg_.max_position_embeddings);
  if (!cfg_.engram_layer_ids.empty() && !engram_)
    throw Error("config.json: field 'engram_layer_ids': Engram layers need the tokenizer-derived hash state "
                "(tokenizer.json in the checkpoint directory)");
  if (dspark_ && !w_.has_draft)
    throw Error(cfg_.num_nextn_predict_layers == 0
                    ? "DSpark speculative decoding needs the draft stages, but config.json's num_nextn_predict_layers is 0"
                    : "DSpark speculative decoding needs the draft stages, but the checkpoint has no mtp.* tensors");
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
  // A device backend computes on its own copy of every weight (the Engram tables aside when
  // they stay in host memory).
  if (!be_.host_memory()) upload_weights(cfg_, w_, be_, options.engram_tables_on_host);
  engram_staged_ = be_.host_memory() ? options.stage_engram_rows : w_.engram_tables_on_host;
  for (int64_t l : cfg_.engram_layer_ids) {
    engram_tables_.push_back(w_.layers[static_cast<size_t>(l)].engram.table);
    // A format whose rows can be staged (Error otherwise), checked before any step.
    if (engram_staged_) table_row_bytes(engram_tables_.back());
  }
}

DeepseekV41::~DeepseekV41() = default;

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

const LayerWeights& DeepseekV41::block(int64_t l) const {
  const int64_t L = cfg_.num_hidden_layers;
  return l < L ? w_.layers[static_cast<size_t>(l)] : w_.draft.stages[static_cast<size_t>(l - L)];
}

int64_t DeepseekV41::late_layer_start() const {
  if (cfg_.kv_source_layer_ids.empty()) return cfg_.num_hidden_layers;
  return *std::max_element(cfg_.kv_source_layer_ids.begin(), cfg_.kv_source_layer_ids.end()) + 1;
}

void DeepseekV41::embed(ForwardBatch& b, kernels::Uploads& up) {
  const int64_t D = cfg_.hidden_size, hc = cfg_.hc_mult, np = b.n_pad, n = b.n;
  // With the layout's inputs, one op: the previous site's pre mix (one-hot on stream 0,
  // [n_pad, hc]).
  std::vector<float> one_hot(static_cast<size_t>(np * hc), 0.0f);
  for (int64_t i = 0; i < np; ++i) one_hot[static_cast<size_t>(i * hc)] = 1.0f;
  up.add(b.pre, one_hot);
  if (dspark_) tap_layout(b, up);
  up.send();
  // Streams: the embedding copied into every hc stream (padding rows zero). [n_pad, hc, D]
  b.X.resize(np * hc * D);
  be_.gather_weight_rows({.w = w_.embed, .ids = b.d_tok.data(), .out = b.X.data(), .rows = n, .copies = hc});
  if (np > n) be_.zero(b.X.data() + n * hc * D, (np - n) * hc * D * static_cast<int64_t>(sizeof(float)));
  // Engram hash ids of every row, for all engram layers: [rows, n_engram_layers, cols] (host).
  b.hash_ids.clear();
  b.hash_w = 0;
  if (engram_) {
    b.hash_w = engram_->n_layers() * engram_->n_cols();
    b.hash_ids.resize(static_cast<size_t>(n * b.hash_w));
    for (size_t q = 0; q < b.states.size(); ++q)
      engram_->hash(b.tokens[q], b.pos.data() + b.row0[q], b.rows[q], b.states[q]->engram_history(),
                    b.hash_ids.data() + b.row0[q] * b.hash_w);
  }
}

std::vector<Stage> DeepseekV41::layer_program(ForwardBatch& b) {
  // Per layer: Engram (graphable: its rows sent ahead), the attention's inputs (graphable), the
  // attention (eager: per-sequence caches), its output and the FFN (graphable). Under bounded
  // replay the late layers start by keeping only the tails' rows. A layer without rows left
  // does nothing.
  std::vector<Stage> p;
  const int64_t late = late_layer_start();
  size_t first_engram = 0;  // 1 + the index of the first Engram stage (0: none)
  for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) {
    if (l == late && b.any_replay) p.push_back({.run = [this, &b] { compact_to_tail(b); }});
    if (w_.layers[static_cast<size_t>(l)].has_engram) {
      if (!first_engram) first_engram = p.size() + 1;
      p.push_back({.graphable = true, .run = [this, &b, l] {
                     if (b.n > 0) engram(l, b);
                   }});
    }
    p.push_back({.graphable = true,
                 .prepare = [this, &b, l] {
                   if (b.n > 0) size_layer(l, b);
                 },
                 .run = [this, &b, l] {
                   if (b.n > 0) attention_in(l, b);
                 }});
    p.push_back({.run = [this, &b, l] {
      if (b.n > 0) attention(l, b);
    }});
    // (Run in one graph with the next layer's attention_in, whose sizing comes first: layer
    // l + 1's sizes differ from l's only in buffers this stage does not read, and the padding
    // rows of b.o stay zero.)
    p.push_back({.graphable = true, .run = [this, &b, l] {
                   if (b.n > 0) attention_out_and_ffn(l, b);
                 }});
  }
  if (first_engram) {
    // The step's Engram rows are packed on the host while the first graph runs (at the first
    // eager stage) and copied while the layers before the first Engram layer run; the compute
    // stream waits for the copy after the last eager stage before that layer. Both stages sit
    // beside eager ones, so the graphs are not split further.
    const auto eager = [&](size_t i) { return !p[i].graphable; };
    size_t wait = first_engram - 1, send = 0;
    while (wait > 0 && !eager(wait - 1)) --wait;
    while (send < wait && !eager(send)) ++send;
    p.insert(p.begin() + static_cast<std::ptrdiff_t>(wait), Stage{.run = [this] { be_.await_uploads(); }});
    p.insert(p.begin() + static_cast<std::ptrdiff_t>(send), Stage{.run = [this, &b] { stage_engram(b); }});
  }
  if (dspark_) {
    p.push_back({.graphable = true, .run = [this, &b] {
                   if (b.n > 0) draft_keys(b);
                 }});
    p.push_back({.run = [this, &b] {
      if (b.n > 0) fill_draft_rings(b);
    }});
  }
  return p;
}

void DeepseekV41::stage_engram(ForwardBatch& b) {
  const EngramStep step(engram_tables_, engram_staged_, engram_->n_cols(), b.n_pad);
  b.engram.resize(step.bytes());
  be_.upload_ahead(b.engram.data(), step.bytes(), [&](uint8_t* out) { step.pack(b.hash_ids.data(), b.n, out); });
}

void DeepseekV41::size_layer(int64_t l, ForwardBatch& b) {
  const auto& c = cfg_;
  const int64_t D = c.hidden_size, hc = c.hc_mult, H = c.num_attention_heads, hd = c.head_dim, rows = b.n_pad;
  for (auto* t : {&b.a_pre, &b.a_post, &b.f_post}) t->resize(rows * hc);
  for (auto* t : {&b.a_comb, &b.f_comb}) t->resize(rows * hc * hc);
  for (auto* t : {&b.xc, &b.xn, &b.y}) t->resize(rows * D);
  b.q.resize(rows * H * hd);
  b.o.resize(rows * H * hd);
  b.kv.resize(rows * hd);
  const bool packed = hd % 32 == 0;
  b.kv_codes.resize(packed ? rows * hd : 0);
  b.kv_scales.resize(packed ? rows * hd / 32 : 0);
  b.ckv.resize(c.is_kv_source(l) ? rows * hd : 0);
  b.cgate.resize(c.is_kv_source(l) && c.ratio(l) > 1 ? rows * hd : 0);
  b.iq.resize(c.is_index_source(l) ? rows * c.index_n_heads * c.index_head_dim : 0);
  b.iw.resize(c.is_index_source(l) ? rows * c.index_n_heads : 0);
  // The attention writes the active rows: the padding rows stay zero (finite) for the pieces.
  if (rows > b.n)
    be_.zero(b.o.data() + b.n * H * hd, (rows - b.n) * H * hd * static_cast<int64_t>(sizeof(float)));
}

void DeepseekV41::mhc_site(const Mat& fn, const float* scale, const float* base, float* pre, float* post, float* comb,
                           const float* collapse_pre, const float* norm, ForwardBatch& b, int64_t n) {
  const auto& c = cfg_;
  const int64_t D = c.hidden_size, hc = c.hc_mult;
  // The collapse takes the previous site's pre, not the one these mixes compute: one op.
  be_.hc_mixes_collapse({.x = b.X.data(), .fn = fn.f32(), .scale = scale, .base = base, .pre = pre, .post = post, .comb = comb,
                         .rows = n, .hc = hc, .dim = D, .sinkhorn_iters = c.hc_sinkhorn_iters,
                         .norm_eps = static_cast<float>(c.rms_norm_eps), .hc_eps = static_cast<float>(c.hc_eps)},
                        {.x = b.X.data(), .pre = collapse_pre, .y = b.xc.data(), .rows = n, .hc = hc, .dim = D, .norm_w = norm,
                         .norm_y = b.xn.data(), .norm_eps = static_cast<float>(c.rms_norm_eps)});
}

std::pair<const float*, const float*> DeepseekV41::rope_of(int64_t l, const ForwardBatch& b) const {
  if (cfg_.ratio(l) > 0) return {b.cos_comp.data(), b.sin_comp.data()};
  return {b.cos_main.data(), b.sin_main.data()};
}

void DeepseekV41::attention_in(int64_t l, ForwardBatch& b) {
  const int64_t n = b.n_pad;
  const auto& c = cfg_;
  const LayerWeights& L = block(l);
  const AttentionWeights& A = L.attn;
  const int64_t hd = c.head_dim, ratio = c.ratio(l);
  if (dspark_) tap(l, b);
  mhc_site(L.hc_attn_fn, L.hc_attn_scale, L.hc_attn_base, b.a_pre.data(), b.a_post.data(), b.a_comb.data(), b.pre.data(),
           L.attn_norm, b, n);
  const float* xn = b.xn.data();
  const auto [cs, sn] = rope_of(l, b);
  // Queries through the low-rank path (qr also feeds the indexer), and the window K=V (norm,
  // RoPE, FP8 fake quantisation: its codes and scales are what the window rings store). Every
  // product of xn in one op: with those two the compressor's (KV sources) and the indexer's
  // head weights (index sources).
  kernels::Buf<float> qr(be_, n * c.q_lora_rank);
  const bool kv_src = c.is_kv_source(l), idx_src = c.is_index_source(l);
  std::vector<std::pair<const Mat*, float*>> of_xn = {{&A.wq_a, qr.data()}, {&A.wkv, b.kv.data()}};
  if (kv_src) of_xn.emplace_back(&A.c_wkv, b.ckv.data());
  if (kv_src && ratio > 1) of_xn.emplace_back(&A.c_wgate, b.cgate.data());
  if (idx_src) of_xn.emplace_back(&A.i_weights_proj, b.iw.data());
  linears(xn, n, of_xn);
  // The low rank's norm, and the window K=V's norm, RoPE and FP8 rounding, as one op.
  const bool packed = hd % 32 == 0;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const kernels::NormRopeQuantArgs finish[] = {
      {.x = qr.data(), .w = A.q_norm, .rows = n, .dim = c.q_lora_rank, .eps = eps},
      {.x = b.kv.data(), .w = A.kv_norm, .cos = cs, .sin = sn, .codes = packed ? b.kv_codes.data() : nullptr,
       .scales = packed ? b.kv_scales.data() : nullptr, .rows = n, .dim = hd, .rope_dim = c.qk_rope_head_dim, .block = 32,
       .eps = eps, .kind = FakeQuant::kFp8Pow2}};
  be_.norm_rope_quant({.items = finish, .n = 2});
  // The queries and the indexer's queries (index sources) from the normalised low rank.
  // (The queries' RoPE, and its inverse on the output, are the attention call'b.)
  if (idx_src) linears(qr.data(), n, {{&A.wq_b, b.q.data()}, {&A.i_wq_b, b.iq.data()}});
  else linear(qr.data(), n, A.wq_b, b.q.data());
  // Indexer queries and head weights (index sources); the compressor's projections (KV
  // sources) are sliced per sequence by the attention.
  if (idx_src) {
    const int64_t nh = c.index_n_heads, di = c.index_head_dim;
    rope_rows(b.iq.data(), n, nh, di, b.cos_comp.data(), b.sin_comp.data(), false);
    be_.fake_quant({.x = b.iq.data(), .rows = n * nh, .dim = di, .block = 32, .kind = FakeQuant::kFp4Pow2});
    be_.scale({.x = b.iw.data(), .n = n * nh, .s = 1.0f / std::sqrt(static_cast<float>(nh))});
  }
}

void DeepseekV41::attention_out_and_ffn(int64_t l, ForwardBatch& b) {
  const int64_t n = b.n_pad;
  const auto& c = cfg_;
  const LayerWeights& L = block(l);
  const AttentionWeights& A = L.attn;
  const int64_t D = c.hidden_size, hc = c.hc_mult, H = c.num_attention_heads, hd = c.head_dim;
  // The grouped low-rank projection of the output (the attention removed the query's rotation).
  const int64_t G = c.o_groups, gw = H * hd / G, olr = c.o_lora_rank;
  kernels::Buf<float> z(be_, n * G * olr);
  be_.matmul({.x = b.o.data(), .w = A.wo_a, .y = z.data(), .m = n, .n = olr, .k = gw, .ldx = H * hd, .ldy = G * olr,
              .groups = G, .x_group_stride = gw, .y_group_stride = olr});
  be_.matmul({.x = z.data(), .w = A.wo_b, .y = b.y.data(), .m = n, .n = D, .k = G * olr});
  be_.hc_expand({.x = b.X.data(), .y = b.y.data(), .post = b.a_post.data(), .comb = b.a_comb.data(), .rows = n, .hc = hc,
                 .dim = D});
  // The FFN site: its own mixes for the streams after attention; the collapse uses the
  // attention site's pre (computed before attention). `pre` then holds the FFN site's pre:
  // the next layer's attention collapses with it.
  mhc_site(L.hc_ffn_fn, L.hc_ffn_scale, L.hc_ffn_base, b.pre.data(), b.f_post.data(), b.f_comb.data(), b.a_pre.data(),
           L.ffn_norm, b, n);
  moe(l, b.xn.data(), n, b.y.data(),
      {.x = b.X.data(), .y = b.y.data(), .post = b.f_post.data(), .comb = b.f_comb.data(), .rows = n, .hc = hc, .dim = D});
}

kernels::Buf<float> DeepseekV41::logits(ForwardBatch& b, const std::vector<int32_t>& rows) {
  // The rows' streams and last pre mix gathered, collapsed and normalised, then the head.
  const int64_t D = cfg_.hidden_size, hc = cfg_.hc_mult, V = cfg_.vocab_size;
  const int64_t m = static_cast<int64_t>(rows.size());
  kernels::Buf<float> lg(be_, m * V);
  if (m == 0) return lg;
  kernels::Buf<int32_t> d_rows(be_);
  d_rows.upload(rows);
  kernels::Buf<float> Xo(be_, m * hc * D), pre_o(be_, m * hc), xc(be_, m * D), xn(be_, m * D);
  be_.gather_rows({.src = b.X.data(), .idx = d_rows.data(), .dst = Xo.data(), .rows = m, .width = hc * D});
  be_.gather_rows({.src = b.pre.data(), .idx = d_rows.data(), .dst = pre_o.data(), .rows = m, .width = hc});
  be_.hc_collapse({.x = Xo.data(), .pre = pre_o.data(), .y = xc.data(), .rows = m, .hc = hc, .dim = D, .norm_w = w_.norm,
                   .norm_y = xn.data(), .norm_eps = static_cast<float>(cfg_.rms_norm_eps)});
  linear(xn.data(), m, w_.head, lg.data());
  return lg;
}

}  // namespace deepinfer::model
