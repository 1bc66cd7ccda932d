// The CUDA backend's fused op pairs (Backend::hc_mixes_collapse, route, moe_combine_expand):
// each gives bitwise what its two ops give one after the other on the same backend, at the
// released widths and at row counts that take each launch shape (and the fallbacks).
#include <gtest/gtest.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cuda_test_util.h"

using namespace deepinfer;
using namespace deepinfer::kernels;
using namespace deepinfer::cuda_test;
using deepinfer::kernels::FakeQuant;

namespace {

template <typename T>
::testing::AssertionResult same(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << "sizes " << a.size() << " vs " << b.size();
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0) return ::testing::AssertionFailure() << "element " << i << " differs";
  return ::testing::AssertionSuccess();
}

// The mixes of a site and the collapse with another pre, fused and as two ops: rows that take
// the one launch (the staged mixes of 1-8 rows; 3 mixed rows with 40 collapsed: the collapse's
// rows over three z layers of it), the two launches (6 mixes per block at 9 and 40 rows, the
// chunks at 200), a runtime stream count (hc 3), and the CPU's results.
TEST(CudaFused, MixesAndCollapseGiveTheTwoOpsBits) {
  Backends b;
  for (const int64_t hc : {int64_t{4}, int64_t{3}}) {
    const int64_t D = hc == 4 ? 5120 : 256, mix = (2 + hc) * hc;
    for (const auto& [Rm, R] : {std::pair<int64_t, int64_t>{1, 1}, {2, 2}, {8, 8}, {3, 40}, {9, 9}, {40, 40}, {200, 200}}) {
      const std::string what = "hc " + std::to_string(hc) + ", " + std::to_string(Rm) + " rows mixed, " + std::to_string(R) + " collapsed";
      auto x = randn(static_cast<size_t>(R * hc * D), 70 + static_cast<uint32_t>(R)), fn = randn(static_cast<size_t>(mix * hc * D), 71, 0.02f),
           base = randn(static_cast<size_t>(mix), 72, 0.3f), nw = randn(static_cast<size_t>(D), 73, 0.5f),
           cpre = randn(static_cast<size_t>(R * hc), 74, 0.5f);
      std::vector<float> scale = {0.9f, 1.1f, 2.0f};
      Dev<float> dx(x), dfn(fn), dbase(base), dscale(scale), dnw(nw), dcpre(cpre);
      struct Out {
        Dev<float> pre, post, comb, y, yn;
      };
      auto outs = [&] {
        return Out{Dev<float>(static_cast<size_t>(Rm * hc)), Dev<float>(static_cast<size_t>(Rm * hc)),
                   Dev<float>(static_cast<size_t>(Rm * hc * hc)), Dev<float>(static_cast<size_t>(R * D)), Dev<float>(static_cast<size_t>(R * D))};
      };
      auto args = [&](Out& o) {
        return std::pair<HcMixesArgs, HcCollapseArgs>{
            {.x = dx.p, .fn = dfn.p, .scale = dscale.p, .base = dbase.p, .pre = o.pre.p, .post = o.post.p, .comb = o.comb.p,
             .rows = Rm, .hc = hc, .dim = D},
            {.x = dx.p, .pre = dcpre.p, .y = o.y.p, .rows = R, .hc = hc, .dim = D, .norm_w = dnw.p, .norm_y = o.yn.p,
             .norm_eps = 1e-6f}};
      };
      Out two = outs(), one = outs();
      const auto [m2, c2] = args(two);
      b.gpu->hc_mixes(m2);
      b.gpu->hc_collapse(c2);
      const auto [m1, c1] = args(one);
      b.gpu->hc_mixes_collapse(m1, c1);
      b.gpu->synchronize();
      EXPECT_TRUE(same(two.pre.get(), one.pre.get())) << "pre, " << what;
      EXPECT_TRUE(same(two.post.get(), one.post.get())) << "post, " << what;
      EXPECT_TRUE(same(two.comb.get(), one.comb.get())) << "comb, " << what;
      EXPECT_TRUE(same(two.y.get(), one.y.get())) << "collapse, " << what;
      EXPECT_TRUE(same(two.yn.get(), one.yn.get())) << "its norm, " << what;
      if (R == 9 && Rm == 9) {  // and the CPU backend's (the default: the two ops)
        std::vector<float> pre(static_cast<size_t>(R * hc)), post(pre.size()), comb(static_cast<size_t>(R * hc * hc)),
            y(static_cast<size_t>(R * D)), yn(y.size());
        b.cpu->hc_mixes_collapse({.x = x.data(), .fn = fn.data(), .scale = scale.data(), .base = base.data(), .pre = pre.data(),
                                  .post = post.data(), .comb = comb.data(), .rows = R, .hc = hc, .dim = D},
                                 {.x = x.data(), .pre = cpre.data(), .y = y.data(), .rows = R, .hc = hc, .dim = D,
                                  .norm_w = nw.data(), .norm_y = yn.data(), .norm_eps = 1e-6f});
        EXPECT_LT(rel_err(pre, one.pre.get()), 1e-5) << what;
        EXPECT_LT(rel_err(comb, one.comb.get()), 1e-5) << what;
        EXPECT_LT(rel_err(yn, one.yn.get()), 1e-5) << what;
      }
    }
  }
}

// The routing and its permutation, fused (up to 32 rows) and as two ops, with and without the
// shared expert's rows; 33 and 100 rows take the two kernels inside the op.
TEST(CudaFused, RouteGivesTheRouterAndPermutationsResults) {
  Backends b;
  for (const int64_t E : {int64_t{64}, int64_t{384}})
    for (const int64_t n : {int64_t{1}, int64_t{5}, int64_t{32}, int64_t{33}, int64_t{100}})
      for (const bool shared : {true, false}) {
        const std::string what = std::to_string(E) + " experts, " + std::to_string(n) + " rows, shared " + std::to_string(shared);
        const int64_t K = 6, R = n * K, rows = R + (shared ? n : 0);
        auto z = randn(static_cast<size_t>(n * E), 80 + static_cast<uint32_t>(n)), bias = randn(static_cast<size_t>(E), 81, 0.1f);
        Dev<float> dz(z), dbias(bias);
        struct Out {
          Dev<int32_t> ids, off, tok, slot;
          Dev<float> w, pw;
        };
        auto outs = [&] {  // the same fill, so entries an op leaves alone compare equal too
          return Out{Dev<int32_t>(std::vector<int32_t>(static_cast<size_t>(R), -3)), Dev<int32_t>(std::vector<int32_t>(static_cast<size_t>(E + 2), -3)),
                     Dev<int32_t>(std::vector<int32_t>(static_cast<size_t>(rows), -3)), Dev<int32_t>(std::vector<int32_t>(static_cast<size_t>(R), -3)),
                     Dev<float>(std::vector<float>(static_cast<size_t>(R), -3.0f)), Dev<float>(std::vector<float>(static_cast<size_t>(rows), -3.0f))};
        };
        auto args = [&](Out& o) {
          return std::pair<RouterArgs, MoePermuteArgs>{
              {.logits = dz.p, .bias = dbias.p, .ids = o.ids.p, .weights = o.w.p, .rows = n, .experts = E, .top_k = K, .temp = 1.3f,
               .routed_scaling = 1.5f, .normalize = true},
              {.ids = o.ids.p, .weights = o.w.p, .offsets = o.off.p, .perm_token = o.tok.p, .perm_weight = o.pw.p, .slot_row = o.slot.p,
               .n = n, .k = K, .experts = E, .shared = shared}};
        };
        Out two = outs(), one = outs();
        const auto [r2, p2] = args(two);
        b.gpu->router(r2);
        b.gpu->moe_permute(p2);
        const auto [r1, p1] = args(one);
        b.gpu->route(r1, p1);
        b.gpu->synchronize();
        EXPECT_TRUE(same(two.ids.get(), one.ids.get())) << "ids, " << what;
        EXPECT_TRUE(same(two.w.get(), one.w.get())) << "weights, " << what;
        EXPECT_TRUE(same(two.off.get(), one.off.get())) << "offsets, " << what;
        EXPECT_TRUE(same(two.tok.get(), one.tok.get())) << "tokens, " << what;
        EXPECT_TRUE(same(two.pw.get(), one.pw.get())) << "permuted weights, " << what;
        EXPECT_TRUE(same(two.slot.get(), one.slot.get())) << "slot rows, " << what;
        const auto off = one.off.get();
        EXPECT_EQ(off[static_cast<size_t>(E)], R) << what;  // every pair placed
      }
}

// The MoE combine and the expand of its output, fused and as two ops (hc 4 and a runtime 3).
TEST(CudaFused, CombineAndExpandGiveTheTwoOpsBits) {
  Backends b;
  for (const int64_t hc : {int64_t{4}, int64_t{3}})
    for (const int64_t n : {int64_t{1}, int64_t{8}, int64_t{40}}) {
      const std::string what = "hc " + std::to_string(hc) + ", " + std::to_string(n) + " rows";
      const int64_t K = 6, D = 5120, E = 64;
      std::mt19937 g(static_cast<uint32_t>(90 + n));
      std::vector<int32_t> ids(static_cast<size_t>(n * K)), slot_row(ids.size()), experts(static_cast<size_t>(E));
      std::iota(experts.begin(), experts.end(), 0);
      for (int64_t t = 0; t < n; ++t) {
        std::shuffle(experts.begin(), experts.end(), g);
        std::copy(experts.begin(), experts.begin() + K, ids.begin() + t * K);
      }
      std::iota(slot_row.begin(), slot_row.end(), 0);
      std::shuffle(slot_row.begin(), slot_row.end(), g);
      auto eo = randn(static_cast<size_t>(n * K * D), 91), sh = randn(static_cast<size_t>(n * D), 92),
           x = randn(static_cast<size_t>(n * hc * D), 93), post = randn(static_cast<size_t>(n * hc), 94),
           comb = randn(static_cast<size_t>(n * hc * hc), 95, 0.5f);
      Dev<float> deo(eo), dsh(sh), dpost(post), dcomb(comb), x2(x), x1(x), y2(static_cast<size_t>(n * D)), y1(y2.n);
      Dev<int32_t> dids(ids), dslot(slot_row);
      const MoeCombineArgs c{.expert_out = deo.p, .slot_row = dslot.p, .ids = dids.p, .shared = dsh.p, .n = n, .k = K, .dim = D};
      MoeCombineArgs c2 = c, c1 = c;
      c2.y = y2.p;
      c1.y = y1.p;
      b.gpu->moe_combine(c2);
      b.gpu->hc_expand({.x = x2.p, .y = y2.p, .post = dpost.p, .comb = dcomb.p, .rows = n, .hc = hc, .dim = D});
      b.gpu->moe_combine_expand(c1, {.x = x1.p, .y = y1.p, .post = dpost.p, .comb = dcomb.p, .rows = n, .hc = hc, .dim = D});
      b.gpu->synchronize();
      EXPECT_TRUE(same(y2.get(), y1.get())) << "combine, " << what;
      EXPECT_TRUE(same(x2.get(), x1.get())) << "streams, " << what;
    }
}

}  // namespace

// Items of norm, RoPE and fake quantisation in launches of up to four, against rms_norm, rope and
// fake_quant one after the other: the low rank's norm alone, the window KV (FP8, codes and
// scales), an FP4 item with pow2 scales and one with e4m3 scales in blocks of 16, one without a
// norm weight, a wide one (two float4 chunks a thread), and an item that does not fit the launch
// (dim 6: the three ops inside the op, in its place in the order).
TEST(CudaFused, NormRopeQuantGivesTheThreeOpsBits) {
  Backends b;
  struct Item {
    int64_t dim, rope, block;
    FakeQuant kind;
    bool weight = true;
  };
  // Six items that fit (two launches of at most four), the one that does not in between, one
  // without a norm weight.
  const Item shapes[] = {{1280, 0, 0, FakeQuant::kFp8Pow2},
                         {512, 64, 32, FakeQuant::kFp8Pow2},
                         {128, 64, 32, FakeQuant::kFp4Pow2},
                         {6, 2, 0, FakeQuant::kFp8Pow2},
                         {64, 16, 16, FakeQuant::kFp4E4m3},
                         {256, 0, 32, FakeQuant::kFp8Pow2, false},
                         {2048, 64, 0, FakeQuant::kFp8Pow2}};
  for (const int64_t rows : {int64_t{1}, int64_t{5}, int64_t{300}}) {
    std::vector<NormRopeQuantArgs> one, two;
    std::vector<std::unique_ptr<Dev<float>>> keep;
    std::vector<std::unique_ptr<Dev<uint8_t>>> keep8;
    std::vector<std::pair<Dev<float>*, Dev<float>*>> xs;
    std::vector<std::pair<Dev<uint8_t>*, Dev<uint8_t>*>> bytes;
    uint32_t seed = 100;
    for (const Item& it : shapes) {
      auto x = randn(static_cast<size_t>(rows * it.dim), seed++, 3.0f), w = randn(static_cast<size_t>(it.dim), seed++, 0.5f),
           cs = randn(static_cast<size_t>(rows * std::max<int64_t>(it.rope / 2, 1)), seed++), sn = randn(cs.size(), seed++);
      auto* w_d = keep.emplace_back(std::make_unique<Dev<float>>(w)).get();
      auto* cs_d = keep.emplace_back(std::make_unique<Dev<float>>(cs)).get();
      auto* sn_d = keep.emplace_back(std::make_unique<Dev<float>>(sn)).get();
      auto* x1 = keep.emplace_back(std::make_unique<Dev<float>>(x)).get();
      auto* x2 = keep.emplace_back(std::make_unique<Dev<float>>(x)).get();
      xs.push_back({x1, x2});
      const bool fp8 = it.kind == FakeQuant::kFp8Pow2;
      const size_t nc = it.block ? static_cast<size_t>(rows * it.dim / (fp8 ? 1 : 2)) : 0,
                   ns = it.block ? static_cast<size_t>(rows * it.dim / it.block) : 0;
      Dev<uint8_t>* c[2] = {nullptr, nullptr};
      Dev<uint8_t>* sc[2] = {nullptr, nullptr};
      for (int k = 0; k < 2 && it.block; ++k) {
        c[k] = keep8.emplace_back(std::make_unique<Dev<uint8_t>>(std::vector<uint8_t>(nc, 0xEE))).get();
        sc[k] = keep8.emplace_back(std::make_unique<Dev<uint8_t>>(std::vector<uint8_t>(ns, 0xEE))).get();
        bytes.push_back({c[k], sc[k]});
      }
      for (int k = 0; k < 2; ++k)
        (k == 0 ? one : two)
            .push_back({.x = (k == 0 ? x1 : x2)->p, .w = it.weight ? w_d->p : nullptr, .cos = cs_d->p, .sin = sn_d->p, .codes = c[k] ? c[k]->p : nullptr,
                        .scales = sc[k] ? sc[k]->p : nullptr, .rows = rows, .dim = it.dim, .rope_dim = it.rope, .block = it.block,
                        .eps = 1e-6f, .kind = it.kind});
    }
    b.gpu->norm_rope_quant({.items = one.data(), .n = static_cast<int64_t>(one.size())});
    for (const NormRopeQuantArgs& a : two) {
      b.gpu->rms_norm({.x = a.x, .w = a.w, .y = a.x, .rows = a.rows, .dim = a.dim, .eps = a.eps});
      if (a.rope_dim)
        b.gpu->rope({.x = a.x, .cos = a.cos, .sin = a.sin, .rows = a.rows, .heads = 1, .head_dim = a.dim, .rope_dim = a.rope_dim});
      if (a.block)
        b.gpu->fake_quant({.x = a.x, .rows = a.rows, .dim = a.dim, .block = a.block, .kind = a.kind, .codes = a.codes, .scales = a.scales});
    }
    b.gpu->synchronize();
    for (size_t i = 0; i < xs.size(); ++i)
      EXPECT_TRUE(same(xs[i].first->get(), xs[i].second->get())) << "item " << i << ", " << rows << " rows";
    for (size_t i = 0; i + 1 < bytes.size(); i += 2) {
      EXPECT_TRUE(same(bytes[i].first->get(), bytes[i + 1].first->get())) << "codes " << i / 2 << ", " << rows << " rows";
      EXPECT_TRUE(same(bytes[i].second->get(), bytes[i + 1].second->get())) << "scales " << i / 2 << ", " << rows << " rows";
    }
  }
}

// Packed windows (AttentionArgs.win_block): the call reads each sequence's ring as stored (FP8
// codes, a power-of-two scale per 32 channels) and gives the bits of the call on the rows that
// dequant_packed makes of them: on the bf16 backend one query a sequence (clustered splits), 5
// queries a sequence and 48 (folded), then on the float32 backend (its unpacking pass).
TEST(CudaFused, AttentionReadsPackedWindowsAsTheirDequantisedRows) {
  auto bf16 = make_cuda_backend(0, Precision::kBF16);
  auto f32 = make_cuda_backend(0);
  const int64_t H = 64, hd = 512, window = 128, cached = 127, blk = 32, tc = 2048, nseq = 3;
  struct Case {
    Backend* be;
    int64_t per_seq;
    const char* what;
  };
  for (const Case& c : {Case{bf16.get(), 1, "bf16, 1 query a sequence"}, Case{bf16.get(), 5, "bf16, 5 queries a sequence"},
                        Case{bf16.get(), 48, "bf16, 48 queries a sequence"}, Case{f32.get(), 5, "float32, 5 queries a sequence"}}) {
    std::mt19937 g(700 + static_cast<uint32_t>(c.per_seq));
    const int64_t S = nseq * c.per_seq, tw = cached + c.per_seq;
    // Every sequence: tw rows of codes (magnitudes 1/4 .. 4) and scales 2^-3 .. 2, positions
    // ending at its last query, 512 of 2048 compressed entries selected per query.
    std::vector<uint8_t> codes(static_cast<size_t>(nseq * tw * hd)), scales(static_cast<size_t>(nseq * tw * hd / blk));
    std::uniform_int_distribution<int> sign(0, 1), expo(5, 8), mant(0, 7), sc(124, 128);
    for (auto& b : codes) b = static_cast<uint8_t>(sign(g) << 7 | expo(g) << 3 | mant(g));
    for (auto& b : scales) b = static_cast<uint8_t>(sc(g));
    std::vector<int64_t> qpos(static_cast<size_t>(S)), wpos(static_cast<size_t>(nseq * tw));
    std::vector<int32_t> q_seq(static_cast<size_t>(S));
    std::vector<uint8_t> sel(static_cast<size_t>(S * tc), 0);
    std::uniform_int_distribution<int64_t> pick(0, tc - 1);
    for (int64_t q = 0; q < nseq; ++q) {
      const int64_t last = 6000 + 100 * q;
      for (int64_t i = 0; i < tw; ++i) wpos[static_cast<size_t>(q * tw + i)] = last - tw + 1 + i;
      for (int64_t i = 0; i < c.per_seq; ++i) {
        const int64_t t = q * c.per_seq + i;
        qpos[static_cast<size_t>(t)] = last - c.per_seq + 1 + i;
        q_seq[static_cast<size_t>(t)] = static_cast<int32_t>(q);
        for (int j = 0; j < 512; ++j) sel[static_cast<size_t>(t * tc + pick(g))] = 1;
      }
    }
    Dev<uint8_t> dcodes(codes), dscales(scales), dsel(sel);
    Dev<float> dq(randn(static_cast<size_t>(S * H * hd), 710, 0.3f)), dcomp(randn(static_cast<size_t>(nseq * tc * hd), 711)),
        dsink(randn(static_cast<size_t>(H), 712)), dwin(static_cast<size_t>(nseq * tw * hd)),
        out_float(static_cast<size_t>(S * H * hd)), out_packed(static_cast<size_t>(S * H * hd));
    Dev<int64_t> dqpos(qpos), dwpos(wpos);
    Dev<int32_t> dq_seq(q_seq);
    c.be->dequant_packed({.kind = FakeQuant::kFp8Pow2, .codes = dcodes.p, .scales = dscales.p, .out = dwin.p,
                          .rows = nseq * tw, .dim = hd, .block = blk});
    std::vector<AttentionSeq> as_float, as_packed;
    for (int64_t q = 0; q < nseq; ++q) {
      const AttentionSeq e{.win = dwin.p + q * tw * hd, .win_pos = dwpos.p + q * tw, .comp = dcomp.p + q * tc * hd,
                           .comp_sel = dsel.p + q * c.per_seq * tc, .t_win = tw, .t_comp = tc, .q0 = q * c.per_seq};
      as_float.push_back(e);
      AttentionSeq p = e;
      p.win = nullptr;
      p.win_codes = dcodes.p + q * tw * hd;
      p.win_scales = dscales.p + q * tw * hd / blk;
      as_packed.push_back(p);
    }
    Dev<AttentionSeq> dseq_float(as_float), dseq_packed(as_packed);
    AttentionArgs a{.q = dq.p, .q_pos = dqpos.p, .sink = dsink.p, .out = out_float.p, .s = S, .heads = H, .head_dim = hd,
                    .window = window, .scale = 0.044f, .seqs = dseq_float.p, .q_seq = dq_seq.p, .n_seqs = nseq,
                    .max_t_win = tw, .max_t_comp = tc, .max_selected = 512, .total_entries = nseq * (tw + tc)};
    c.be->attention(a);
    a.seqs = dseq_packed.p;
    a.win_block = blk;
    a.out = out_packed.p;
    c.be->attention(a);
    c.be->synchronize();
    const auto of = out_float.get();
    EXPECT_TRUE(same(of, out_packed.get())) << c.what;
    EXPECT_GT(*std::max_element(of.begin(), of.end()), 0.0f) << c.what << ": no output";
  }
}

// Attention with the queries' RoPE in the call (AttentionArgs.q_cos): bitwise rope(q), the call,
// rope(out, inverse) on the same backend. bf16 tensor-core launches: one query at the released
// shape (5 splits: a cluster merging them; and with 20 selected entries, three of the cluster's
// segments empty), window only (one split), three queries (5 splits merged by the combine
// kernel), 96 (folded); the float32 backend (its rotations around the call). q must come back
// unchanged.
TEST(CudaFused, AttentionRotatesQueriesAndOutputAsRopeDoes) {
  auto bf16 = make_cuda_backend(0, Precision::kBF16);
  auto f32 = make_cuda_backend(0);
  struct Case {
    Backend* be;
    int64_t S, t_comp;
    const char* what;
    int n_sel = 512;
  };
  const int64_t H = 64, hd = 512, rd = 64, window = 128, cached = 127;
  for (const Case& c : {Case{bf16.get(), 1, 2048, "bf16, 1 query"}, Case{bf16.get(), 1, 2048, "bf16, 1 query, 20 selected", 20},
                        Case{bf16.get(), 1, 0, "bf16, 1 query, window only"},
                        Case{bf16.get(), 3, 2048, "bf16, 3 queries"}, Case{bf16.get(), 96, 2048, "bf16, 96 queries"},
                        Case{f32.get(), 3, 2048, "float32, 3 queries"}}) {
    std::mt19937 g(900 + static_cast<uint32_t>(c.S + c.t_comp));
    const int64_t S = c.S, tw = cached + S, tc = std::max<int64_t>(c.t_comp, 1);
    std::vector<int64_t> qpos(static_cast<size_t>(S)), wpos(static_cast<size_t>(tw));
    for (int64_t i = 0; i < S; ++i) qpos[static_cast<size_t>(i)] = 5000 + i;
    for (int64_t i = 0; i < tw; ++i) wpos[static_cast<size_t>(i)] = 5000 - cached + i;
    std::vector<uint8_t> sel(static_cast<size_t>(S * tc), 0);
    std::uniform_int_distribution<int64_t> pick(0, tc - 1);
    for (int64_t s = 0; s < S && c.t_comp; ++s)
      for (int j = 0; j < c.n_sel; ++j) sel[static_cast<size_t>(s * tc + pick(g))] = 1;
    std::vector<float> cs(static_cast<size_t>(S * rd / 2)), sn(cs.size());
    std::uniform_real_distribution<float> ang(-3.0f, 3.0f);
    for (size_t i = 0; i < cs.size(); ++i) {
      const float th = ang(g);
      cs[i] = std::cos(th);
      sn[i] = std::sin(th);
    }
    const auto q = randn(static_cast<size_t>(S * H * hd), 910, 1.5f);
    Dev<float> dq(q), dq_rot(q), dwin(randn(static_cast<size_t>(tw * hd), 911)), dcomp(randn(static_cast<size_t>(tc * hd), 912)),
        dsink(randn(static_cast<size_t>(H), 913)), dcs(cs), dsn(sn), out_sep(q.size()), out_fused(q.size());
    Dev<int64_t> dqpos(qpos), dwpos(wpos);
    Dev<uint8_t> dsel(sel);
    AttentionArgs a{.q = dq_rot.p, .q_pos = dqpos.p, .win = dwin.p, .win_pos = dwpos.p, .comp = c.t_comp ? dcomp.p : nullptr,
                    .comp_sel = c.t_comp ? dsel.p : nullptr, .sink = dsink.p, .out = out_sep.p, .s = S, .heads = H,
                    .head_dim = hd, .t_win = tw, .t_comp = c.t_comp, .window = window, .scale = 0.044f, .max_selected = 512};
    const RopeArgs r{.x = dq_rot.p, .cos = dcs.p, .sin = dsn.p, .rows = S, .heads = H, .head_dim = hd, .rope_dim = rd};
    c.be->rope(r);
    c.be->attention(a);
    RopeArgs back = r;
    back.x = out_sep.p;
    back.inverse = true;
    c.be->rope(back);
    a.q = dq.p;
    a.out = out_fused.p;
    a.q_cos = dcs.p;
    a.q_sin = dsn.p;
    a.rope_dim = rd;
    c.be->attention(a);
    c.be->synchronize();
    EXPECT_TRUE(same(out_sep.get(), out_fused.get())) << c.what;
    EXPECT_TRUE(same(dq.get(), q)) << c.what << ": q changed";
    EXPECT_FALSE(same(dq_rot.get(), q)) << c.what << ": the rotation did nothing";
  }
}
