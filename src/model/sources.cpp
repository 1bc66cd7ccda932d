#include "model/deepseek_v41.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"

namespace deepinfer::model {

using kernels::FakeQuant;

void DeepseekV41::publish_sources(int64_t l, ForwardBatch& b) {
  const auto& c = cfg_;
  const AttentionWeights& A = w_.layers[static_cast<size_t>(l)].attn;
  const int64_t hd = c.head_dim, r = c.ratio(l);
  constexpr int64_t F = sizeof(float);
  const size_t nseq = b.states.size();
  // The compressor: this forward's rows of each sequence join its open group; every complete
  // group is pooled (ratio > 1) or is the row itself (ratio 1). latent: [G, hd], sequence by
  // sequence, groups[q] of them from row lat0[q], the first at group index first[q].
  std::vector<int64_t> groups(nseq, 0), lat0(nseq, 0), first(nseq, 0);
  int64_t G = 0;
  kernels::Buf<float> latent(be_);
  std::vector<kernels::CopyDesc> copies;
  for (size_t q = 0; q < nseq; ++q) {
    const int64_t m = b.rows[q];
    if (m == 0) continue;
    SourceState& src = b.states[q]->source(l);
    first[q] = src.n_comp;
    if (r == 1) {
      groups[q] = m;
    } else {
      const int64_t held = src.buf_spare + src.buf_rows;
      src.buf_kv.resize((held + m) * hd, true);
      src.buf_gate.resize((held + m) * hd, true);
      copies.push_back({src.buf_kv.data() + held * hd, b.ckv.data() + b.row0[q] * hd, m * hd * F});
      copies.push_back({src.buf_gate.data() + held * hd, b.cgate.data() + b.row0[q] * hd, m * hd * F});
      src.buf_rows += m;
      groups[q] = src.buf_rows / r;
    }
    lat0[q] = G;
    G += groups[q];
  }
  if (r == 1) {
    latent.resize(b.n * hd);  // every row, already in sequence order
    be_.copy(latent.data(), b.ckv.data(), b.n * hd * F);
  } else {
    kernels::copy_batch(be_, copies);
    // The complete groups' rows side by side, pooled at once. Each buffer then keeps its open
    // group's rows (fewer than r) and, for a rollback, the raw rows of up to rollback_rows + r - 1
    // tokens before it: the rows it keeps move to its front when they do not overlap where they
    // go, else stay (kept rows then stay below twice that).
    kernels::Buf<float> pool_kv(be_, G * r * hd), pool_gate(be_, G * r * hd);
    std::vector<kernels::CopyDesc> gather, rest;
    for (size_t q = 0; q < nseq; ++q) {
      if (groups[q] == 0) continue;
      SourceState& src = b.states[q]->source(l);
      const int64_t open0 = src.buf_spare * hd, used = groups[q] * r * hd, left = src.buf_rows - groups[q] * r;
      gather.push_back({pool_kv.data() + lat0[q] * r * hd, src.buf_kv.data() + open0, used * F});
      gather.push_back({pool_gate.data() + lat0[q] * r * hd, src.buf_gate.data() + open0, used * F});
      const int64_t held = src.buf_spare + src.buf_rows, rb = b.states[q]->rollback_rows();
      const int64_t want = std::min(held, std::max(left, rb > 0 ? rb + r - 1 : 0));
      int64_t keep = held;
      if (held - want >= want) {
        keep = want;
        if (keep > 0) {
          rest.push_back({src.buf_kv.data(), src.buf_kv.data() + (held - keep) * hd, keep * hd * F});
          rest.push_back({src.buf_gate.data(), src.buf_gate.data() + (held - keep) * hd, keep * hd * F});
        }
      }
      src.buf_rows = left;
      src.buf_spare = keep - left;
      src.buf_kv.resize(keep * hd, true);  // (shrinking keeps the memory the copies below use)
      src.buf_gate.resize(keep * hd, true);
    }
    kernels::copy_batch(be_, gather);
    kernels::copy_batch(be_, rest);
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
    if (b.rows[q] == 0) continue;
    SourceState& src = b.states[q]->source(l);
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
    if (b.rows[q] == 0) continue;
    SourceState& src = b.states[q]->source(l);
    Published& sh = b.published[q];
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
  kernels::copy_batch(be_, copies);
  off = 0;
  for (const auto& [d, k] : dest) {
    d->append(x + off * dim, k);
    off += k;
  }
}

void DeepseekV41::read_rows(const std::vector<std::pair<const PackedRows*, float*>>& reads) {
  kernels::Staged st(be_);
  const StagedReads r = stage_reads(reads, st);
  if (st.host.empty() && r.copies.empty()) return;
  st.alloc();
  st.upload(r.copies);
  run_reads(r, st);
}

DeepseekV41::StagedReads DeepseekV41::stage_reads(const std::vector<std::pair<const PackedRows*, float*>>& reads,
                                                  kernels::Staged& st) {
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

void DeepseekV41::run_reads(const StagedReads& r, const kernels::Staged& st) {
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
    if (j.pub->t_index > 0) {
      live.push_back(&j);
      total += j.n * j.pub->t_index;
    }
  if (live.empty()) return;
  kernels::Buf<float> scores(be_, total);
  std::vector<kernels::IndexerScoreArgs> score_ops;
  std::vector<kernels::CandidateBlocksArgs> cand_ops;
  std::vector<kernels::TopkMaskArgs> topk_ops;
  int64_t off = 0;
  for (const IndexJob* j : live) {
    Published& sh = *j->pub;
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

}  // namespace deepinfer::model
