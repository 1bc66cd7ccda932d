// CUDA tests at prefill shapes that are more than one op's CPU-vs-CUDA comparison (the plain
// ones, attention on the float32 backend, indexer scores, top-k and candidate blocks at up to
// 4096 queries, are the op case table's: cases/attention.cpp, indexer.cpp, select.cpp): the bf16
// backend's tensor-core attention (queries alone giving their rows' bits), and the
// multi-sequence forms (one attention call for several sequences, the indexer's batched ops,
// batched copies and ring reads, upload_batch). Built with DEEPINFER_CUDA=ON only.
#include <gtest/gtest.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "kernels/backend.h"
#include "kernels/cuda_test_util.h"
#include "model/quantize.h"

using namespace deepinfer;
using namespace deepinfer::kernels;
using namespace deepinfer::cuda_test;

namespace {

// One attention call on both backends. Queries at positions p0 .. p0+S-1 (query 0 moved before
// every entry when `blind_first`); window entries: `cached` before the chunk plus the chunk's
// own, in shuffled (ring) order, plus `stale` old ones nobody sees; `n_sel` random compressed
// entries of t_comp selected per query (none for the last query).
// bf16_gpu: the GPU side is that (bf16) backend, the inputs rounded to bf16 first unless
// round_inputs is false (its tensor-core kernel: P rounded to bf16 for the product, so within
// 4e-3 instead of 1e-5), and the last three queries run again alone must give their rows' bits.
void check_attention(Backends& b, int64_t S, int64_t H, int64_t hd, int64_t window, int64_t cached, int64_t stale,
                     int64_t t_comp, int64_t n_sel, bool blind_first, uint32_t seed, const std::string& what,
                     Backend* bf16_gpu = nullptr, int64_t max_selected = 0, bool round_inputs = true) {
  std::mt19937 g(seed);
  const int64_t p0 = 5000, tw = cached + S + stale;
  std::vector<int64_t> qpos(static_cast<size_t>(S)), wpos(static_cast<size_t>(tw));
  for (int64_t i = 0; i < S; ++i) qpos[static_cast<size_t>(i)] = p0 + i;
  if (blind_first) qpos[0] = p0 - cached - window - stale - 1000;
  for (int64_t i = 0; i < cached + S; ++i) wpos[static_cast<size_t>(i)] = p0 - cached + i;
  for (int64_t i = 0; i < stale; ++i) wpos[static_cast<size_t>(cached + S + i)] = p0 - cached - window - 1 - i;
  std::shuffle(wpos.begin(), wpos.end(), g);
  auto q = randn(static_cast<size_t>(S * H * hd), seed + 1, 1.5f), win = randn(static_cast<size_t>(tw * hd), seed + 2),
       comp = randn(static_cast<size_t>(std::max<int64_t>(t_comp, 1) * hd), seed + 3), sink = randn(static_cast<size_t>(H), seed + 4);
  std::vector<uint8_t> sel(static_cast<size_t>(S * std::max<int64_t>(t_comp, 1)), 0);
  std::vector<int64_t> perm(static_cast<size_t>(t_comp));
  std::iota(perm.begin(), perm.end(), 0);
  for (int64_t s = 0; s < S; ++s) {
    if ((blind_first && s == 0) || (S > 1 && s == S - 1)) continue;
    std::shuffle(perm.begin(), perm.end(), g);
    for (int64_t j = 0; j < std::min(n_sel, t_comp); ++j) sel[static_cast<size_t>(s * t_comp + perm[static_cast<size_t>(j)])] = 1;
  }
  if (bf16_gpu && round_inputs)
    for (auto* v : {&q, &win, &comp})
      for (float& x : *v) x = core::bf16_to_f32(core::f32_to_bf16(x));
  Backend& gpu = bf16_gpu ? *bf16_gpu : *b.gpu;
  const bool with_comp = t_comp > 0;
  const float sc = 1.0f / std::sqrt(static_cast<float>(hd));
  std::vector<float> out(q.size());
  b.cpu->attention({.q = q.data(), .q_pos = qpos.data(), .win = win.data(), .win_pos = wpos.data(), .comp = with_comp ? comp.data() : nullptr,
                    .comp_sel = with_comp ? sel.data() : nullptr, .sink = sink.data(), .out = out.data(), .s = S, .heads = H,
                    .head_dim = hd, .t_win = tw, .t_comp = t_comp, .window = window, .scale = sc});
  Dev<float> dq(q), dwin(win), dcomp(comp), dsink(sink), dout(std::vector<float>(out.size(), NAN));
  Dev<int64_t> dqpos(qpos), dwpos(wpos);
  Dev<uint8_t> dsel(sel);
  gpu.attention({.q = dq.p, .q_pos = dqpos.p, .win = dwin.p, .win_pos = dwpos.p, .comp = with_comp ? dcomp.p : nullptr,
                 .comp_sel = with_comp ? dsel.p : nullptr, .sink = dsink.p, .out = dout.p, .s = S, .heads = H, .head_dim = hd,
                 .t_win = tw, .t_comp = t_comp, .window = window, .scale = sc, .max_selected = max_selected});
  gpu.synchronize();
  const auto got = dout.get();
  const double e = rel_err(out, got);
  // bf16: P rounded for its product (2^-9 relative per weight); unrounded inputs add Q's and
  // the entries' rounding, three such terms.
  EXPECT_LT(e, bf16_gpu ? (round_inputs ? 4e-3 : 1e-2) : 1e-5) << what;
  std::printf("attention %-44s rel err %.2e\n", (what + (bf16_gpu ? " bf16" : "")).c_str(), e);
  // The last three queries, and the one before them, alone (fewer CTAs: 16 heads each, the
  // output channels split over 4 at the released shape): the bits of their rows in the batch.
  for (const int64_t n_alone : {int64_t{3}, int64_t{1}}) {
    if (!bf16_gpu || S <= 3) break;
    const int64_t r0 = S - 3 - (n_alone == 1 ? 1 : 0), tc = std::max<int64_t>(t_comp, 1);
    Dev<float> dalone(static_cast<size_t>(n_alone * H * hd));
    gpu.attention({.q = dq.p + r0 * H * hd, .q_pos = dqpos.p + r0, .win = dwin.p, .win_pos = dwpos.p,
                   .comp = with_comp ? dcomp.p : nullptr, .comp_sel = with_comp ? dsel.p + r0 * tc : nullptr,
                   .sink = dsink.p, .out = dalone.p, .s = n_alone, .heads = H, .head_dim = hd, .t_win = tw, .t_comp = t_comp,
                   .window = window, .scale = sc, .max_selected = max_selected});
    gpu.synchronize();
    const auto alone = dalone.get();
    EXPECT_EQ(0, std::memcmp(alone.data(), got.data() + r0 * H * hd, alone.size() * sizeof(float)))
        << what << ": " << n_alone << " queries from " << r0 << " alone differ from their rows in the batch";
  }
  if (blind_first) {  // the query that sees nothing: only the sink, a zero output
    for (int64_t i = 0; i < H * hd; ++i) ASSERT_EQ(got[static_cast<size_t>(i)], 0.0f) << what;
  }
}

TEST(CudaPrefill, AttentionOnTheTensorCores) {
  // The bf16 backend's mma kernel at the released shape and the others it covers (head_dim 64,
  // 128, 256, 512; any head count: 64 per CTA, the rest padded).
  Backends b;
  auto bf16 = make_cuda_backend(0, Precision::kBF16);
  check_attention(b, 96, 64, 512, 128, 127, 50, 2048, 512, false, 100, "S=96 64x512 (17 segments)", bf16.get());
  check_attention(b, 300, 64, 512, 128, 127, 50, 2048, 512, false, 108, "S=300 64x512 (folded)", bf16.get());
  // Folded with a query that sees nothing (its first segment empty: the sink alone, zero).
  check_attention(b, 140, 64, 512, 128, 127, 50, 2048, 512, true, 112, "S=140 64x512 blind first (folded)", bf16.get(), 512);
  check_attention(b, 8, 64, 512, 128, 127, 50, 2048, 512, true, 101, "S=8 64x512 (split over the entries)", bf16.get());
  check_attention(b, 1, 64, 512, 128, 127, 0, 2048, 512, false, 102, "S=1 64x512 (split)", bf16.get());
  check_attention(b, 200, 64, 512, 128, 127, 9, 0, 0, false, 103, "S=200 64x512 window only", bf16.get());
  check_attention(b, 8, 64, 512, 128, 40, 3, 700, 700, true, 104, "S=8 64x512 short cache, all selected", bf16.get());
  check_attention(b, 280, 8, 512, 4096, 4000, 0, 300, 120, false, 106, "S=280 8x512 window 4096 (35 segments)",
                  bf16.get());
  check_attention(b, 140, 40, 128, 16, 20, 5, 200, 30, false, 109, "S=140 40x128", bf16.get());
  check_attention(b, 140, 130, 64, 16, 20, 5, 200, 30, false, 110, "S=140 130x64 (three head blocks)", bf16.get());
  check_attention(b, 3, 33, 256, 16, 20, 5, 200, 30, true, 111, "S=3 33x256", bf16.get());
  check_attention(b, 96, 64, 512, 128, 127, 50, 2048, 512, false, 100, "S=96 64x512 max_selected 512 (folded)", bf16.get(), 512);
  check_attention(b, 96, 64, 512, 128, 127, 50, 2048, 512, false, 100, "S=96 64x512 max_selected 8 (wrong)", bf16.get(), 8);
  check_attention(b, 96, 64, 512, 128, 127, 50, 2048, 512, false, 100, "S=96 64x512 float32 inputs", bf16.get(), 512, false);
}

}  // namespace

// Several sequences in one attention call (AttentionArgs.seqs) on `gpu`: the CPU reference
// within tol, and each query's output bitwise equal to its sequence attended alone on the GPU
// (batch invariance). total: pass AttentionArgs.total_entries (else the backend's bound).
struct SeqShape {
  int64_t m, t_win, t_comp;  // queries, window rows, compressed rows
};
void check_multi_sequence_attention(Backends& b, Backend& gpu, double tol, bool total,
                                    const std::vector<SeqShape>& shape = {{1, 128, 2048}, {5, 40, 0}, {1, 10, 300}, {3, 130, 64}}) {
  const int64_t H = 64, hd = 512, window = 128;
  using Seq = SeqShape;
  int64_t s = 0;
  for (const Seq& q : shape) s += q.m;
  const std::vector<float> q = randn(static_cast<size_t>(s * H * hd), 11), sink = randn(static_cast<size_t>(H), 12);
  std::vector<int64_t> qpos;
  std::vector<std::vector<float>> win, comp;
  std::vector<std::vector<int64_t>> wpos;
  std::vector<std::vector<uint8_t>> sel;
  std::mt19937 g(5);
  for (size_t i = 0; i < shape.size(); ++i) {
    const Seq& sq = shape[i];
    const int64_t p0 = 3000 + 17 * static_cast<int64_t>(i);  // first query position
    for (int64_t r = 0; r < sq.m; ++r) qpos.push_back(p0 + r);
    win.push_back(randn(static_cast<size_t>(sq.t_win * hd), 20 + static_cast<uint32_t>(i)));
    wpos.emplace_back();
    for (int64_t j = 0; j < sq.t_win; ++j) wpos.back().push_back(p0 + sq.m - sq.t_win + j);
    comp.push_back(randn(static_cast<size_t>(std::max<int64_t>(sq.t_comp, 1) * hd), 40 + static_cast<uint32_t>(i)));
    sel.emplace_back(static_cast<size_t>(sq.m * std::max<int64_t>(sq.t_comp, 1)));
    for (auto& v : sel.back()) v = (g() % 4 == 0) ? 1 : 0;
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  // CPU: one multi-sequence call with host descriptors.
  std::vector<AttentionSeq> hseqs;
  std::vector<int32_t> qseq;
  int64_t r0 = 0, max_win = 0, max_comp = 0, n_entries = 0;
  for (size_t i = 0; i < shape.size(); ++i) {
    const Seq& sq = shape[i];
    n_entries += sq.t_win + sq.t_comp;
    hseqs.push_back({.win = win[i].data(), .win_pos = wpos[i].data(), .comp = sq.t_comp ? comp[i].data() : nullptr,
                     .comp_sel = sq.t_comp ? sel[i].data() : nullptr, .t_win = sq.t_win, .t_comp = sq.t_comp, .q0 = r0});
    for (int64_t r = 0; r < sq.m; ++r) qseq.push_back(static_cast<int32_t>(i));
    r0 += sq.m;
    max_win = std::max(max_win, sq.t_win);
    max_comp = std::max(max_comp, sq.t_comp);
  }
  std::vector<float> ref(q.size());
  b.cpu->attention({.q = q.data(), .q_pos = qpos.data(), .sink = sink.data(), .out = ref.data(), .s = s, .heads = H,
                    .head_dim = hd, .window = window, .scale = scale, .seqs = hseqs.data(), .q_seq = qseq.data(),
                    .n_seqs = static_cast<int64_t>(hseqs.size()), .max_t_win = max_win, .max_t_comp = max_comp});
  // GPU: the same call with device descriptors.
  Dev<float> dq(q), dsink(sink), dout(q.size());
  Dev<int64_t> dqpos(qpos);
  std::vector<std::unique_ptr<Dev<float>>> dwin, dcomp;
  std::vector<std::unique_ptr<Dev<int64_t>>> dwpos;
  std::vector<std::unique_ptr<Dev<uint8_t>>> dsel;
  std::vector<AttentionSeq> dseqs = hseqs;
  for (size_t i = 0; i < shape.size(); ++i) {
    dwin.push_back(std::make_unique<Dev<float>>(win[i]));
    dwpos.push_back(std::make_unique<Dev<int64_t>>(wpos[i]));
    dcomp.push_back(std::make_unique<Dev<float>>(comp[i]));
    dsel.push_back(std::make_unique<Dev<uint8_t>>(sel[i]));
    dseqs[i].win = dwin[i]->p;
    dseqs[i].win_pos = dwpos[i]->p;
    if (shape[i].t_comp) {
      dseqs[i].comp = dcomp[i]->p;
      dseqs[i].comp_sel = dsel[i]->p;
    }
  }
  std::vector<uint8_t> seq_bytes(dseqs.size() * sizeof(AttentionSeq));
  std::memcpy(seq_bytes.data(), dseqs.data(), seq_bytes.size());
  Dev<uint8_t> dseq_bytes(seq_bytes);
  Dev<int32_t> dqseq(qseq);
  gpu.attention({.q = dq.p, .q_pos = dqpos.p, .sink = dsink.p, .out = dout.p, .s = s, .heads = H, .head_dim = hd,
                 .window = window, .scale = scale, .seqs = reinterpret_cast<const AttentionSeq*>(dseq_bytes.p),
                 .q_seq = dqseq.p, .n_seqs = static_cast<int64_t>(dseqs.size()), .max_t_win = max_win,
                 .max_t_comp = max_comp, .total_entries = total ? n_entries : 0});
  gpu.synchronize();
  const std::vector<float> got = dout.get();
  EXPECT_LT(rel_err(ref, got), tol);
  // Each sequence alone (single-sequence form) on the GPU: the same bits.
  r0 = 0;
  for (size_t i = 0; i < shape.size(); ++i) {
    const Seq& sq = shape[i];
    Dev<float> one(static_cast<size_t>(sq.m * H * hd));
    gpu.attention({.q = dq.p + r0 * H * hd, .q_pos = dqpos.p + r0, .win = dwin[i]->p, .win_pos = dwpos[i]->p,
                   .comp = sq.t_comp ? dcomp[i]->p : nullptr, .comp_sel = sq.t_comp ? dsel[i]->p : nullptr,
                   .sink = dsink.p, .out = one.p, .s = sq.m, .heads = H, .head_dim = hd, .t_win = sq.t_win,
                   .t_comp = sq.t_comp, .window = window, .scale = scale});
    gpu.synchronize();
    const std::vector<float> alone = one.get();
    EXPECT_EQ(std::memcmp(alone.data(), got.data() + r0 * H * hd, alone.size() * sizeof(float)), 0) << "sequence " << i;
    r0 += sq.m;
  }
}

TEST(CudaMultiSequence, AttentionMatchesTheCpuAndEachSequenceAlone) {
  Backends b;
  check_multi_sequence_attention(b, *b.gpu, 1e-5, true);
}

// The bf16 backend stages every sequence's entries as bf16 rows (at the sequence's first row,
// the sum of the earlier ones' rows) before its tensor-core kernel: with total_entries given and
// with the backend's own bound, and for a call of few queries. Inputs unrounded: within 1e-2
// (check_attention's bound).
TEST(CudaMultiSequence, AttentionOnTheTensorCoresMatchesTheCpuAndEachSequenceAlone) {
  Backends b;
  auto bf16 = make_cuda_backend(0, Precision::kBF16);
  check_multi_sequence_attention(b, *bf16, 1e-2, true);
  check_multi_sequence_attention(b, *bf16, 1e-2, false);
  // At most 8 queries (decode-sized): only the selected compressed rows are staged, here for
  // sequences of several queries each.
  check_multi_sequence_attention(b, *bf16, 1e-2, true, {{1, 128, 2048}, {3, 130, 64}, {2, 10, 300}});
}

// The indexer's batched ops (one launch over several sequences) against one call per sequence:
// scores, candidate blocks and top-k (with and without a restriction) bitwise the same. Items of
// one query over many keys (decode), several queries, no keys, no queries, and a 40-row chunk
// (more than a shared launch takes: a call of its own).
TEST(CudaMultiSequence, IndexerBatchIsEachSequencesCall) {
  Backends b;
  const int64_t H = 32, dim = 128, ratio = 4, k = 512;
  struct Seq {
    int64_t s, t;
  };
  const std::vector<Seq> shape{{1, 2048}, {1, 100}, {5, 700}, {1, 0}, {0, 50}, {40, 600}, {3, 1500}};
  const size_t n = shape.size();
  std::vector<std::unique_ptr<Dev<float>>> q, kk, w, one, many;
  std::vector<std::unique_ptr<Dev<int64_t>>> pos;
  std::vector<std::unique_ptr<Dev<uint8_t>>> rs, sel_one, sel_many, keep_one, keep_many;
  std::vector<IndexerScoreArgs> score_ops;
  std::vector<TopkMaskArgs> topk_ops;
  std::vector<CandidateBlocksArgs> cand_ops;
  std::mt19937 g(77);
  for (size_t i = 0; i < n; ++i) {
    const auto [S, T] = shape[i];
    const uint32_t seed = 900 + static_cast<uint32_t>(10 * i);
    q.push_back(std::make_unique<Dev<float>>(randn(static_cast<size_t>(S * H * dim), seed)));
    kk.push_back(std::make_unique<Dev<float>>(randn(static_cast<size_t>(T * dim), seed + 1)));
    w.push_back(std::make_unique<Dev<float>>(randn(static_cast<size_t>(S * H), seed + 2, 0.3f)));
    std::vector<int64_t> p(static_cast<size_t>(S));
    for (auto& x : p) x = T * ratio - 1 - static_cast<int64_t>(g() % 40);
    pos.push_back(std::make_unique<Dev<int64_t>>(p));
    std::vector<uint8_t> r = random_bytes(static_cast<size_t>(S * T), seed + 3, 0, 4);
    for (auto& x : r) x = x != 0;
    rs.push_back(std::make_unique<Dev<uint8_t>>(r));
    for (auto* v : {&one, &many}) v->push_back(std::make_unique<Dev<float>>(std::vector<float>(static_cast<size_t>(S * T), NAN)));
    for (auto* v : {&sel_one, &sel_many, &keep_one, &keep_many})
      v->push_back(std::make_unique<Dev<uint8_t>>(std::vector<uint8_t>(static_cast<size_t>(S * T), 7)));
    IndexerScoreArgs sa{.q = q[i]->p, .k = kk[i]->p, .w = w[i]->p, .q_pos = pos[i]->p, .scores = one[i]->p, .s = S, .heads = H,
                        .dim = dim, .t = T, .ratio = ratio, .score_scale = 0.088f};
    b.gpu->indexer_scores(sa);
    sa.scores = many[i]->p;
    score_ops.push_back(sa);
  }
  b.gpu->indexer_scores_batch({.items = score_ops.data(), .n = static_cast<int64_t>(n)});
  for (size_t i = 0; i < n; ++i) {
    const auto [S, T] = shape[i];
    CandidateBlocksArgs ca{.scores = one[i]->p, .q_pos = pos[i]->p, .keep = keep_one[i]->p, .s = S, .t = T, .ratio = ratio,
                           .block_size = 8, .topk_blocks = 64};
    b.gpu->candidate_blocks(ca);
    ca.scores = many[i]->p;
    ca.keep = keep_many[i]->p;
    cand_ops.push_back(ca);
    TopkMaskArgs ta{.scores = one[i]->p, .restrict_to = i % 2 ? rs[i]->p : nullptr, .selected = sel_one[i]->p, .s = S, .t = T,
                    .k = std::min(k, T)};
    b.gpu->topk_mask(ta);
    ta.scores = many[i]->p;
    ta.selected = sel_many[i]->p;
    topk_ops.push_back(ta);
  }
  b.gpu->candidate_blocks_batch({.items = cand_ops.data(), .n = static_cast<int64_t>(n)});
  b.gpu->topk_mask_batch({.items = topk_ops.data(), .n = static_cast<int64_t>(n)});
  b.gpu->synchronize();
  for (size_t i = 0; i < n; ++i) {
    const auto a = one[i]->get(), c = many[i]->get();
    EXPECT_EQ(std::memcmp(a.data(), c.data(), a.size() * 4), 0) << "scores of sequence " << i;
    EXPECT_EQ(keep_one[i]->get(), keep_many[i]->get()) << "candidate blocks of sequence " << i;
    EXPECT_EQ(sel_one[i]->get(), sel_many[i]->get()) << "top-k of sequence " << i;
  }
  // The single calls are themselves the CPU's (the tests above); one check that the batch
  // selected something: the decode item keeps min(k, visible) entries.
  const auto sel0 = sel_many[0]->get();
  EXPECT_EQ(std::count(sel0.begin(), sel0.end(), uint8_t{1}), k);
  // A batch of single queries takes the narrow tile (the mixed batch above, the wide one for
  // every item; each single call, the narrow one): the same scores either way.
  std::vector<IndexerScoreArgs> decode_ops;
  std::vector<std::unique_ptr<Dev<float>>> dec;
  for (size_t i : {size_t{0}, size_t{1}, size_t{3}}) {
    dec.push_back(std::make_unique<Dev<float>>(std::vector<float>(static_cast<size_t>(shape[i].s * shape[i].t), NAN)));
    decode_ops.push_back(score_ops[i]);
    decode_ops.back().scores = dec.back()->p;
  }
  b.gpu->indexer_scores_batch({.items = decode_ops.data(), .n = static_cast<int64_t>(decode_ops.size())});
  b.gpu->synchronize();
  for (size_t j = 0; j < dec.size(); ++j) {
    const size_t i = j == 2 ? 3 : j;
    const auto a = one[i]->get(), c = dec[j]->get();
    EXPECT_EQ(std::memcmp(a.data(), c.data(), a.size() * 4), 0) << "scores of single query " << i << " in a batch of single queries";
  }
}

// copy_batch and dequant_packed_batch against their single forms.
TEST(CudaMultiSequence, BatchedCopiesAndRingReads) {
  Backends b;
  const int64_t dim = 512;
  std::vector<int64_t> rows{3, 0, 127, 1};
  std::mt19937 g(9);
  int64_t total = 0;
  for (int64_t r : rows) total += r;
  // Every cache format, its values 8 a thread (aligned output) or one a thread (the output one
  // float past alignment): the CPU's dequantisation bitwise.
  struct Case {
    FakeQuant kind;
    int64_t block, shift;
  };
  for (const Case c : {Case{FakeQuant::kFp8Pow2, 32, 0}, Case{FakeQuant::kFp8Pow2, 32, 1}, Case{FakeQuant::kFp4Pow2, 32, 0},
                       Case{FakeQuant::kFp4Pow2, 32, 1}, Case{FakeQuant::kFp4E4m3, 16, 0}, Case{FakeQuant::kFp4E4m3, 16, 1},
                       Case{FakeQuant::kFp8Pow2, 4, 0}}) {  // (a block of 4: one value a thread)
    const bool fp8 = c.kind == FakeQuant::kFp8Pow2;
    std::vector<std::vector<uint8_t>> codes, scales;
    for (int64_t r : rows) {
      codes.emplace_back(static_cast<size_t>(r * dim / (fp8 ? 1 : 2)));
      scales.emplace_back(static_cast<size_t>(r * dim / c.block));
      for (auto& v : codes.back()) {
        do v = static_cast<uint8_t>(g());
        while (fp8 && (v & 0x7F) == 0x7F);  // every e4m3 code but NaN's
      }
      for (auto& v : scales.back()) v = static_cast<uint8_t>(c.kind == FakeQuant::kFp4E4m3 ? 20 + g() % 80 : 110 + g() % 30);
    }
    Dev<float> out(static_cast<size_t>(total * dim + 1));
    std::vector<std::unique_ptr<Dev<uint8_t>>> dc, ds;
    std::vector<PackedDesc> descs;
    std::vector<float> ref(static_cast<size_t>(total * dim));
    int64_t off = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
      dc.push_back(std::make_unique<Dev<uint8_t>>(codes[i]));
      ds.push_back(std::make_unique<Dev<uint8_t>>(scales[i]));
      descs.push_back({dc[i]->p, ds[i]->p, out.p + c.shift + off * dim, rows[i]});
      if (rows[i]) dequant_fake_quant(c.kind, codes[i].data(), scales[i].data(), rows[i], dim, c.block, ref.data() + off * dim);
      off += rows[i];
    }
    std::vector<uint8_t> bytes(descs.size() * sizeof(PackedDesc));
    std::memcpy(bytes.data(), descs.data(), bytes.size());
    Dev<uint8_t> ddesc(bytes);
    b.gpu->dequant_packed_batch({.kind = c.kind, .descs = reinterpret_cast<const PackedDesc*>(ddesc.p),
                                 .n = static_cast<int64_t>(descs.size()), .dim = dim, .block = c.block, .max_rows = 127});
    b.gpu->synchronize();
    const std::vector<float> got = out.get();
    EXPECT_EQ(std::memcmp(got.data() + c.shift, ref.data(), ref.size() * sizeof(float)), 0)
        << "kind " << static_cast<int>(c.kind) << ", output shifted by " << c.shift;
  }
  // Copies: aligned and unaligned sizes and addresses.
  std::vector<uint8_t> src(10000), zero(10000, 0);
  for (auto& v : src) v = static_cast<uint8_t>(g());
  Dev<uint8_t> dsrc(src), ddst(zero);
  std::vector<CopyDesc> cps{{ddst.p, dsrc.p, 4096}, {ddst.p + 4096, dsrc.p + 4097, 1001}, {ddst.p + 6000, dsrc.p + 6000, 0}};
  std::vector<uint8_t> cb(cps.size() * sizeof(CopyDesc));
  std::memcpy(cb.data(), cps.data(), cb.size());
  Dev<uint8_t> dcps(cb);
  b.gpu->copy_batch({.descs = reinterpret_cast<const CopyDesc*>(dcps.p), .n = 3, .max_bytes = 4096});
  b.gpu->synchronize();
  const std::vector<uint8_t> dst = ddst.get();
  EXPECT_EQ(std::memcmp(dst.data(), src.data(), 4096), 0);
  EXPECT_EQ(std::memcmp(dst.data() + 4096, src.data() + 4097, 1001), 0);
  EXPECT_EQ(dst[5097], 0);
  EXPECT_EQ(dst[6000], 0);
}

// upload_batch: the uploads, then the copies within device memory, whatever path it takes (one
// launch for small batches; the default's uploads and copy_batch for a large upload or many
// items), at sizes that are not multiples of 16 and copies at unaligned addresses.
TEST(CudaMultiSequence, UploadBatchIsItsUploadsThenCopies) {
  auto gpu = make_cuda_backend(0);
  const size_t arena_bytes = 1 << 16;
  const auto src_host = random_bytes(40000, 5);
  Dev<uint8_t> src(src_host);
  struct Case {
    std::vector<size_t> up;    // host items' sizes, at 16-byte aligned offsets of the arena
    std::vector<size_t> copy;  // copies' sizes, from src + 3 k to unaligned offsets of the arena
    const char* what;
  };
  for (const Case& c : {Case{{8, 100, 517}, {512, 16, 37}, "one launch"}, Case{{8192, 24}, {512, 37}, "a large upload"},
                        Case{{16}, std::vector<size_t>(40, 48), "many items"}, Case{{}, {20000, 30000}, "large copies"}}) {
    Dev<uint8_t> arena(arena_bytes);
    std::vector<uint8_t> want(arena_bytes, 0);
    std::vector<std::vector<uint8_t>> host;
    std::vector<UploadItem> items;
    size_t at = 0;
    for (size_t k = 0; k < c.up.size(); ++k) {
      host.push_back(random_bytes(c.up[k], 60 + static_cast<uint32_t>(k)));
      items.push_back({.dst = arena.p + at, .src = host.back().data(), .bytes = static_cast<int64_t>(c.up[k])});
      std::memcpy(want.data() + at, host.back().data(), c.up[k]);
      at = (at + c.up[k] + 15) / 16 * 16;
    }
    for (size_t k = 0; k < c.copy.size(); ++k) {
      const size_t from = 3 * k % 7, to = at + 5;
      ASSERT_LE(to + c.copy[k], arena_bytes) << c.what;
      items.push_back({.dst = arena.p + to, .src = src.p + from, .bytes = static_cast<int64_t>(c.copy[k]), .from_device = true});
      std::memcpy(want.data() + to, src_host.data() + from, c.copy[k]);
      at = to + c.copy[k];
    }
    gpu->upload_batch(items.data(), static_cast<int64_t>(items.size()));
    for (auto& h : host) std::fill(h.begin(), h.end(), uint8_t{0});  // the sources may be reused at once
    gpu->synchronize();
    EXPECT_EQ(arena.get(), want) << c.what;
  }
}
