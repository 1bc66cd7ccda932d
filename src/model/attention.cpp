#include "model/deepseek_v41.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"

namespace deepinfer::model {

using kernels::FakeQuant;

void DeepseekV41::attention(int64_t l, ForwardBatch& b) {
  const auto& c = cfg_;
  const AttentionWeights& A = w_.layers[static_cast<size_t>(l)].attn;
  const int64_t n = b.n, H = c.num_attention_heads, hd = c.head_dim;
  const int64_t ratio = c.ratio(l);
  const float* kv = b.kv.data();
  const uint8_t* kv_codes = b.kv_codes.data();
  const uint8_t* kv_scales = b.kv_scales.data();
  const kernels::Buf<float>& iq = b.iq;
  const kernels::Buf<float>& iw = b.iw;

  // Window entries of every sequence: cached ring rows, then this chunk's; the compressed
  // branch for every sequence; then one attention call covers every query, each seeing its own
  // sequence's entries; then every ring takes its new rows.
  constexpr int64_t F = sizeof(float);
  const size_t nseq = b.states.size();
  std::vector<int64_t> win_off(nseq, 0), n_cached(nseq, 0);
  int64_t total_win = 0;
  for (size_t qi = 0; qi < nseq; ++qi) {
    if (b.rows[qi] == 0) continue;
    n_cached[qi] = static_cast<int64_t>(b.states[qi]->window(l).pos.size());
    win_off[qi] = total_win;
    total_win += n_cached[qi] + b.rows[qi];
  }
  // Packed rings (FP8, every ring alike): the attention reads each ring as it is stored, its
  // cached rows then the chunk's, whose codes and scales are first copied into the ring's next
  // slots (past the cached rows). Float rings (head dims that do not divide into blocks): the
  // cached rows and the chunk's copied into one float window.
  const bool packed = b.kv_codes.size() > 0;
  kernels::Buf<float> win(be_, packed ? 0 : total_win * hd);
  std::vector<int64_t> win_pos(static_cast<size_t>(total_win));
  std::vector<std::pair<const PackedRows*, float*>> ring_reads;
  std::vector<kernels::CopyDesc> copies;
  int64_t win_block = 0;  // packed: the rings' scale block
  for (size_t qi = 0; qi < nseq; ++qi) {
    const int64_t r0 = b.row0[qi], m = b.rows[qi], off = win_off[qi], nc = n_cached[qi];
    if (m == 0) continue;
    WindowRing& ring = b.states[qi]->window(l);
    DI_CHECK(ring.kv.packed() == packed && (!packed || ring.kv.kind() == kernels::FakeQuant::kFp8Pow2),
             "window ring of layer " + std::to_string(l) + " stored unlike its layer's rows");
    if (packed) win_block = ring.kv.block();
    std::copy(ring.pos.begin(), ring.pos.end(), win_pos.begin() + off);
    std::copy(b.pos.begin() + r0, b.pos.begin() + r0 + m, win_pos.begin() + off + nc);
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
  for (size_t qi = 0; qi < nseq; ++qi) live += b.rows[qi] > 0;
  kernels::Staged st(be_);
  const StagedReads reads = stage_reads(ring_reads, st);
  const int64_t win_pos_at = st.add(win_pos), seqs_at = st.add<kernels::AttentionSeq>(nullptr, live),
                q_seq_at = st.add<int32_t>(nullptr, n);
  st.alloc();
  const int64_t* d_win_pos = st.at<int64_t>(win_pos_at);

  // KV sources: every sequence's new compressed groups (and indexer keys) at once.
  if (ratio > 0 && c.is_kv_source(l)) publish_sources(l, b);
  // Index sources: every sequence's top-k of its compressed entries.
  if (ratio > 0 && c.is_index_source(l)) {
    std::vector<IndexJob> jobs;
    for (size_t qi = 0; qi < nseq; ++qi) {
      const int64_t r0 = b.row0[qi], m = b.rows[qi];
      if (m == 0) continue;
      jobs.push_back({.q = iq.data() + r0 * c.index_n_heads * c.index_head_dim, .w = iw.data() + r0 * c.index_n_heads,
                      .pos = b.d_pos.data() + r0, .n = m, .pub = &b.published[qi]});
    }
    index_select(l, jobs);
  }
  std::vector<kernels::AttentionSeq> seqs;
  std::vector<int32_t> q_seq(static_cast<size_t>(n));
  int64_t max_t_win = 0, max_t_comp = 0, total_entries = 0;
  for (size_t qi = 0; qi < nseq; ++qi) {
    const int64_t r0 = b.row0[qi], m = b.rows[qi];
    if (m == 0) continue;
    Published& sh = b.published[qi];
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
    const PackedRows& ring = b.states[qi]->window(l).kv;  // (its slots reserved above: it no longer moves)
    seqs.push_back({.win = packed ? nullptr : win.data() + win_off[qi] * hd, .win_pos = d_win_pos + win_off[qi],
                    .comp = comp, .comp_sel = comp_sel, .t_win = t_win, .t_comp = t_comp, .q0 = r0,
                    .win_codes = packed ? ring.codes_at(0) : nullptr, .win_scales = packed ? ring.scales_at(0) : nullptr});
    max_t_win = std::max(max_t_win, t_win);
    max_t_comp = std::max(max_t_comp, t_comp);
    total_entries += t_win + (comp && comp_sel ? t_comp : 0);
  }
  {
    DI_CHECK(static_cast<int64_t>(seqs.size()) == live, "attention: sequences with rows miscounted");
    const auto [cs, sn] = rope_of(l, b);  // the queries' RoPE, applied by the call
    st.set(seqs_at, seqs);
    st.set(q_seq_at, q_seq);
    copies.insert(copies.end(), reads.copies.begin(), reads.copies.end());
    st.upload(copies);
    run_reads(reads, st);
    be_.attention({.q = b.q.data(), .q_pos = b.d_pos.data(), .sink = A.attn_sink, .out = b.o.data(), .s = n, .heads = H,
                   .head_dim = hd, .window = c.sliding_window, .scale = 1.0f / std::sqrt(static_cast<float>(hd)),
                   .seqs = st.at<kernels::AttentionSeq>(seqs_at), .q_seq = st.at<int32_t>(q_seq_at),
                   .n_seqs = static_cast<int64_t>(seqs.size()), .win_block = win_block,
                   .max_t_win = max_t_win, .max_t_comp = max_t_comp, .max_selected = c.index_topk,
                   .total_entries = total_entries, .q_cos = cs, .q_sin = sn, .rope_dim = c.qk_rope_head_dim});
  }
  // Every ring keeps its last window-1 entries (a packed ring's new codes and scales were copied
  // in above).
  for (size_t qi = 0; qi < nseq; ++qi) {
    const int64_t r0 = b.row0[qi], m = b.rows[qi];
    if (m == 0) continue;
    WindowRing& ring = b.states[qi]->window(l);
    const int64_t t_win = n_cached[qi] + m;
    const int64_t keep = std::min<int64_t>(c.sliding_window - 1, t_win), drop = t_win - keep;
    ring.kv.append(kv + r0 * hd, m);
    ring.kv.drop_front(drop);
    ring.pos.assign(win_pos.begin() + win_off[qi] + drop, win_pos.begin() + win_off[qi] + t_win);
  }
}

}  // namespace deepinfer::model
