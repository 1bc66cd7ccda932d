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
struct DeepseekV41::Shared {
  const float* comp = nullptr;   // [t_comp, hd] running compressed KV of the latest KV source
  int64_t t_comp = 0;
  const float* index_k = nullptr;  // [t_index, d_idx] running indexer keys
  int64_t t_index = 0;
  std::vector<float> comp_f32, index_k_f32;  // the packed caches read as float for this forward
  bool has_topk = false;
  std::vector<uint8_t> topk;     // [rows, topk_t] 1 = selected
  int64_t topk_t = 0;
  bool has_candidates = false;
  std::vector<uint8_t> candidates;  // [rows, cand_t]
  int64_t cand_t = 0;
};

// The packed rows of one forward: every active row of every sequence, in sequence order.
struct DeepseekV41::Scratch {
  int64_t n = 0;                             // active rows
  std::vector<int64_t> pos;                  // [n] absolute positions
  std::vector<float> cos_main, sin_main;     // [n, rd/2]
  std::vector<float> cos_comp, sin_comp;     // [n, rd/2]
  std::vector<int64_t> row0, rows;           // per sequence: first active row, active row count
  std::vector<SequenceState*> states;        // per sequence
  std::vector<Shared> shared;                // per sequence
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
    std::vector<float> qk(static_cast<size_t>(hc * D));
    for (int64_t i = 0; i < hc * D; ++i) qk[i] = e.q_weight[i] * e.k_weight[i];
    engram_qk_.push_back(std::move(qk));
  }
}

void DeepseekV41::engram(int64_t l, const int64_t* hash_ids, Scratch& s, float* X) {
  const auto& c = cfg_;
  const size_t j = static_cast<size_t>(std::find(c.engram_layer_ids.begin(), c.engram_layer_ids.end(), l) -
                                       c.engram_layer_ids.begin());
  const EngramWeights& e = w_.layers[static_cast<size_t>(l)].engram;
  const int64_t n = s.n, L = engram_->n_layers(), cols = engram_->n_cols(), hd = c.engram_head_dim;
  const int64_t D = c.hidden_size, hc = c.hc_mult;
  // Gather the hashed rows [n, cols * hd], project to hc keys + one value, gate into the streams.
  std::vector<float> rows(static_cast<size_t>(n * cols * hd));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < cols; ++k) {
      const int64_t row = hash_ids[(i * L + static_cast<int64_t>(j)) * cols + k];
      DI_CHECK(row >= 0 && row < e.table.rows, "engram hash id out of the table");
      // Float rows, or FP8 rows times their power-of-two scales (exact in float).
      kernels::dequant_row(e.table, row, &rows[static_cast<size_t>((i * cols + k) * hd)]);
    }
  std::vector<float> kv(static_cast<size_t>(n * (hc + 1) * D));
  linear(rows.data(), n, e.wkv, kv.data());
  be_.engram_gate({.x = X, .kv = kv.data(), .w = engram_qk_[j].data(), .rows = n, .hc = hc, .dim = D,
                   .eps = static_cast<float>(c.rms_norm_eps)});
}

void DeepseekV41::linear(const float* x, int64_t rows, const Mat& w, float* y) {
  be_.matmul({.x = x, .w = w, .y = y, .m = rows, .n = w.rows, .k = w.cols});
}

void DeepseekV41::rms(const float* x, const float* w, float* y, int64_t rows, int64_t dim) {
  be_.rms_norm({.x = x, .w = w, .y = y, .rows = rows, .dim = dim, .eps = static_cast<float>(cfg_.rms_norm_eps)});
}

void DeepseekV41::rope_rows(float* x, int64_t rows, int64_t heads, int64_t head_dim, const std::vector<float>& cos,
                            const std::vector<float>& sin, bool inverse) {
  be_.rope({.x = x, .cos = cos.data(), .sin = sin.data(), .rows = rows, .heads = heads, .head_dim = head_dim,
            .rope_dim = cfg_.qk_rope_head_dim, .inverse = inverse});
}

void DeepseekV41::publish_groups(float* x, int64_t n_groups, int64_t dim, int64_t g0, int64_t ratio, FakeQuant kind,
                                 int64_t block, PackedRows& dest) {
  std::vector<int64_t> gpos(static_cast<size_t>(n_groups));
  for (int64_t g = 0; g < n_groups; ++g) gpos[g] = g0 + ratio * g;
  std::vector<float> gc, gs;
  rope_compress_.compute(gpos.data(), n_groups, &gc, &gs);
  rope_rows(x, n_groups, 1, dim, gc, gs, false);
  be_.fake_quant({.x = x, .rows = n_groups, .dim = dim, .block = block, .kind = kind, .codes = dest.code_slot(n_groups),
                  .scales = dest.scale_slot(n_groups)});
  dest.append(x, n_groups);
}

void DeepseekV41::forward(const int64_t* tokens, int64_t n, SequenceState& st, float* logits, bool last_only) {
  SeqChunk chunk{.tokens = tokens, .n = n, .state = &st, .replay_from = 0, .all_logits = !last_only, .logits = logits};
  forward(std::span<SeqChunk>(&chunk, 1));
}

int64_t DeepseekV41::late_layer_start() const {
  if (cfg_.kv_source_layer_ids.empty()) return cfg_.num_hidden_layers;
  return *std::max_element(cfg_.kv_source_layer_ids.begin(), cfg_.kv_source_layer_ids.end()) + 1;
}

void DeepseekV41::forward(std::span<SeqChunk> batch) {
  const auto& c = cfg_;
  const int64_t D = c.hidden_size, hc = c.hc_mult, V = c.vocab_size;
  const int64_t late = late_layer_start();
  Scratch s;
  const size_t nseq = batch.size();
  s.row0.resize(nseq);
  s.rows.resize(nseq);
  s.states.resize(nseq);
  s.shared.resize(nseq);
  bool any_replay = false;
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
    s.row0[q] = s.n;
    s.rows[q] = ch.n;
    s.states[q] = ch.state;
    s.n += ch.n;
  }
  if (s.n == 0) return;
  const int64_t total = s.n;
  std::vector<const int64_t*> tok_rows(static_cast<size_t>(total));
  s.pos.resize(static_cast<size_t>(total));
  for (size_t q = 0; q < nseq; ++q)
    for (int64_t i = 0; i < batch[q].n; ++i) {
      s.pos[static_cast<size_t>(s.row0[q] + i)] = batch[q].state->length() + i;
      tok_rows[static_cast<size_t>(s.row0[q] + i)] = &batch[q].tokens[i];
    }
  rope_main_.compute(s.pos.data(), total, &s.cos_main, &s.sin_main);
  rope_compress_.compute(s.pos.data(), total, &s.cos_comp, &s.sin_comp);

  // Streams: the embedding copied into every hc stream. [rows, hc, D]
  std::vector<float> X(static_cast<size_t>(total * hc * D));
  for (int64_t i = 0; i < total; ++i) {
    float* x0 = &X[static_cast<size_t>(i * hc * D)];
    kernels::dequant_row(w_.embed, *tok_rows[static_cast<size_t>(i)], x0);
    for (int64_t k = 1; k < hc; ++k) std::memcpy(x0 + k * D, x0, static_cast<size_t>(D) * sizeof(float));
  }
  // Previous site's pre mix: one-hot on stream 0. [rows, hc]
  std::vector<float> pre(static_cast<size_t>(total * hc), 0.0f);
  for (int64_t i = 0; i < total; ++i) pre[static_cast<size_t>(i * hc)] = 1.0f;
  // Engram hash ids of every row, for all engram layers: [rows, n_engram_layers, cols].
  std::vector<int64_t> hash_ids;
  int64_t hash_w = 0;
  if (engram_) {
    hash_w = engram_->n_layers() * engram_->n_cols();
    hash_ids.resize(static_cast<size_t>(total * hash_w));
    for (size_t q = 0; q < nseq; ++q)
      engram_->hash(batch[q].tokens, s.pos.data() + s.row0[q], batch[q].n, batch[q].state->engram_history(),
                    hash_ids.data() + s.row0[q] * hash_w);
  }
  const float hc_eps = static_cast<float>(c.hc_eps), norm_eps = static_cast<float>(c.rms_norm_eps);
  std::vector<float> a_pre, a_post, a_comb, f_post, f_comb, xc, xn, y;

  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    if (l == late && any_replay) compact_to_tail(batch, s, X, pre, hash_ids, hash_w);
    const int64_t n = s.n;
    a_pre.resize(static_cast<size_t>(n * hc));
    a_post.resize(a_pre.size());
    f_post.resize(a_pre.size());
    a_comb.resize(static_cast<size_t>(n * hc * hc));
    f_comb.resize(a_comb.size());
    xc.resize(static_cast<size_t>(n * D));
    xn.resize(xc.size());
    y.resize(xc.size());
    if (n == 0) continue;
    const LayerWeights& L = w_.layers[static_cast<size_t>(l)];
    if (L.has_engram) engram(l, hash_ids.data(), s, X.data());
    be_.hc_mixes({.x = X.data(), .fn = L.hc_attn_fn.f32(), .scale = L.hc_attn_scale, .base = L.hc_attn_base,
                  .pre = a_pre.data(), .post = a_post.data(), .comb = a_comb.data(), .rows = n, .hc = hc, .dim = D,
                  .sinkhorn_iters = c.hc_sinkhorn_iters, .norm_eps = norm_eps, .hc_eps = hc_eps});
    be_.hc_collapse({.x = X.data(), .pre = pre.data(), .y = xc.data(), .rows = n, .hc = hc, .dim = D});
    rms(xc.data(), L.attn_norm, xn.data(), n, D);
    attention(l, xn.data(), s, y.data());
    be_.hc_expand({.x = X.data(), .y = y.data(), .post = a_post.data(), .comb = a_comb.data(), .rows = n, .hc = hc, .dim = D});

    // The FFN site: its own mixes for the streams after attention; the collapse uses the
    // attention site's pre (computed before attention).
    be_.hc_mixes({.x = X.data(), .fn = L.hc_ffn_fn.f32(), .scale = L.hc_ffn_scale, .base = L.hc_ffn_base,
                  .pre = pre.data(), .post = f_post.data(), .comb = f_comb.data(), .rows = n, .hc = hc, .dim = D,
                  .sinkhorn_iters = c.hc_sinkhorn_iters, .norm_eps = norm_eps, .hc_eps = hc_eps});
    be_.hc_collapse({.x = X.data(), .pre = a_pre.data(), .y = xc.data(), .rows = n, .hc = hc, .dim = D});
    rms(xc.data(), L.ffn_norm, xn.data(), n, D);
    moe(l, xn.data(), s, y.data());
    be_.hc_expand({.x = X.data(), .y = y.data(), .post = f_post.data(), .comb = f_comb.data(), .rows = n, .hc = hc, .dim = D});
    // `pre` now holds this layer's FFN-site pre: the next attention collapses with it.
  }
  for (size_t q = 0; q < nseq; ++q) batch[q].state->advance(batch[q].n);

  // Head: every row, or each sequence's last row (its last active row under replay).
  std::vector<int64_t> out_rows;
  std::vector<float*> out_ptrs;
  for (size_t q = 0; q < nseq; ++q) {
    if (!batch[q].logits || s.rows[q] == 0) continue;
    if (batch[q].all_logits) {
      for (int64_t i = 0; i < s.rows[q]; ++i) {
        out_rows.push_back(s.row0[q] + i);
        out_ptrs.push_back(batch[q].logits + i * V);
      }
    } else {
      out_rows.push_back(s.row0[q] + s.rows[q] - 1);
      out_ptrs.push_back(batch[q].logits);
    }
  }
  const int64_t m = static_cast<int64_t>(out_rows.size());
  if (m == 0) return;
  std::vector<float> Xo(static_cast<size_t>(m * hc * D)), pre_o(static_cast<size_t>(m * hc));
  for (int64_t i = 0; i < m; ++i) {
    std::memcpy(&Xo[static_cast<size_t>(i * hc * D)], &X[static_cast<size_t>(out_rows[i] * hc * D)],
                static_cast<size_t>(hc * D) * sizeof(float));
    std::memcpy(&pre_o[static_cast<size_t>(i * hc)], &pre[static_cast<size_t>(out_rows[i] * hc)],
                static_cast<size_t>(hc) * sizeof(float));
  }
  xc.resize(static_cast<size_t>(m * D));
  xn.resize(xc.size());
  be_.hc_collapse({.x = Xo.data(), .pre = pre_o.data(), .y = xc.data(), .rows = m, .hc = hc, .dim = D});
  rms(xc.data(), w_.norm, xn.data(), m, D);
  std::vector<float> lg(static_cast<size_t>(m * V));
  linear(xn.data(), m, w_.head, lg.data());
  for (int64_t i = 0; i < m; ++i)
    std::memcpy(out_ptrs[static_cast<size_t>(i)], &lg[static_cast<size_t>(i * V)], static_cast<size_t>(V) * sizeof(float));
}

void DeepseekV41::compact_to_tail(std::span<SeqChunk> batch, Scratch& s, std::vector<float>& X, std::vector<float>& pre,
                                  std::vector<int64_t>& hash_ids, int64_t hash_w) {
  // Keep, per sequence, only the rows at or after replay_from: the decoder layers run on the
  // tail. Per-row published tensors (top-k, candidates) are compacted with them.
  const int64_t D = cfg_.hidden_size, hc = cfg_.hc_mult, half = cfg_.qk_rope_head_dim / 2;
  int64_t dst = 0;
  auto move_rows = [&](auto& v, int64_t width, int64_t from, int64_t to, int64_t count) {
    if (from != to && count > 0)
      std::memmove(&v[static_cast<size_t>(to * width)], &v[static_cast<size_t>(from * width)],
                   static_cast<size_t>(count * width) * sizeof(v[0]));
  };
  for (size_t q = 0; q < batch.size(); ++q) {
    const int64_t skip = batch[q].replay_from, keep = s.rows[q] - skip, from = s.row0[q] + skip;
    move_rows(X, hc * D, from, dst, keep);
    move_rows(pre, hc, from, dst, keep);
    move_rows(s.pos, 1, from, dst, keep);
    move_rows(s.cos_main, half, from, dst, keep);
    move_rows(s.sin_main, half, from, dst, keep);
    move_rows(s.cos_comp, half, from, dst, keep);
    move_rows(s.sin_comp, half, from, dst, keep);
    if (hash_w) move_rows(hash_ids, hash_w, from, dst, keep);
    Shared& sh = s.shared[q];
    if (sh.has_topk) {
      move_rows(sh.topk, sh.topk_t, skip, 0, keep);
      sh.topk.resize(static_cast<size_t>(keep * sh.topk_t));
    }
    if (sh.has_candidates) {
      move_rows(sh.candidates, sh.cand_t, skip, 0, keep);
      sh.candidates.resize(static_cast<size_t>(keep * sh.cand_t));
    }
    s.row0[q] = dst;
    s.rows[q] = keep;
    dst += keep;
  }
  s.n = dst;
}

void DeepseekV41::attention(int64_t l, const float* xn, Scratch& s, float* y) {
  const auto& c = cfg_;
  const AttentionWeights& A = w_.layers[static_cast<size_t>(l)].attn;
  const int64_t n = s.n, D = c.hidden_size, H = c.num_attention_heads, hd = c.head_dim;
  const int64_t ratio = c.ratio(l);
  const auto& cs = ratio > 0 ? s.cos_comp : s.cos_main;
  const auto& sn = ratio > 0 ? s.sin_comp : s.sin_main;

  // Batched over every row: queries through the low-rank path (qr also feeds the indexer),
  // and the window K=V (norm, RoPE, FP8 fake quantisation).
  std::vector<float> qr(static_cast<size_t>(n * c.q_lora_rank));
  linear(xn, n, A.wq_a, qr.data());
  rms(qr.data(), A.q_norm, qr.data(), n, c.q_lora_rank);
  std::vector<float> q(static_cast<size_t>(n * H * hd));
  linear(qr.data(), n, A.wq_b, q.data());
  rope_rows(q.data(), n, H, hd, cs, sn, false);
  std::vector<float> kv(static_cast<size_t>(n * hd));
  linear(xn, n, A.wkv, kv.data());
  rms(kv.data(), A.kv_norm, kv.data(), n, hd);
  rope_rows(kv.data(), n, 1, hd, cs, sn, false);
  // The FP8 codes and scales are what the window rings store.
  const bool packed = hd % 32 == 0;
  std::vector<uint8_t> kv_codes(packed ? static_cast<size_t>(n * hd) : 0), kv_scales(packed ? static_cast<size_t>(n * hd / 32) : 0);
  be_.fake_quant({.x = kv.data(), .rows = n, .dim = hd, .block = 32, .kind = FakeQuant::kFp8Pow2,
                  .codes = packed ? kv_codes.data() : nullptr, .scales = packed ? kv_scales.data() : nullptr});

  // Compressor projections of every row (KV sources), sliced per sequence below.
  std::vector<float> ckv, cgate;
  if (c.is_kv_source(l)) {
    ckv.resize(static_cast<size_t>(n * hd));
    linear(xn, n, A.c_wkv, ckv.data());
    if (ratio > 1) {
      cgate.resize(ckv.size());
      linear(xn, n, A.c_wgate, cgate.data());
    }
  }
  // Indexer queries and head weights of every row (index sources).
  std::vector<float> iq, iw;
  if (c.is_index_source(l)) {
    const int64_t nh = c.index_n_heads, di = c.index_head_dim;
    iq.resize(static_cast<size_t>(n * nh * di));
    linear(qr.data(), n, A.i_wq_b, iq.data());
    rope_rows(iq.data(), n, nh, di, s.cos_comp, s.sin_comp, false);
    be_.fake_quant({.x = iq.data(), .rows = n * nh, .dim = di, .block = 32, .kind = FakeQuant::kFp4Pow2});
    iw.resize(static_cast<size_t>(n * nh));
    linear(xn, n, A.i_weights_proj, iw.data());
    const float head_scale = 1.0f / std::sqrt(static_cast<float>(nh));
    for (float& v : iw) v *= head_scale;
  }

  std::vector<float> o(static_cast<size_t>(n * H * hd));
  for (size_t qi = 0; qi < s.states.size(); ++qi) {
    const int64_t r0 = s.row0[qi], m = s.rows[qi];
    if (m == 0) continue;
    SequenceState& st = *s.states[qi];
    Shared& sh = s.shared[qi];
    const int64_t* pos = s.pos.data() + r0;

    // Window: the cached entries then this chunk's.
    WindowRing& ring = st.window(l);
    const int64_t n_cached = static_cast<int64_t>(ring.pos.size());
    std::vector<float> win(static_cast<size_t>((n_cached + m) * hd));
    std::vector<int64_t> win_pos(static_cast<size_t>(n_cached + m));
    ring.kv.read(0, n_cached, win.data());
    std::copy(ring.pos.begin(), ring.pos.end(), win_pos.begin());
    std::memcpy(win.data() + n_cached * hd, kv.data() + r0 * hd, static_cast<size_t>(m * hd) * sizeof(float));
    std::copy(pos, pos + m, win_pos.begin() + n_cached);

    const float* comp = nullptr;
    const uint8_t* comp_sel = nullptr;
    int64_t t_comp = 0;
    if (ratio > 0) {
      SourceState& src = st.source(c.kv_source_of(l));
      std::vector<float> latent;
      int64_t n_groups = 0, g0 = 0;
      if (c.is_kv_source(l))
        compressor(l, ckv.data() + r0 * hd, cgate.empty() ? nullptr : cgate.data() + r0 * hd, m, src, &latent, &n_groups, &g0);
      if (c.is_index_source(l))
        indexer(l, iq.data() + r0 * c.index_n_heads * c.index_head_dim, iw.data() + r0 * c.index_n_heads, pos, m, latent,
                n_groups, g0, src, sh);
      if (n_groups > 0) {
        // Rotate each new entry at its group's first-token position, FP4-quantise, append.
        publish_groups(latent.data(), n_groups, hd, g0, ratio, FakeQuant::kFp4E4m3, 16, src.comp);
        src.n_comp += n_groups;
      }
      if (c.is_kv_source(l)) {
        // The group reads the whole running cache as float for this forward.
        sh.comp_f32.resize(static_cast<size_t>(src.n_comp * hd));
        src.comp.read(0, src.n_comp, sh.comp_f32.data());
        sh.comp = sh.comp_f32.data();
        sh.t_comp = src.n_comp;
      }
      if (sh.t_comp > 0) {
        comp = sh.comp;
        t_comp = sh.t_comp;
        if (sh.has_topk) {
          DI_CHECK(sh.topk_t == t_comp, "top-k width does not match the compressed KV of layer " + std::to_string(l));
          comp_sel = sh.topk.data();
        }
      }
    }
    be_.attention({.q = q.data() + r0 * H * hd, .q_pos = pos, .win = win.data(), .win_pos = win_pos.data(), .comp = comp,
                   .comp_sel = comp_sel, .sink = A.attn_sink, .out = o.data() + r0 * H * hd, .s = m, .heads = H,
                   .head_dim = hd, .t_win = n_cached + m, .t_comp = t_comp, .window = c.sliding_window,
                   .scale = 1.0f / std::sqrt(static_cast<float>(hd))});
    // Keep the last window-1 entries.
    const int64_t keep = std::min<int64_t>(c.sliding_window - 1, n_cached + m);
    const int64_t drop = n_cached + m - keep;
    if (ring.kv.packed()) {
      std::memcpy(ring.kv.code_slot(m), kv_codes.data() + r0 * hd, static_cast<size_t>(m * hd));
      std::memcpy(ring.kv.scale_slot(m), kv_scales.data() + r0 * hd / 32, static_cast<size_t>(m * hd / 32));
    }
    ring.kv.append(kv.data() + r0 * hd, m);
    ring.kv.drop_front(drop);
    ring.pos.assign(win_pos.begin() + drop, win_pos.end());
  }

  // Remove the query's rotation from the output, then the grouped low-rank projection.
  rope_rows(o.data(), n, H, hd, cs, sn, true);
  const int64_t G = c.o_groups, gw = H * hd / G, olr = c.o_lora_rank;
  std::vector<float> z(static_cast<size_t>(n * G * olr));
  for (int64_t g = 0; g < G; ++g)
    be_.matmul({.x = o.data() + g * gw, .w = A.wo_a, .y = z.data() + g * olr, .m = n, .n = olr, .k = gw,
                .ldx = H * hd, .ldy = G * olr, .w_row0 = g * olr});
  be_.matmul({.x = z.data(), .w = A.wo_b, .y = y, .m = n, .n = D, .k = G * olr});
}

void DeepseekV41::compressor(int64_t l, const float* kv, const float* gate, int64_t n, SourceState& src,
                             std::vector<float>* latent, int64_t* n_groups, int64_t* g0) {
  const auto& c = cfg_;
  const AttentionWeights& A = w_.layers[static_cast<size_t>(l)].attn;
  const int64_t hd = c.head_dim, r = c.ratio(l);
  if (r == 1) {
    latent->assign(kv, kv + n * hd);
    rms(latent->data(), A.c_norm, latent->data(), n, hd);
    *n_groups = n;
    *g0 = src.n_comp;
    return;
  }
  // Append this chunk's projections to the open group's buffer; pool complete groups.
  src.buf_kv.insert(src.buf_kv.end(), kv, kv + n * hd);
  src.buf_gate.insert(src.buf_gate.end(), gate, gate + n * hd);
  const int64_t total = src.buf_rows + n;
  src.buf_rows = total;
  *g0 = src.n_comp * r;
  const int64_t groups = total / r;
  *n_groups = groups;
  if (groups == 0) return;
  latent->resize(static_cast<size_t>(groups * hd));
  be_.compress_pool({.kv = src.buf_kv.data(), .gate = src.buf_gate.data(), .out = latent->data(), .groups = groups,
                     .ratio = r, .dim = hd});
  rms(latent->data(), A.c_norm, latent->data(), groups, hd);
  const int64_t used = groups * r * hd;
  src.buf_kv.erase(src.buf_kv.begin(), src.buf_kv.begin() + used);
  src.buf_gate.erase(src.buf_gate.begin(), src.buf_gate.begin() + used);
  src.buf_rows = total - groups * r;
}

void DeepseekV41::indexer(int64_t l, const float* q, const float* w, const int64_t* pos, int64_t n,
                          const std::vector<float>& latent, int64_t n_groups, int64_t g0, SourceState& src, Shared& sh) {
  const auto& c = cfg_;
  const AttentionWeights& A = w_.layers[static_cast<size_t>(l)].attn;
  const int64_t nh = c.index_n_heads, di = c.index_head_dim, r = c.ratio(l);
  if (c.is_kv_source(l)) {
    if (n_groups > 0) {
      // Keys from the pre-RoPE, pre-FP4 latent.
      std::vector<float> k(static_cast<size_t>(n_groups * di));
      linear(latent.data(), n_groups, A.i_wk, k.data());
      rms(k.data(), A.i_k_norm, k.data(), n_groups, di);
      publish_groups(k.data(), n_groups, di, g0, r, FakeQuant::kFp4Pow2, 32, src.index_k);
      src.n_index += n_groups;
    }
    sh.index_k_f32.resize(static_cast<size_t>(src.n_index * di));
    src.index_k.read(0, src.n_index, sh.index_k_f32.data());
    sh.index_k = sh.index_k_f32.data();
    sh.t_index = src.n_index;
  }
  const int64_t T = sh.t_index;
  if (T == 0) return;
  std::vector<float> scores(static_cast<size_t>(n * T));
  be_.indexer_scores({.q = q, .k = sh.index_k, .w = w, .q_pos = pos, .scores = scores.data(), .s = n, .heads = nh,
                      .dim = di, .t = T, .ratio = r, .score_scale = 1.0f / std::sqrt(static_cast<float>(di))});
  const uint8_t* restrict_to = nullptr;
  if (l == c.candidate_source_layer_id) {
    sh.candidates.assign(static_cast<size_t>(n * T), 0);
    be_.candidate_blocks({.scores = scores.data(), .q_pos = pos, .keep = sh.candidates.data(), .s = n, .t = T,
                          .ratio = r, .block_size = c.candidate_block_size, .topk_blocks = c.candidate_topk_blocks});
    sh.has_candidates = true;
    sh.cand_t = T;
  } else if (c.candidate_source_layer_id >= 0 && c.candidate_source_layer_id < l && sh.has_candidates) {
    DI_CHECK(sh.cand_t == T, "candidate mask width does not match the indexer keys of layer " + std::to_string(l));
    restrict_to = sh.candidates.data();
  }
  sh.topk.assign(static_cast<size_t>(n * T), 0);
  be_.topk_mask({.scores = scores.data(), .restrict_to = restrict_to, .selected = sh.topk.data(), .s = n, .t = T,
                 .k = std::min(c.index_topk, T)});
  sh.has_topk = true;
  sh.topk_t = T;
}

void DeepseekV41::moe(int64_t l, const float* xn, Scratch& s, float* y) {
  const auto& c = cfg_;
  const MoeWeights& F = w_.layers[static_cast<size_t>(l)].ffn;
  const int64_t n = s.n, D = c.hidden_size, E = c.n_routed_experts, K = c.num_experts_per_tok, I = c.moe_intermediate_size;
  std::vector<float> logits(static_cast<size_t>(n * E));
  linear(xn, n, F.gate, logits.data());
  std::vector<int32_t> ids(static_cast<size_t>(n * K));
  std::vector<float> wts(static_cast<size_t>(n * K));
  kernels::ScoringFunc fn = c.scoring_func == "softmax"   ? kernels::ScoringFunc::kSoftmax
                            : c.scoring_func == "sigmoid" ? kernels::ScoringFunc::kSigmoid
                                                          : kernels::ScoringFunc::kSqrtSoftplus;
  be_.router({.logits = logits.data(), .bias = F.bias, .ids = ids.data(), .weights = wts.data(), .rows = n, .experts = E,
              .top_k = K, .temp = static_cast<float>(c.gate_temp), .routed_scaling = static_cast<float>(c.routed_scaling_factor),
              .normalize = c.norm_topk_prob, .func = fn});
  // Group (token, slot) pairs by expert; each expert runs once over its rows.
  std::vector<std::vector<int64_t>> rows_of(static_cast<size_t>(E));
  for (int64_t i = 0; i < n * K; ++i) rows_of[static_cast<size_t>(ids[i])].push_back(i);
  std::vector<float> slot_out(static_cast<size_t>(n * K * D));
  std::vector<float> xg, g, u, a, o;
  const float limit = static_cast<float>(c.swiglu_limit);
  for (int64_t e = 0; e < E; ++e) {
    const auto& rs = rows_of[static_cast<size_t>(e)];
    if (rs.empty()) continue;
    const int64_t m = static_cast<int64_t>(rs.size());
    xg.resize(static_cast<size_t>(m * D));
    std::vector<float> rw(static_cast<size_t>(m));
    for (int64_t i = 0; i < m; ++i) {
      std::memcpy(&xg[i * D], xn + (rs[i] / K) * D, static_cast<size_t>(D) * sizeof(float));
      rw[i] = wts[rs[i]];
    }
    g.resize(static_cast<size_t>(m * I));
    u.resize(g.size());
    a.resize(g.size());
    o.resize(static_cast<size_t>(m * D));
    linear(xg.data(), m, F.w1[e], g.data());
    linear(xg.data(), m, F.w3[e], u.data());
    be_.swiglu({.gate = g.data(), .up = u.data(), .weight = rw.data(), .out = a.data(), .rows = m, .inter = I, .limit = limit});
    linear(a.data(), m, F.w2[e], o.data());
    for (int64_t i = 0; i < m; ++i) std::memcpy(&slot_out[rs[i] * D], &o[i * D], static_cast<size_t>(D) * sizeof(float));
  }
  // Shared expert over every row.
  std::vector<float> sg(static_cast<size_t>(n * I)), su(sg.size()), sa(sg.size()), so(static_cast<size_t>(n * D));
  linear(xn, n, F.s_w1, sg.data());
  linear(xn, n, F.s_w3, su.data());
  be_.swiglu({.gate = sg.data(), .up = su.data(), .weight = nullptr, .out = sa.data(), .rows = n, .inter = I, .limit = limit});
  linear(sa.data(), n, F.s_w2, so.data());
  // Per token: routed outputs in ascending expert order (as the reference accumulates),
  // then the shared expert.
  std::vector<int64_t> order(static_cast<size_t>(K));
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t k = 0; k < K; ++k) order[k] = k;
    std::sort(order.begin(), order.end(), [&](int64_t x1, int64_t x2) { return ids[t * K + x1] < ids[t * K + x2]; });
    float* yt = y + t * D;
    std::fill(yt, yt + D, 0.0f);
    for (int64_t k : order) {
      const float* src = &slot_out[(t * K + k) * D];
      for (int64_t d = 0; d < D; ++d) yt[d] += src[d];
    }
    for (int64_t d = 0; d < D; ++d) yt[d] += so[t * D + d];
  }
}

}  // namespace deepinfer::model
