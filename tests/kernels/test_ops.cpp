// CPU backend ops against direct double-precision implementations of the spec's formulas,
// plus the properties the engine relies on (batch invariance, top-k tie and -inf rules).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "core/dtype.h"
#include "kernels/backend.h"

using namespace deepinfer;

namespace {
std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  std::vector<float> v(n);
  for (auto& x : v) x = scale * nd(rng);
  return v;
}
constexpr float kInf = std::numeric_limits<float>::infinity();
}  // namespace

TEST(Ops, MatmulMatchesNaiveAndIsBatchInvariant) {
  auto be = kernels::make_cpu_backend(2);
  const int64_t m = 7, n = 33, k = 75;
  auto x = randn(m * k, 1), w = randn(n * k, 2);
  std::vector<float> y(m * n);
  be->matmul({.x = x.data(), .w = kernels::WeightView::f32(w.data(), n, k), .y = y.data(), .m = m, .n = n, .k = k});
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double r = 0;
      for (int64_t t = 0; t < k; ++t) r += static_cast<double>(x[i * k + t]) * w[j * k + t];
      EXPECT_NEAR(y[i * n + j], r, 1e-4) << i << "," << j;
    }
  // Each row alone gives the same bits as inside the batch.
  for (int64_t i = 0; i < m; ++i) {
    std::vector<float> yi(n);
    be->matmul({.x = x.data() + i * k, .w = kernels::WeightView::f32(w.data(), n, k), .y = yi.data(), .m = 1, .n = n, .k = k});
    for (int64_t j = 0; j < n; ++j) EXPECT_EQ(yi[j], y[i * n + j]);
  }
  // And the thread count does not matter.
  auto be1 = kernels::make_cpu_backend(1);
  std::vector<float> y1(m * n);
  be1->matmul({.x = x.data(), .w = kernels::WeightView::f32(w.data(), n, k), .y = y1.data(), .m = m, .n = n, .k = k});
  EXPECT_EQ(y1, y);
}

TEST(Ops, HcMixesSinkhorn) {
  auto be = kernels::make_cpu_backend(2);
  const int64_t rows = 3, hc = 4, dim = 16, mix = (2 + hc) * hc;
  auto x = randn(rows * hc * dim, 3), fn = randn(mix * hc * dim, 4, 0.5f), base = randn(mix, 5, 0.3f);
  std::vector<float> scale = {0.9f, 1.1f, 2.0f};
  std::vector<float> pre(rows * hc), post(rows * hc), comb(rows * hc * hc);
  be->hc_mixes({.x = x.data(), .fn = fn.data(), .scale = scale.data(), .base = base.data(), .pre = pre.data(),
                .post = post.data(), .comb = comb.data(), .rows = rows, .hc = hc, .dim = dim, .sinkhorn_iters = 20,
                .norm_eps = 1e-20f, .hc_eps = 1e-6f});
  for (int64_t r = 0; r < rows; ++r) {
    // Reference in double, straight from the spec (section 3.3).
    const float* xr = x.data() + r * hc * dim;
    double ms = 0;
    for (int64_t i = 0; i < hc * dim; ++i) ms += static_cast<double>(xr[i]) * xr[i];
    double inv = 1.0 / std::sqrt(ms / static_cast<double>(hc * dim) + 1e-20);
    std::vector<double> m(mix);
    for (int64_t j = 0; j < mix; ++j) {
      double s = 0;
      for (int64_t i = 0; i < hc * dim; ++i) s += xr[i] * inv * fn[j * hc * dim + i];
      m[j] = s;
    }
    auto sig = [](double v) { return 1.0 / (1.0 + std::exp(-v)); };
    for (int64_t k = 0; k < hc; ++k) {
      EXPECT_NEAR(pre[r * hc + k], sig(m[k] * scale[0] + base[k]) + 1e-6, 1e-5);
      EXPECT_NEAR(post[r * hc + k], 2 * sig(m[hc + k] * scale[1] + base[hc + k]), 1e-5);
    }
    std::vector<double> c(hc * hc);
    for (int64_t j = 0; j < hc; ++j) {
      double mx = -1e30, den = 0;
      for (int64_t k = 0; k < hc; ++k) mx = std::max(mx, m[2 * hc + j * hc + k] * scale[2] + base[2 * hc + j * hc + k]);
      for (int64_t k = 0; k < hc; ++k) den += std::exp(m[2 * hc + j * hc + k] * scale[2] + base[2 * hc + j * hc + k] - mx);
      for (int64_t k = 0; k < hc; ++k) c[j * hc + k] = std::exp(m[2 * hc + j * hc + k] * scale[2] + base[2 * hc + j * hc + k] - mx) / den + 1e-6;
    }
    auto coln = [&] { for (int64_t k = 0; k < hc; ++k) { double s = 0; for (int64_t j = 0; j < hc; ++j) s += c[j * hc + k]; for (int64_t j = 0; j < hc; ++j) c[j * hc + k] /= s + 1e-6; } };
    auto rown = [&] { for (int64_t j = 0; j < hc; ++j) { double s = 0; for (int64_t k = 0; k < hc; ++k) s += c[j * hc + k]; for (int64_t k = 0; k < hc; ++k) c[j * hc + k] /= s + 1e-6; } };
    coln();
    for (int it = 0; it < 19; ++it) { rown(); coln(); }
    for (int64_t i = 0; i < hc * hc; ++i) EXPECT_NEAR(comb[r * hc * hc + i], c[i], 1e-5);
    // Column sums are ~1 after the final column step (doubly stochastic up to eps).
    for (int64_t k = 0; k < hc; ++k) {
      double s = 0;
      for (int64_t j = 0; j < hc; ++j) s += comb[r * hc * hc + j * hc + k];
      EXPECT_NEAR(s, 1.0, 1e-5);
    }
  }
}

TEST(Ops, HcCollapseExpand) {
  auto be = kernels::make_cpu_backend(1);
  const int64_t hc = 2, dim = 3;
  std::vector<float> x = {1, 2, 3, 10, 20, 30}, pre = {0.5f, 2.0f}, y(3);
  be->hc_collapse({.x = x.data(), .pre = pre.data(), .y = y.data(), .rows = 1, .hc = hc, .dim = dim});
  EXPECT_EQ(y, (std::vector<float>{20.5f, 41.0f, 61.5f}));
  std::vector<float> post = {1.0f, 0.0f}, comb = {0.0f, 1.0f, 1.0f, 0.0f};  // swap streams
  std::vector<float> sub = {100, 200, 300};
  be->hc_expand({.x = x.data(), .y = sub.data(), .post = post.data(), .comb = comb.data(), .rows = 1, .hc = hc, .dim = dim});
  EXPECT_EQ(x, (std::vector<float>{110, 220, 330, 1, 2, 3}));
}

TEST(Ops, AttentionWindowCompressedAndSink) {
  auto be = kernels::make_cpu_backend(2);
  const int64_t s = 3, H = 2, d = 8, tw = 5, tc = 4, W = 3;
  auto q = randn(s * H * d, 7), win = randn(tw * d, 8), comp = randn(tc * d, 9);
  std::vector<int64_t> qpos = {2, 3, 4}, wpos = {0, 1, 2, 3, 4};
  std::vector<uint8_t> sel = {1, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0};
  std::vector<float> sink = {0.3f, -1.0f}, out(s * H * d);
  be->attention({.q = q.data(), .q_pos = qpos.data(), .win = win.data(), .win_pos = wpos.data(), .comp = comp.data(),
                 .comp_sel = sel.data(), .sink = sink.data(), .out = out.data(), .s = s, .heads = H, .head_dim = d,
                 .t_win = tw, .t_comp = tc, .window = W, .scale = 0.35f});
  for (int64_t t = 0; t < s; ++t)
    for (int64_t h = 0; h < H; ++h) {
      std::vector<std::pair<double, const float*>> ents;
      auto score = [&](const float* k) {
        double r = 0;
        for (int64_t c = 0; c < d; ++c) r += static_cast<double>(q[(t * H + h) * d + c]) * k[c];
        return r * 0.35;
      };
      for (int64_t j = 0; j < tw; ++j)
        if (wpos[j] <= qpos[t] && wpos[j] > qpos[t] - W) ents.push_back({score(&win[j * d]), &win[j * d]});
      for (int64_t j = 0; j < tc; ++j)
        if (sel[t * tc + j]) ents.push_back({score(&comp[j * d]), &comp[j * d]});
      double den = std::exp(static_cast<double>(sink[h]));
      for (auto& e : ents) den += std::exp(e.first);
      for (int64_t c = 0; c < d; ++c) {
        double o = 0;
        for (auto& e : ents) o += std::exp(e.first) / den * e.second[c];
        EXPECT_NEAR(out[(t * H + h) * d + c], o, 1e-5);
      }
    }
}

// The queries' RoPE in the call: bitwise rope(q), attention, rope(out, inverse); q unchanged.
TEST(Ops, AttentionWithRopeIsRopeAttentionRope) {
  auto be = kernels::make_cpu_backend(2);
  const int64_t s = 3, H = 2, d = 16, rd = 8, tw = 5, tc = 4, W = 3;
  const auto q = randn(s * H * d, 17), win = randn(tw * d, 18), comp = randn(tc * d, 19), th = randn(s * rd / 2, 20, 2.0f);
  std::vector<float> cs(th.size()), sn(th.size());
  for (size_t i = 0; i < th.size(); ++i) {
    cs[i] = std::cos(th[i]);
    sn[i] = std::sin(th[i]);
  }
  std::vector<int64_t> qpos = {2, 3, 4}, wpos = {0, 1, 2, 3, 4};
  std::vector<uint8_t> sel = {1, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0};
  std::vector<float> sink = {0.3f, -1.0f}, sep(s * H * d), fused(s * H * d), q_rot = q, q_in = q;
  kernels::AttentionArgs a{.q = q_rot.data(), .q_pos = qpos.data(), .win = win.data(), .win_pos = wpos.data(), .comp = comp.data(),
                           .comp_sel = sel.data(), .sink = sink.data(), .out = sep.data(), .s = s, .heads = H, .head_dim = d,
                           .t_win = tw, .t_comp = tc, .window = W, .scale = 0.35f};
  be->rope({.x = q_rot.data(), .cos = cs.data(), .sin = sn.data(), .rows = s, .heads = H, .head_dim = d, .rope_dim = rd});
  be->attention(a);
  be->rope({.x = sep.data(), .cos = cs.data(), .sin = sn.data(), .rows = s, .heads = H, .head_dim = d, .rope_dim = rd, .inverse = true});
  a.q = q_in.data();
  a.out = fused.data();
  a.q_cos = cs.data();
  a.q_sin = sn.data();
  a.rope_dim = rd;
  be->attention(a);
  EXPECT_EQ(std::memcmp(sep.data(), fused.data(), sep.size() * sizeof(float)), 0);
  EXPECT_EQ(q_in, q);
  EXPECT_NE(q_rot, q);
}

// Packed windows (AttentionArgs.win_block): the bits of the call on the dequantised rows, with
// two sequences of two queries each; a wrong block or sequence offset would change them.
TEST(Ops, AttentionReadsPackedWindowsAsTheirDequantisedRows) {
  auto be = kernels::make_cpu_backend(2);
  const int64_t H = 2, d = 64, blk = 32, tw = 6, tc = 3, W = 4, per = 2, nseq = 2, S = nseq * per;
  std::mt19937 g(31);
  std::uniform_int_distribution<int> byte(0, 255), sc(124, 129);
  std::vector<uint8_t> codes(static_cast<size_t>(nseq * tw * d)), scales(static_cast<size_t>(nseq * tw * d / blk));
  for (auto& b : codes) b = static_cast<uint8_t>((byte(g) & 0xBF) | 0x20);  // magnitudes 1/8 .. 1.875
  for (auto& b : scales) b = static_cast<uint8_t>(sc(g));
  std::vector<float> win(codes.size());
  be->dequant_packed({.kind = kernels::FakeQuant::kFp8Pow2, .codes = codes.data(), .scales = scales.data(), .out = win.data(),
                      .rows = nseq * tw, .dim = d, .block = blk});
  const auto q = randn(S * H * d, 32, 0.2f), comp = randn(nseq * tc * d, 33);
  std::vector<int64_t> qpos = {4, 5, 14, 15}, wpos = {0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15};
  std::vector<int32_t> q_seq = {0, 0, 1, 1};
  std::vector<uint8_t> sel = {1, 0, 1, 0, 1, 0, 0, 0, 1, 1, 1, 0};
  std::vector<float> sink = {0.3f, -1.0f}, of(S * H * d), op(S * H * d);
  std::vector<kernels::AttentionSeq> sf, sp;
  for (int64_t i = 0; i < nseq; ++i) {
    sf.push_back({.win = win.data() + i * tw * d, .win_pos = wpos.data() + i * tw, .comp = comp.data() + i * tc * d,
                  .comp_sel = sel.data() + i * per * tc, .t_win = tw, .t_comp = tc, .q0 = i * per});
    kernels::AttentionSeq p = sf.back();
    p.win = nullptr;
    p.win_codes = codes.data() + i * tw * d;
    p.win_scales = scales.data() + i * tw * d / blk;
    sp.push_back(p);
  }
  kernels::AttentionArgs a{.q = q.data(), .q_pos = qpos.data(), .sink = sink.data(), .out = of.data(), .s = S, .heads = H,
                           .head_dim = d, .window = W, .scale = 0.35f, .seqs = sf.data(), .q_seq = q_seq.data(), .n_seqs = nseq,
                           .max_t_win = tw, .max_t_comp = tc};
  be->attention(a);
  a.seqs = sp.data();
  a.win_block = blk;
  a.out = op.data();
  be->attention(a);
  EXPECT_EQ(std::memcmp(of.data(), op.data(), of.size() * sizeof(float)), 0);
  EXPECT_GT(*std::max_element(of.begin(), of.end()), 0.0f);
}

TEST(Ops, TopkDropsNegInfAndBreaksTiesByIndex) {
  auto be = kernels::make_cpu_backend(1);
  std::vector<float> sc = {1.0f, -kInf, 3.0f, 1.0f, 1.0f, -kInf};
  std::vector<uint8_t> sel(6, 7);  // every element is written (callers need not clear it)
  be->topk_mask({.scores = sc.data(), .selected = sel.data(), .s = 1, .t = 6, .k = 3});
  EXPECT_EQ(sel, (std::vector<uint8_t>{1, 0, 1, 1, 0, 0}));  // 3.0, then the tie at 1.0 by lower index
  be->topk_mask({.scores = sc.data(), .selected = sel.data(), .s = 1, .t = 6, .k = 6});
  EXPECT_EQ(sel, (std::vector<uint8_t>{1, 0, 1, 1, 1, 0}));  // -inf picks dropped
  std::vector<uint8_t> restrict_to = {0, 1, 1, 0, 1, 1};
  be->topk_mask({.scores = sc.data(), .restrict_to = restrict_to.data(), .selected = sel.data(), .s = 1, .t = 6, .k = 3});
  EXPECT_EQ(sel, (std::vector<uint8_t>{0, 0, 1, 0, 1, 0}));
}

TEST(Ops, CandidateBlocksPinNewestBlock) {
  auto be = kernels::make_cpu_backend(1);
  // t = 7 positions, blocks of 2 (last padded), ratio 1; query at position 4 sees 0..4.
  std::vector<float> sc = {5.0f, 0.0f, 9.0f, 1.0f, 0.1f, -kInf, -kInf};
  std::vector<int64_t> pos = {4};
  std::vector<uint8_t> keep(7, 7);  // every element is written
  be->candidate_blocks({.scores = sc.data(), .q_pos = pos.data(), .keep = keep.data(), .s = 1, .t = 7, .ratio = 1,
                        .block_size = 2, .topk_blocks = 2});
  // Block 2 (positions 4,5) holds the newest visible position and is pinned; then block 1 (max 9).
  EXPECT_EQ(keep, (std::vector<uint8_t>{0, 0, 1, 1, 1, 1, 0}));
  be->candidate_blocks({.scores = sc.data(), .q_pos = pos.data(), .keep = keep.data(), .s = 1, .t = 7, .ratio = 1,
                        .block_size = 2, .topk_blocks = 4});
  EXPECT_EQ(keep, (std::vector<uint8_t>{1, 1, 1, 1, 1, 1, 0}));  // block 3 is all -inf: dropped
}

TEST(Ops, IndexerVisibility) {
  auto be = kernels::make_cpu_backend(1);
  const int64_t H = 2, d = 4, T = 4;
  auto q = randn(2 * H * d, 11), k = randn(T * d, 12);
  std::vector<float> w = {0.5f, -0.25f, 1.0f, 1.0f}, sc(2 * T);
  std::vector<int64_t> pos = {2, 5};  // ratio 2: visible groups floor(3/2)=1 and floor(6/2)=3
  be->indexer_scores({.q = q.data(), .k = k.data(), .w = w.data(), .q_pos = pos.data(), .scores = sc.data(), .s = 2,
                      .heads = H, .dim = d, .t = T, .ratio = 2, .score_scale = 0.5f});
  EXPECT_TRUE(std::isfinite(sc[0]));
  EXPECT_EQ(sc[1], -kInf);
  EXPECT_TRUE(std::isfinite(sc[T + 2]));
  EXPECT_EQ(sc[T + 3], -kInf);
  double r = 0;
  for (int64_t h = 0; h < H; ++h) {
    double dt = 0;
    for (int64_t c = 0; c < d; ++c) dt += static_cast<double>(q[h * d + c]) * k[c];
    r += std::max(dt, 0.0) * 0.5 * w[h];
  }
  EXPECT_NEAR(sc[0], r, 1e-5);
}

TEST(Ops, RouterSqrtSoftplusBiasForSelectionOnly) {
  auto be = kernels::make_cpu_backend(1);
  std::vector<float> z = {0.0f, 1.0f, 2.0f, 30.0f}, bias = {10.0f, 0.0f, 0.0f, 0.0f};
  std::vector<int32_t> ids(2);
  std::vector<float> w(2);
  be->router({.logits = z.data(), .bias = bias.data(), .ids = ids.data(), .weights = w.data(), .rows = 1, .experts = 4,
              .top_k = 2, .temp = 1.0f, .routed_scaling = 1.5f, .normalize = true});
  EXPECT_EQ(ids[0], 0);  // the bias wins the selection
  EXPECT_EQ(ids[1], 3);
  const double s0 = std::sqrt(std::log1p(1.0)), s3 = std::sqrt(30.0);  // softplus linear above 20
  EXPECT_NEAR(w[0], 1.5 * s0 / (s0 + s3), 1e-6);
  EXPECT_NEAR(w[1], 1.5 * s3 / (s0 + s3), 1e-6);
}

TEST(Ops, GroupedProductStridesDefaultToTheColumnsItTouches) {
  // groups = 3: group g reads x columns [g*4, +4) of rows 12 wide, writes y columns [g*2, +2).
  auto be = kernels::make_cpu_backend(1);
  const int64_t m = 2, n = 2, k = 4, G = 3;
  auto x = randn(m * G * k, 8), w = randn(G * n * k, 9);
  std::vector<float> y(m * G * n), ref(m * G * n);
  const auto wv = kernels::WeightView::f32(w.data(), G * n, k);
  be->matmul({.x = x.data(), .w = wv, .y = y.data(), .m = m, .n = n, .k = k, .groups = G, .x_group_stride = k,
              .y_group_stride = n});
  for (int64_t g = 0; g < G; ++g)
    be->matmul({.x = x.data() + g * k, .w = wv, .y = ref.data() + g * n, .m = m, .n = n, .k = k, .ldx = G * k, .ldy = G * n,
                .w_row0 = g * n});
  EXPECT_EQ(y, ref);
}

TEST(Ops, GreedyDrawIsTheSamplersArgmaxRule) {
  auto be = kernels::make_cpu_backend(1);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // ties to the lower id; +inf wins; a NaN, or nothing above -inf: no token (the engine fails
  // the request). No params: greedy.
  std::vector<float> x = {1, 3, 3, 2, nan, 0.5f, nan, -1, -kInf, nan, -kInf, -kInf, 0, kInf, 5, kInf, -kInf, -kInf, -kInf, -kInf};
  const std::vector<int32_t> want = {1, kernels::kNoToken, kernels::kNoToken, 1, kernels::kNoToken};
  std::vector<int32_t> ids(5, 7);
  be->sample_rows({.x = x.data(), .ids = ids.data(), .rows = 5, .cols = 4});
  EXPECT_EQ(ids, want);
  std::vector<kernels::DrawParams> greedy(5);
  greedy[1].top_k = 1;  // ignored at temperature 0
  ids.assign(5, 7);
  be->sample_rows({.x = x.data(), .params = greedy.data(), .ids = ids.data(), .rows = 5, .cols = 4});
  EXPECT_EQ(ids, want);
  std::vector<kernels::DrawParams> hot(5, kernels::DrawParams{.temperature = 1.0f, .u = 0.5});
  ids.assign(5, 7);
  be->sample_rows({.x = x.data(), .params = hot.data(), .ids = ids.data(), .rows = 5, .cols = 4});
  EXPECT_EQ(ids[1], kernels::kNoToken);
  EXPECT_EQ(ids[2], kernels::kNoToken);
  EXPECT_EQ(ids[4], kernels::kNoToken);
}

TEST(Ops, MoePermuteIsAStableSortByExpert) {
  auto be = kernels::make_cpu_backend(1);
  // 3 tokens x 2 slots over 4 experts; expert 2 is never picked.
  std::vector<int32_t> ids = {3, 1, 1, 0, 3, 0}, off(5), tok(6), slot(6);
  std::vector<float> w = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f}, pw(6);
  be->moe_permute({.ids = ids.data(), .weights = w.data(), .offsets = off.data(), .perm_token = tok.data(),
                   .perm_weight = pw.data(), .slot_row = slot.data(), .n = 3, .k = 2, .experts = 4});
  EXPECT_EQ(off, (std::vector<int32_t>{0, 2, 4, 4, 6}));
  EXPECT_EQ(tok, (std::vector<int32_t>{1, 2, 0, 1, 0, 2}));  // pairs 3,5 | 1,2 | 0,4
  EXPECT_EQ(pw, (std::vector<float>{0.4f, 0.6f, 0.2f, 0.3f, 0.1f, 0.5f}));
  EXPECT_EQ(slot, (std::vector<int32_t>{4, 2, 3, 0, 5, 1}));
  // With the shared expert: expert 4, every token in order with weight 1, after the routed rows.
  std::vector<int32_t> off2(6), tok2(9), slot2(6);
  std::vector<float> pw2(9);
  be->moe_permute({.ids = ids.data(), .weights = w.data(), .offsets = off2.data(), .perm_token = tok2.data(),
                   .perm_weight = pw2.data(), .slot_row = slot2.data(), .n = 3, .k = 2, .experts = 4, .shared = true});
  EXPECT_EQ(off2, (std::vector<int32_t>{0, 2, 4, 4, 6, 9}));
  EXPECT_EQ(tok2, (std::vector<int32_t>{1, 2, 0, 1, 0, 2, 0, 1, 2}));
  EXPECT_EQ(pw2, (std::vector<float>{0.4f, 0.6f, 0.2f, 0.3f, 0.1f, 0.5f, 1.0f, 1.0f, 1.0f}));
  EXPECT_EQ(slot2, slot);
  ids[2] = 4;  // outside [0, E): an engine invariant, so it aborts with a message
  EXPECT_DEATH(be->moe_permute({.ids = ids.data(), .weights = w.data(), .offsets = off.data(), .perm_token = tok.data(),
                                .perm_weight = pw.data(), .slot_row = slot.data(), .n = 3, .k = 2, .experts = 4}),
               "expert outside");
}

TEST(Ops, GroupedMatmulIsAMatmulPerExpert) {
  auto be = kernels::make_cpu_backend(2);
  const int64_t rows = 9, n = 5, k = 12, E = 3;
  auto x = randn(rows * k, 3), w0 = randn(n * k, 4), w1 = randn(n * k, 5), w2 = randn(n * k, 6);
  const std::vector<kernels::WeightView> w = {kernels::WeightView::f32(w0.data(), n, k), kernels::WeightView::f32(w1.data(), n, k),
                                              kernels::WeightView::f32(w2.data(), n, k)};
  std::vector<int32_t> off = {0, 4, 4, 9};  // expert 1 has no rows
  std::vector<float> y(rows * n, -1.0f);
  be->grouped_matmul({.x = x.data(), .w = w.data(), .offsets = off.data(), .y = y.data(), .rows = rows, .n = n, .k = k,
                      .experts = E});
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<float> ref(n);
    be->matmul({.x = x.data() + r * k, .w = w[r < 4 ? 0 : 2], .y = ref.data(), .m = 1, .n = n, .k = k});
    EXPECT_EQ(std::memcmp(ref.data(), y.data() + r * n, n * 4), 0) << "row " << r;
  }
  // Rows gathered on the way in (x_rows over 4 source rows): row r the product of source row
  // x_rows[r], as a gathered copy would give.
  const std::vector<int32_t> x_rows = {3, 0, 2, 2, 1, 0, 3, 1, 2};
  const std::vector<float> src(x.begin(), x.begin() + 4 * k);  // 4 rows alone (a read past them shows under ASan)
  std::vector<float> xg(rows * k), yg(rows * n, -1.0f);
  for (int64_t r = 0; r < rows; ++r) std::memcpy(&xg[r * k], &src[x_rows[r] * k], k * 4);
  be->grouped_matmul({.x = xg.data(), .w = w.data(), .offsets = off.data(), .y = y.data(), .rows = rows, .n = n, .k = k,
                      .experts = E});
  be->grouped_matmul({.x = src.data(), .w = w.data(), .offsets = off.data(), .y = yg.data(), .rows = rows, .n = n, .k = k,
                      .experts = E, .x_rows = x_rows.data(), .x_src_rows = 4});
  EXPECT_EQ(y, yg);
  EXPECT_DEATH(be->grouped_matmul({.x = src.data(), .w = w.data(), .offsets = off.data(), .y = yg.data(), .rows = rows, .n = n,
                                   .k = k, .experts = E, .x_rows = x_rows.data()}),
               "x_rows without x_src_rows");
  off = {0, 4, 3, 9};  // descending: stopped with a message, not a wild write
  EXPECT_DEATH(be->grouped_matmul({.x = x.data(), .w = w.data(), .offsets = off.data(), .y = y.data(), .rows = rows, .n = n,
                                   .k = k, .experts = E}),
               "not ascending");
}

TEST(Ops, MultiMatmulAndGroupedPairsAreTheirProducts) {
  auto be = kernels::make_cpu_backend(2);
  const int64_t rows = 5, k = 16;
  const auto x = randn(rows * k, 7), wa = randn(3 * k, 8), wb = randn(6 * k, 9);
  const kernels::WeightView va = kernels::WeightView::f32(wa.data(), 3, k), vb = kernels::WeightView::f32(wb.data(), 6, k);
  std::vector<float> ya(rows * 3, -1.0f), yb(rows * 6, -1.0f), ra(rows * 3), rb(rows * 6);
  kernels::MultiMatmulArgs m{.x = x.data(), .m = rows, .k = k, .count = 2};
  m.outs[0] = {.w = va, .y = ya.data(), .n = 3};
  m.outs[1] = {.w = vb, .y = yb.data(), .n = 6};
  be->multi_matmul(m);
  be->matmul({.x = x.data(), .w = va, .y = ra.data(), .m = rows, .n = 3, .k = k});
  be->matmul({.x = x.data(), .w = vb, .y = rb.data(), .m = rows, .n = 6, .k = k});
  EXPECT_EQ(ya, ra);
  EXPECT_EQ(yb, rb);
  m.count = kernels::kMaxMatmulOuts + 1;
  EXPECT_DEATH(be->multi_matmul(m), "outputs");
  // A grouped pair: the second product with the same offsets.
  const std::vector<kernels::WeightView> w1 = {va, va}, w2 = {vb, vb};  // [3, k] of each (vb's first rows)
  const std::vector<int32_t> off = {0, 2, 5};
  std::vector<float> g(rows * 3, -1.0f), u(rows * 3, -1.0f), rg(rows * 3), ru(rows * 3);
  be->grouped_matmul({.x = x.data(), .w = w1.data(), .offsets = off.data(), .y = g.data(), .rows = rows, .n = 3, .k = k,
                      .experts = 2, .w2 = w2.data(), .y2 = u.data()});
  be->matmul({.x = x.data(), .w = va, .y = rg.data(), .m = rows, .n = 3, .k = k});
  be->matmul({.x = x.data(), .w = vb, .y = ru.data(), .m = rows, .n = 3, .k = k});
  EXPECT_EQ(g, rg);
  EXPECT_EQ(u, ru);
}

TEST(Ops, CollapseWithTheNormIsCollapseThenRmsNorm) {
  auto be = kernels::make_cpu_backend(2);
  const int64_t rows = 3, hc = 4, dim = 40;
  const auto x = randn(rows * hc * dim, 21), pre = randn(rows * hc, 22), w = randn(dim, 23);
  std::vector<float> y(rows * dim), n(rows * dim), y1(rows * dim), n1(rows * dim);
  be->hc_collapse({.x = x.data(), .pre = pre.data(), .y = y.data(), .rows = rows, .hc = hc, .dim = dim, .norm_w = w.data(),
                   .norm_y = n.data(), .norm_eps = 1e-6f});
  be->hc_collapse({.x = x.data(), .pre = pre.data(), .y = y1.data(), .rows = rows, .hc = hc, .dim = dim});
  be->rms_norm({.x = y1.data(), .w = w.data(), .y = n1.data(), .rows = rows, .dim = dim, .eps = 1e-6f});
  EXPECT_EQ(y, y1);
  EXPECT_EQ(n, n1);
}

TEST(Ops, SwigluClamps) {
  auto be = kernels::make_cpu_backend(1);
  std::vector<float> g = {20.0f, -3.0f}, u = {50.0f, -50.0f}, wt = {2.0f}, out(2);
  be->swiglu({.gate = g.data(), .up = u.data(), .weight = wt.data(), .out = out.data(), .rows = 1, .inter = 2, .limit = 10.0f});
  EXPECT_NEAR(out[0], 2.0 * (10.0 / (1.0 + std::exp(-10.0))) * 10.0, 1e-4);  // gate clamped above, up to 10
  EXPECT_NEAR(out[1], 2.0 * (-3.0 / (1.0 + std::exp(3.0))) * -10.0, 1e-4);   // no lower gate clamp
}

TEST(Ops, Bf16EmulationRoundsInputsAndWeights) {
  // The CPU's bf16 precision is the float32 product of the bf16-rounded operands, bitwise.
  auto be16 = kernels::make_cpu_backend(2, kernels::Precision::kBF16);
  auto be32 = kernels::make_cpu_backend(2);
  const int64_t m = 5, n = 7, k = 40;
  std::vector<float> x(m * k), w(n * k), xr(x.size()), wr(w.size());
  for (size_t i = 0; i < x.size(); ++i) xr[i] = core::bf16_to_f32(core::f32_to_bf16(x[i] = std::sin(1.3f * static_cast<float>(i)) * 3.1f));
  for (size_t i = 0; i < w.size(); ++i) wr[i] = core::bf16_to_f32(core::f32_to_bf16(w[i] = std::cos(0.7f * static_cast<float>(i)) * 0.37f));
  std::vector<float> a(m * n), b(m * n);
  be16->matmul({.x = x.data(), .w = kernels::WeightView::f32(w.data(), n, k), .y = a.data(), .m = m, .n = n, .k = k});
  be32->matmul({.x = xr.data(), .w = kernels::WeightView::f32(wr.data(), n, k), .y = b.data(), .m = m, .n = n, .k = k});
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
  be32->matmul({.x = x.data(), .w = kernels::WeightView::f32(w.data(), n, k), .y = b.data(), .m = m, .n = n, .k = k});
  EXPECT_NE(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);  // the rounding is real
}

// The fused pairs' defaults are their two ops, in order, and refuse arguments that break the
// pairing (a device backend runs a pair as one launch: the pairing is what makes that legal).
TEST(Ops, FusedPairsAreTheirTwoOps) {
  auto be = kernels::make_cpu_backend(1);
  // route = router, then the permutation of its choices.
  const int64_t n = 3, E = 8, K = 2;
  const auto z = randn(n * E, 31);
  std::vector<int32_t> ids(n * K), off(E + 2), tok(n * K + n), slot(n * K), ids1 = ids, off1 = off, tok1 = tok, slot1 = slot;
  std::vector<float> w(n * K), pw(n * K + n), w1 = w, pw1 = pw;
  const kernels::RouterArgs r{.logits = z.data(), .ids = ids.data(), .weights = w.data(), .rows = n, .experts = E, .top_k = K};
  be->route(r, {.ids = ids.data(), .weights = w.data(), .offsets = off.data(), .perm_token = tok.data(), .perm_weight = pw.data(),
                .slot_row = slot.data(), .n = n, .k = K, .experts = E, .shared = true});
  kernels::RouterArgs r1 = r;
  r1.ids = ids1.data();
  r1.weights = w1.data();
  be->router(r1);
  be->moe_permute({.ids = ids1.data(), .weights = w1.data(), .offsets = off1.data(), .perm_token = tok1.data(),
                   .perm_weight = pw1.data(), .slot_row = slot1.data(), .n = n, .k = K, .experts = E, .shared = true});
  EXPECT_EQ(ids, ids1);
  EXPECT_EQ(off, off1);
  EXPECT_EQ(tok, tok1);
  EXPECT_EQ(slot, slot1);
  EXPECT_EQ(pw, pw1);
  EXPECT_DEATH(be->route(r, {.ids = ids1.data(), .weights = w.data(), .offsets = off.data(), .perm_token = tok.data(),
                             .perm_weight = pw.data(), .slot_row = slot.data(), .n = n, .k = K, .experts = E}),
               "route: the permutation does not take the router's choices");
  // moe_combine_expand = the combine, then the expand of its output.
  const int64_t hc = 2, D = 5;
  const auto eo = randn(n * K * D, 32), x0 = randn(n * hc * D, 33), post = randn(n * hc, 34), comb = randn(n * hc * hc, 35);
  std::vector<float> y(n * D), y1(n * D), x = x0, x1 = x0;
  std::vector<int32_t> rows_of(n * K);
  for (int64_t i = 0; i < n * K; ++i) rows_of[i] = static_cast<int32_t>((i * 5) % (n * K));
  const kernels::MoeCombineArgs c{.expert_out = eo.data(), .slot_row = rows_of.data(), .ids = ids.data(), .y = y.data(), .n = n,
                                  .k = K, .dim = D};
  be->moe_combine_expand(c, {.x = x.data(), .y = y.data(), .post = post.data(), .comb = comb.data(), .rows = n, .hc = hc, .dim = D});
  kernels::MoeCombineArgs c1 = c;
  c1.y = y1.data();
  be->moe_combine(c1);
  be->hc_expand({.x = x1.data(), .y = y1.data(), .post = post.data(), .comb = comb.data(), .rows = n, .hc = hc, .dim = D});
  EXPECT_EQ(y, y1);
  EXPECT_EQ(x, x1);
  EXPECT_DEATH(be->moe_combine_expand(c, {.x = x.data(), .y = y1.data(), .post = post.data(), .comb = comb.data(), .rows = n,
                                          .hc = hc, .dim = D}),
               "moe_combine_expand: the expand does not take the combine's output");
  // hc_mixes_collapse = the mixes, then the collapse with another pre.
  const int64_t mix = (2 + hc) * hc;
  const auto fn = randn(mix * hc * D, 36, 0.1f), base = randn(mix, 37), cpre = randn(n * hc, 38);
  const std::vector<float> scale = {1.0f, 1.0f, 1.0f};
  std::vector<float> pre(n * hc), post2(n * hc), comb2(n * hc * hc), xc(n * D), xn(n * D), pre1 = pre, xc1 = xc, xn1 = xn;
  const kernels::HcMixesArgs m{.x = x0.data(), .fn = fn.data(), .scale = scale.data(), .base = base.data(), .pre = pre.data(),
                               .post = post2.data(), .comb = comb2.data(), .rows = n, .hc = hc, .dim = D};
  be->hc_mixes_collapse(m, {.x = x0.data(), .pre = cpre.data(), .y = xc.data(), .rows = n, .hc = hc, .dim = D, .norm_y = xn.data()});
  kernels::HcMixesArgs m1 = m;
  m1.pre = pre1.data();
  be->hc_mixes(m1);
  be->hc_collapse({.x = x0.data(), .pre = cpre.data(), .y = xc1.data(), .rows = n, .hc = hc, .dim = D, .norm_y = xn1.data()});
  EXPECT_EQ(pre, pre1);
  EXPECT_EQ(xc, xc1);
  EXPECT_EQ(xn, xn1);
  EXPECT_DEATH(be->hc_mixes_collapse(m, {.x = x0.data(), .pre = pre.data(), .y = xc.data(), .rows = n, .hc = hc, .dim = D}),
               "hc_mixes_collapse: the collapse reads the pre the mixes write");
}

// norm_rope_quant's default: per item rms_norm, rope (one head, the last rope_dim channels),
// fake_quant (codes and scales as fake_quant writes them).
TEST(Ops, NormRopeQuantIsTheThreeOps) {
  auto be = kernels::make_cpu_backend(1);
  const int64_t rows = 3, dim = 64, rope = 16;
  const auto x0 = randn(rows * dim, 41, 2.0f), w = randn(dim, 42), cs = randn(rows * rope / 2, 43), sn = randn(rows * rope / 2, 44);
  std::vector<float> x = x0, x1 = x0, q = randn(rows * 8, 45), q1 = q;
  std::vector<uint8_t> codes(rows * dim), scales(rows * dim / 32), codes1 = codes, scales1 = scales;
  const kernels::NormRopeQuantArgs items[] = {
      {.x = x.data(), .w = w.data(), .cos = cs.data(), .sin = sn.data(), .codes = codes.data(), .scales = scales.data(),
       .rows = rows, .dim = dim, .rope_dim = rope, .block = 32, .eps = 1e-6f},
      {.x = q.data(), .rows = rows, .dim = 8, .eps = 1e-6f}};
  be->norm_rope_quant({.items = items, .n = 2});
  be->rms_norm({.x = x1.data(), .w = w.data(), .y = x1.data(), .rows = rows, .dim = dim, .eps = 1e-6f});
  be->rope({.x = x1.data(), .cos = cs.data(), .sin = sn.data(), .rows = rows, .heads = 1, .head_dim = dim, .rope_dim = rope});
  be->fake_quant({.x = x1.data(), .rows = rows, .dim = dim, .block = 32, .codes = codes1.data(), .scales = scales1.data()});
  be->rms_norm({.x = q1.data(), .y = q1.data(), .rows = rows, .dim = 8, .eps = 1e-6f});
  EXPECT_EQ(x, x1);
  EXPECT_EQ(codes, codes1);
  EXPECT_EQ(scales, scales1);
  EXPECT_EQ(q, q1);
  EXPECT_NE(x, x0);
}

// MatmulArgs.f32: on the bf16 backend, the float32 backend's product bit for bit (weights of
// any format dequantised exactly); without it, the bf16 emulation's.
TEST(Ops, MatmulF32IgnoresTheBackendsPrecision) {
  auto f32 = kernels::make_cpu_backend(1), bf16 = kernels::make_cpu_backend(1, kernels::Precision::kBF16);
  const int64_t m = 5, n = 3, k = 200;
  const auto x = randn(m * k, 51), w = randn(n * k, 52, 0.1f);
  std::vector<float> a(m * n), b(m * n), c(m * n);
  const kernels::MatmulArgs args{.x = x.data(), .w = kernels::WeightView::f32(w.data(), n, k), .m = m, .n = n, .k = k, .f32 = true};
  auto run = [&](kernels::Backend& be, float* y, bool f) {
    kernels::MatmulArgs p = args;
    p.y = y;
    p.f32 = f;
    be.matmul(p);
  };
  run(*f32, a.data(), false);
  run(*bf16, b.data(), true);
  run(*bf16, c.data(), false);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}
