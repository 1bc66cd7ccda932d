// DSpark draft stages (spec section 3.11): the taps and the stages' context rings, filled by
// every forward of a model made with ModelOptions.dspark.
//
// The taps are the hc mean of the input of each dspark_target_layer_ids layer (after its
// Engram), for every row that runs the layer: under bounded replay the late layers run on the
// prompt's tail only, so a prompt's rings get the keys of its tail's rows (the last
// sliding_window positions, whose taps are approximate in the same way as the late layers'
// windows). main_x = RMS(taps · main_projᵀ; main_norm), and each stage's key of a row is
// FP8(RoPE_main(RMS(main_x · wkvᵀ; kv_norm))) at its position; a stage's ring keeps the last
// sliding_window of them.
//
// The draft (draft()): every request's block of B rows (the anchor, then the noise token) runs
// through the stages as through backbone blocks (block(L + s): window-only attention, the
// stage's own experts), each attending over its ring and the whole block, then the heads.
// The heads work position-major (row i * S + q is request q's position i), so that each of the
// B sequential Markov steps reads and writes S contiguous rows: its bias added to the logits
// (hc_expand with one stream and unit weights: an exact add), the next tokens drawn by
// sample_rows and read back (the next step gathers their Markov embeddings).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/deepseek_v41.h"

namespace deepinfer::model {

using kernels::FakeQuant;

void DeepseekV41::tap_layout(ForwardBatch& b, kernels::Uploads& up) {
  const int64_t np = b.n_pad, hc = cfg_.hc_mult, D = cfg_.hidden_size, hd = cfg_.head_dim;
  const int64_t taps = static_cast<int64_t>(cfg_.dspark_target_layer_ids.size()), stages = cfg_.num_nextn_predict_layers;
  b.taps.resize(taps * np * D);
  b.dkv.resize(stages * np * hd);
  const bool packed = hd % 32 == 0;
  b.dkv_codes.resize(packed ? stages * np * hd : 0);
  b.dkv_scales.resize(packed ? stages * np * hd / 32 : 0);
  // The mean over the streams as a collapse with weights 1/hc (a power of two at hc = 4, so
  // exactly the sum times 1/hc).
  up.add(b.tap_pre, std::vector<float>(static_cast<size_t>(np * hc), 1.0f / static_cast<float>(hc)));
  std::vector<int32_t> concat(static_cast<size_t>(np * taps));
  for (int64_t r = 0; r < np; ++r)
    for (int64_t t = 0; t < taps; ++t) concat[static_cast<size_t>(r * taps + t)] = static_cast<int32_t>(t * np + r);
  up.add(b.tap_concat, concat);
}

void DeepseekV41::tap(int64_t l, ForwardBatch& b) {
  const auto& ids = cfg_.dspark_target_layer_ids;
  const auto it = std::find(ids.begin(), ids.end(), l);
  if (it == ids.end()) return;
  const int64_t t = it - ids.begin(), np = b.n_pad, D = cfg_.hidden_size;
  be_.hc_collapse({.x = b.X.data(), .pre = b.tap_pre.data(), .y = b.taps.data() + t * np * D, .rows = np,
                   .hc = cfg_.hc_mult, .dim = D});
}

void DeepseekV41::draft_keys(ForwardBatch& b) {
  const auto& c = cfg_;
  const DraftWeights& d = w_.draft;
  const int64_t np = b.n_pad, D = c.hidden_size, hd = c.head_dim, stages = c.num_nextn_predict_layers;
  const int64_t taps = static_cast<int64_t>(c.dspark_target_layer_ids.size());
  // The taps side by side ([np, taps * D], in layer order), main_x, then every stage's keys.
  kernels::Buf<float> cat(be_, np * taps * D), main_x(be_, np * D);
  be_.gather_rows({.src = b.taps.data(), .idx = b.tap_concat.data(), .dst = cat.data(), .rows = np * taps, .width = D});
  linear(cat.data(), np, d.main_proj, main_x.data());
  rms(main_x.data(), d.main_norm, main_x.data(), np, D);
  const bool packed = hd % 32 == 0;
  const float eps = static_cast<float>(c.rms_norm_eps);
  std::vector<kernels::NormRopeQuantArgs> finish;
  for (int64_t s0 = 0; s0 < stages; s0 += kernels::kMaxMatmulOuts) {
    std::vector<std::pair<const Mat*, float*>> outs;
    for (int64_t s = s0; s < std::min(stages, s0 + kernels::kMaxMatmulOuts); ++s)
      outs.emplace_back(&d.stages[static_cast<size_t>(s)].attn.wkv, b.dkv.data() + s * np * hd);
    linears(main_x.data(), np, outs);
  }
  for (int64_t s = 0; s < stages; ++s)
    finish.push_back({.x = b.dkv.data() + s * np * hd, .w = d.stages[static_cast<size_t>(s)].attn.kv_norm,
                      .cos = b.cos_main.data(), .sin = b.sin_main.data(),
                      .codes = packed ? b.dkv_codes.data() + s * np * hd : nullptr,
                      .scales = packed ? b.dkv_scales.data() + s * np * hd / 32 : nullptr, .rows = np, .dim = hd,
                      .rope_dim = c.qk_rope_head_dim, .block = 32, .eps = eps, .kind = FakeQuant::kFp8Pow2});
  be_.norm_rope_quant({.items = finish.data(), .n = static_cast<int64_t>(finish.size())});
}

void DeepseekV41::fill_draft_rings(ForwardBatch& b) {
  const auto& c = cfg_;
  const int64_t np = b.n_pad, hd = c.head_dim, W = c.sliding_window, stages = c.num_nextn_predict_layers;
  std::vector<kernels::CopyDesc> copies;
  struct Append {
    WindowRing* ring;
    const float* values;
    int64_t rows, first;  // rows appended, the batch row of the first
  };
  std::vector<Append> appends;
  for (size_t q = 0; q < b.states.size(); ++q) {
    const int64_t m = std::min(b.rows[q], W), first = b.row0[q] + b.rows[q] - m;
    if (m == 0) continue;
    for (int64_t s = 0; s < stages; ++s) {
      WindowRing& ring = b.states[q]->draft_ring(s);
      const int64_t at = s * np + first;
      if (ring.kv.packed()) {
        const int64_t blk = ring.kv.block();
        copies.push_back({ring.kv.code_slot(m), b.dkv_codes.data() + at * hd, m * hd});
        copies.push_back({ring.kv.scale_slot(m), b.dkv_scales.data() + at * hd / blk, m * hd / blk});
      }
      appends.push_back({&ring, b.dkv.data() + at * hd, m, first});
    }
  }
  kernels::copy_batch(be_, copies);
  for (const Append& a : appends) {
    a.ring->kv.append(a.values, a.rows);
    a.ring->pos.insert(a.ring->pos.end(), b.pos.begin() + a.first, b.pos.begin() + a.first + a.rows);
    const int64_t drop = std::max<int64_t>(0, static_cast<int64_t>(a.ring->pos.size()) - W);
    a.ring->kv.drop_front(drop);
    a.ring->pos.erase(a.ring->pos.begin(), a.ring->pos.begin() + drop);
  }
}

void DeepseekV41::draft_attention(int64_t l, ForwardBatch& b) {
  const auto& c = cfg_;
  const int64_t n = b.n, H = c.num_attention_heads, hd = c.head_dim, stage = l - c.num_hidden_layers;
  constexpr int64_t F = sizeof(float);
  const size_t nseq = b.states.size();
  // Each sequence's window: its ring's rows, then its block's (packed: the block's codes and
  // scales copied into the ring's slots past its live rows, read there but never appended).
  // Every query is given its block's last position and the window covers every position, so
  // it sees the whole ring and the whole block (its rotation uses its own angles).
  const bool packed = b.kv_codes.size() > 0;
  std::vector<int64_t> win_off(nseq), win_pos, q_vis(static_cast<size_t>(n));
  std::vector<int32_t> q_seq(static_cast<size_t>(n));
  int64_t total_win = 0, max_t_win = 0, window = 1;
  for (size_t q = 0; q < nseq; ++q) {
    win_off[q] = total_win;
    total_win += static_cast<int64_t>(b.states[q]->draft_ring(stage).pos.size()) + b.rows[q];
  }
  kernels::Buf<float> win(be_, packed ? 0 : total_win * hd);
  std::vector<std::pair<const PackedRows*, float*>> ring_reads;
  std::vector<kernels::CopyDesc> copies;
  std::vector<kernels::AttentionSeq> seqs;
  int64_t win_block = 0;
  for (size_t q = 0; q < nseq; ++q) {
    const int64_t r0 = b.row0[q], m = b.rows[q];
    WindowRing& ring = b.states[q]->draft_ring(stage);
    const int64_t nc = static_cast<int64_t>(ring.pos.size()), last = b.pos[static_cast<size_t>(r0 + m - 1)];
    DI_CHECK(ring.kv.packed() == packed, "draft ring of stage " + std::to_string(stage) + " stored unlike its rows");
    win_pos.insert(win_pos.end(), ring.pos.begin(), ring.pos.end());
    win_pos.insert(win_pos.end(), b.pos.begin() + r0, b.pos.begin() + r0 + m);
    for (int64_t i = 0; i < m; ++i) {
      q_vis[static_cast<size_t>(r0 + i)] = last;
      q_seq[static_cast<size_t>(r0 + i)] = static_cast<int32_t>(q);
    }
    window = std::max(window, last + 1);
    max_t_win = std::max(max_t_win, nc + m);
    if (packed) {
      win_block = ring.kv.block();
      copies.push_back({ring.kv.code_slot(m), b.kv_codes.data() + r0 * hd, m * hd});
      copies.push_back({ring.kv.scale_slot(m), b.kv_scales.data() + r0 * hd / win_block, m * hd / win_block});
    } else {
      ring_reads.push_back({&ring.kv, win.data() + win_off[q] * hd});
      copies.push_back({win.data() + (win_off[q] + nc) * hd, b.kv.data() + r0 * hd, m * hd * F});
    }
  }
  kernels::Staged st(be_);
  const StagedReads reads = stage_reads(ring_reads, st);
  const int64_t pos_at = st.add(win_pos), vis_at = st.add(q_vis), seqs_at = st.add<kernels::AttentionSeq>(nullptr, nseq),
                q_seq_at = st.add(q_seq);
  st.alloc();
  for (size_t q = 0; q < nseq; ++q) {
    const PackedRows& ring = b.states[q]->draft_ring(stage).kv;  // (its slots reserved above: it no longer moves)
    seqs.push_back({.win = packed ? nullptr : win.data() + win_off[q] * hd, .win_pos = st.at<int64_t>(pos_at) + win_off[q],
                    .t_win = static_cast<int64_t>(b.states[q]->draft_ring(stage).pos.size()) + b.rows[q], .q0 = b.row0[q],
                    .win_codes = packed ? ring.codes_at(0) : nullptr, .win_scales = packed ? ring.scales_at(0) : nullptr});
  }
  st.set(seqs_at, seqs);
  copies.insert(copies.end(), reads.copies.begin(), reads.copies.end());
  st.upload(copies);
  run_reads(reads, st);
  be_.attention({.q = b.q.data(), .q_pos = st.at<int64_t>(vis_at), .sink = block(l).attn.attn_sink, .out = b.o.data(), .s = n,
                 .heads = H, .head_dim = hd, .window = window, .scale = 1.0f / std::sqrt(static_cast<float>(hd)),
                 .seqs = st.at<kernels::AttentionSeq>(seqs_at), .q_seq = st.at<int32_t>(q_seq_at),
                 .n_seqs = static_cast<int64_t>(nseq), .win_block = packed ? win_block : 0, .max_t_win = max_t_win,
                 .total_entries = total_win, .q_cos = b.cos_main.data(), .q_sin = b.sin_main.data(),
                 .rope_dim = c.qk_rope_head_dim});
}

Drafts DeepseekV41::draft(const std::vector<DraftRequest>& reqs) {
  DI_CHECK(dspark_, "draft: the model was made without ModelOptions.dspark");
  const auto& c = cfg_;
  const DraftWeights& d = w_.draft;
  const int64_t B = c.dspark_block_size, S = static_cast<int64_t>(reqs.size()), n = S * B, L = c.num_hidden_layers;
  const int64_t V = c.vocab_size, D = c.hidden_size, hc = c.hc_mult, r = c.dspark_markov_rank;
  Drafts out;
  out.logits.bind(be_);
  if (S == 0) return out;
  for (size_t i = 0; i < reqs.size(); ++i) {
    // (Each block's keys are read from its ring's spare rows: one block per sequence.)
    DI_CHECK(reqs[i].state && std::none_of(reqs.begin(), reqs.begin() + static_cast<std::ptrdiff_t>(i),
                                           [&](const DraftRequest& o) { return o.state == reqs[i].state; }),
             "draft: a request without a state, or two for one sequence");
  }
  for (const DraftRequest& q : reqs)
    if (q.anchor < 0 || q.anchor >= V)
      throw Error("draft: anchor token " + std::to_string(q.anchor) + " is outside the vocabulary [0, " + std::to_string(V) + ")");
  // The blocks as a forward batch: [anchor, noise, ...] at positions length() ... of each state.
  ForwardBatch b(be_);
  b.n_pad = n;
  std::vector<int64_t> tok(static_cast<size_t>(n), c.dspark_noise_token_id);
  for (int64_t q = 0; q < S; ++q) tok[static_cast<size_t>(q * B)] = reqs[static_cast<size_t>(q)].anchor;
  for (int64_t q = 0; q < S; ++q) b.add_sequence(tok.data() + q * B, B, reqs[static_cast<size_t>(q)].state, 0);
  std::vector<float> one_hot(static_cast<size_t>(n * hc), 0.0f);
  for (int64_t i = 0; i < n; ++i) one_hot[static_cast<size_t>(i * hc)] = 1.0f;
  kernels::Uploads up(be_);
  b.set_positions(rope_main_, rope_compress_, up);
  up.add(b.d_tok, tok);
  up.add(b.pre, one_hot);
  up.send();
  b.X.resize(n * hc * D);
  be_.gather_weight_rows({.w = w_.embed, .ids = b.d_tok.data(), .out = b.X.data(), .rows = n, .copies = hc});
  for (int64_t s = 0; s < c.num_nextn_predict_layers; ++s) {
    size_layer(L + s, b);
    attention_in(L + s, b);
    draft_attention(L + s, b);
    attention_out_and_ffn(L + s, b);
  }

  // The heads, position-major: the last stage's rows collapsed with its last pre (x, before the
  // norm: the confidence head's input) and normalised, then the logits.
  std::vector<int32_t> pm(static_cast<size_t>(n)), sm(static_cast<size_t>(n));
  for (int64_t q = 0; q < S; ++q)
    for (int64_t i = 0; i < B; ++i) {
      pm[static_cast<size_t>(i * S + q)] = static_cast<int32_t>(q * B + i);
      sm[static_cast<size_t>(q * B + i)] = static_cast<int32_t>(i * S + q);
    }
  kernels::Buf<int32_t> d_pm(be_), d_sm(be_);
  kernels::Buf<float> ones(be_);
  kernels::Uploads up2(be_);
  up2.add(d_pm, pm);
  up2.add(d_sm, sm);
  up2.add(ones, std::vector<float>(static_cast<size_t>(n), 1.0f));
  std::vector<kernels::Buf<kernels::DrawParams>> params;
  for (int64_t i = 0; i < B; ++i) {
    if (std::none_of(reqs.begin(), reqs.end(), [](const DraftRequest& q) { return q.draw != nullptr; })) break;
    std::vector<kernels::DrawParams> p(static_cast<size_t>(S));  // greedy for the requests without
    for (int64_t q = 0; q < S; ++q)
      if (const kernels::DrawParams* dp = reqs[static_cast<size_t>(q)].draw) p[static_cast<size_t>(q)] = dp[i];
    params.emplace_back(be_);
    up2.add(params.back(), p);
  }
  up2.send();
  kernels::Buf<float> Xp(be_, n * hc * D), prep(be_, n * hc), x(be_, n * D), xn(be_, n * D), lg(be_, n * V);
  be_.gather_rows({.src = b.X.data(), .idx = d_pm.data(), .dst = Xp.data(), .rows = n, .width = hc * D});
  be_.gather_rows({.src = b.pre.data(), .idx = d_pm.data(), .dst = prep.data(), .rows = n, .width = hc});
  be_.hc_collapse({.x = Xp.data(), .pre = prep.data(), .y = x.data(), .rows = n, .hc = hc, .dim = D, .norm_w = d.norm,
                   .norm_y = xn.data(), .norm_eps = static_cast<float>(c.rms_norm_eps)});
  linear(xn.data(), n, w_.head, lg.data());
  // The Markov head, one position at a time: logits_i += markov_embed[tok_i] · markov_headᵀ,
  // then tok_{i+1} drawn from them (tok_0 = the anchor).
  out.ids.assign(static_cast<size_t>(S * (B + 1)), 0);
  std::vector<int64_t> prev(static_cast<size_t>(S));
  for (int64_t q = 0; q < S; ++q)
    out.ids[static_cast<size_t>(q * (B + 1))] = prev[static_cast<size_t>(q)] = reqs[static_cast<size_t>(q)].anchor;
  kernels::Buf<float> emb(be_, n * r), bias(be_, S * V);
  kernels::Buf<int64_t> d_prev(be_);
  kernels::Buf<int32_t> d_next(be_, S);
  std::vector<int32_t> next(static_cast<size_t>(S));
  for (int64_t i = 0; i < B; ++i) {
    d_prev.upload(prev);
    float* lgi = lg.data() + i * S * V;
    be_.gather_weight_rows({.w = d.markov_embed, .ids = d_prev.data(), .out = emb.data() + i * S * r, .rows = S});
    linear(emb.data() + i * S * r, S, d.markov_head, bias.data());
    be_.hc_expand({.x = lgi, .y = bias.data(), .post = ones.data(), .comb = ones.data(), .rows = S, .hc = 1, .dim = V});
    be_.sample_rows({.x = lgi, .params = params.empty() ? nullptr : params[static_cast<size_t>(i)].data(), .ids = d_next.data(),
                     .rows = S, .cols = V});
    be_.download(next.data(), d_next.data(), S * static_cast<int64_t>(sizeof(int32_t)));
    for (int64_t q = 0; q < S; ++q) {
      if (next[static_cast<size_t>(q)] == kernels::kNoToken)
        throw Error("draft: request " + std::to_string(q) + "'s logits at block position " + std::to_string(i) +
                    " hold a NaN or no finite value");
      out.ids[static_cast<size_t>(q * (B + 1) + i + 1)] = prev[static_cast<size_t>(q)] = next[static_cast<size_t>(q)];
    }
  }
  // Confidence in float32: proj · [x ; markov_embed[tok_i]] as its two halves' products, added.
  kernels::Buf<float> cx(be_, n), ce(be_, n);
  be_.matmul({.x = x.data(), .w = Mat::f32(d.confidence, 1, D), .y = cx.data(), .m = n, .n = 1, .k = D, .f32 = true});
  be_.matmul({.x = emb.data(), .w = Mat::f32(d.confidence + D, 1, r), .y = ce.data(), .m = n, .n = 1, .k = r, .f32 = true});
  be_.hc_expand({.x = cx.data(), .y = ce.data(), .post = ones.data(), .comb = ones.data(), .rows = n, .hc = 1, .dim = 1});
  const std::vector<float> conf = cx.download();
  out.confidence.resize(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) out.confidence[static_cast<size_t>(k)] = conf[static_cast<size_t>(sm[static_cast<size_t>(k)])];
  out.logits.resize(n * V);
  be_.gather_rows({.src = lg.data(), .idx = d_sm.data(), .dst = out.logits.data(), .rows = n, .width = V});
  return out;
}

}  // namespace deepinfer::model
