// CUDA backend parity: every kernels::Backend op on random inputs, CPU reference vs CUDA, at
// the fixture shapes and at the released V4.1-Flash dims. Built with DEEPINFER_CUDA=ON only
// (run on the device machine by scripts/device_run.sh).
#include <gtest/gtest.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "engine/draw_cases.h"
#include "kernels/cuda_test_util.h"
#include "model/quantize.h"

using namespace deepinfer;
using namespace deepinfer::kernels;
using namespace deepinfer::cuda_test;

namespace {

struct Dims {
  int64_t rows, D, H, hd, qlora, idx_heads, idx_dim, inter, experts, topk;
};
const Dims kFixture{7, 64, 4, 32, 48, 8, 32, 32, 8, 2};
const Dims kReleased{8, 5120, 64, 512, 1280, 32, 128, 2304, 384, 6};

class Parity : public ::testing::TestWithParam<Dims> {};

TEST_P(Parity, MatmulAllFormats) {
  Backends b;
  const Dims d = GetParam();
  const int64_t m = d.rows, n = d.qlora, k = d.D;
  auto x = randn(static_cast<size_t>(m * k), 1), wf = randn(static_cast<size_t>(n * k), 2, 0.05f);
  model::Weights owner;
  for (auto fmt : {WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kFP8Block32, WeightFormat::kMXFP4}) {
    WeightView w = model::quantize_matrix(WeightView::f32(wf.data(), n, k), fmt, owner);
    std::vector<float> y(static_cast<size_t>(m * n));
    b.cpu->matmul({.x = x.data(), .w = w, .y = y.data(), .m = m, .n = n, .k = k});
    const int64_t bytes = weight_bytes(w), sc_bytes = fmt == WeightFormat::kFP8Block32 ? ((n + 31) / 32) * ((k + 31) / 32)
                                                       : fmt == WeightFormat::kMXFP4 ? n * ((k + 31) / 32) : 0;
    std::vector<uint8_t> wb(static_cast<const uint8_t*>(w.data), static_cast<const uint8_t*>(w.data) + bytes - sc_bytes);
    std::vector<uint8_t> sb(w.scale ? w.scale : nullptr, w.scale ? w.scale + sc_bytes : nullptr);
    Dev<uint8_t> dw(wb), ds(sb);
    Dev<float> dx(x), dy(static_cast<size_t>(m * n));
    WeightView dv = w;
    dv.data = dw.p;
    dv.scale = sc_bytes ? ds.p : nullptr;
    b.gpu->matmul({.x = dx.p, .w = dv, .y = dy.p, .m = m, .n = n, .k = k});
    b.gpu->synchronize();
    EXPECT_LT(rel_err(y, dy.get()), 1e-5) << "format " << static_cast<int>(fmt);
  }
}

TEST_P(Parity, NormRopeSwigluPoolQuant) {
  Backends b;
  const Dims d = GetParam();
  auto x = randn(static_cast<size_t>(d.rows * d.D), 3), w = randn(static_cast<size_t>(d.D), 4);
  std::vector<float> y(x.size());
  b.cpu->rms_norm({.x = x.data(), .w = w.data(), .y = y.data(), .rows = d.rows, .dim = d.D, .eps = 1e-20f});
  Dev<float> dx(x), dw(w), dy(x.size());
  b.gpu->rms_norm({.x = dx.p, .w = dw.p, .y = dy.p, .rows = d.rows, .dim = d.D, .eps = 1e-20f});
  b.gpu->synchronize();
  EXPECT_LT(rel_err(y, dy.get()), 1e-5);
  // RoPE on [rows, H, hd] with 64 (or 8) rotary dims.
  const int64_t rd = d.hd >= 64 ? 64 : 8;
  auto q = randn(static_cast<size_t>(d.rows * d.H * d.hd), 5), cs = randn(static_cast<size_t>(d.rows * rd / 2), 6),
       sn = randn(static_cast<size_t>(d.rows * rd / 2), 7);
  Dev<float> dq(q), dc(cs), ds(sn);
  b.cpu->rope({.x = q.data(), .cos = cs.data(), .sin = sn.data(), .rows = d.rows, .heads = d.H, .head_dim = d.hd, .rope_dim = rd, .inverse = true});
  b.gpu->rope({.x = dq.p, .cos = dc.p, .sin = ds.p, .rows = d.rows, .heads = d.H, .head_dim = d.hd, .rope_dim = rd, .inverse = true});
  b.gpu->synchronize();
  EXPECT_LT(rel_err(q, dq.get()), 1e-6);
  // SwiGLU with clamps and weights.
  auto g = randn(static_cast<size_t>(d.rows * d.inter), 8, 6.0f), u = randn(g.size(), 9, 6.0f), rw = randn(static_cast<size_t>(d.rows), 10);
  std::vector<float> o(g.size());
  b.cpu->swiglu({.gate = g.data(), .up = u.data(), .weight = rw.data(), .out = o.data(), .rows = d.rows, .inter = d.inter, .limit = 10.0f});
  Dev<float> dg(g), du(u), drw(rw), dout(g.size());
  b.gpu->swiglu({.gate = dg.p, .up = du.p, .weight = drw.p, .out = dout.p, .rows = d.rows, .inter = d.inter, .limit = 10.0f});
  // Compressor pooling (ratio 2).
  auto kv = randn(static_cast<size_t>(4 * d.hd), 11), gt = randn(kv.size(), 12);
  std::vector<float> po(static_cast<size_t>(2 * d.hd));
  b.cpu->compress_pool({.kv = kv.data(), .gate = gt.data(), .out = po.data(), .groups = 2, .ratio = 2, .dim = d.hd});
  Dev<float> dkv(kv), dgt(gt), dpo(po.size());
  b.gpu->compress_pool({.kv = dkv.p, .gate = dgt.p, .out = dpo.p, .groups = 2, .ratio = 2, .dim = d.hd});
  b.gpu->synchronize();
  EXPECT_LT(rel_err(o, dout.get()), 1e-5);
  EXPECT_LT(rel_err(po, dpo.get()), 1e-5);
  // The three fake quantisers, values and stored codes/scales bit for bit.
  for (auto [kind, block] : {std::pair{FakeQuant::kFp8Pow2, 32}, {FakeQuant::kFp4Pow2, 32}, {FakeQuant::kFp4E4m3, 16}}) {
    auto v = randn(static_cast<size_t>(d.rows * d.hd), 13, 3.0f);
    const int64_t code_bytes = kind == FakeQuant::kFp8Pow2 ? d.rows * d.hd : d.rows * d.hd / 2;
    std::vector<uint8_t> codes(static_cast<size_t>(code_bytes)), scales(static_cast<size_t>(d.rows * d.hd / block));
    Dev<float> dv(v);
    Dev<uint8_t> dcodes(codes.size()), dscales(scales.size());
    b.cpu->fake_quant({.x = v.data(), .rows = d.rows, .dim = d.hd, .block = block, .kind = kind, .codes = codes.data(), .scales = scales.data()});
    b.gpu->fake_quant({.x = dv.p, .rows = d.rows, .dim = d.hd, .block = block, .kind = kind, .codes = dcodes.p, .scales = dscales.p});
    b.gpu->synchronize();
    auto gv = dv.get();
    EXPECT_EQ(std::memcmp(v.data(), gv.data(), v.size() * 4), 0) << static_cast<int>(kind);
    EXPECT_EQ(codes, dcodes.get()) << static_cast<int>(kind);
    EXPECT_EQ(scales, dscales.get()) << static_cast<int>(kind);
  }
}

TEST_P(Parity, HyperConnectionsAndEngramGate) {
  Backends b;
  const Dims d = GetParam();
  const int64_t hc = 4, mix = 24, R = d.rows;
  auto x = randn(static_cast<size_t>(R * hc * d.D), 14), fn = randn(static_cast<size_t>(mix * hc * d.D), 15, 0.02f),
       base = randn(static_cast<size_t>(mix), 16, 0.3f);
  std::vector<float> scale = {0.9f, 1.1f, 2.0f};
  std::vector<float> pre(static_cast<size_t>(R * hc)), post(pre.size()), comb(static_cast<size_t>(R * hc * hc));
  b.cpu->hc_mixes({.x = x.data(), .fn = fn.data(), .scale = scale.data(), .base = base.data(), .pre = pre.data(), .post = post.data(),
                   .comb = comb.data(), .rows = R, .hc = hc, .dim = d.D});
  Dev<float> dx(x), dfn(fn), dbase(base), dscale(scale), dpre(pre.size()), dpost(post.size()), dcomb(comb.size());
  b.gpu->hc_mixes({.x = dx.p, .fn = dfn.p, .scale = dscale.p, .base = dbase.p, .pre = dpre.p, .post = dpost.p, .comb = dcomb.p,
                   .rows = R, .hc = hc, .dim = d.D});
  b.gpu->synchronize();
  EXPECT_LT(rel_err(pre, dpre.get()), 1e-5);
  EXPECT_LT(rel_err(post, dpost.get()), 1e-5);
  EXPECT_LT(rel_err(comb, dcomb.get()), 1e-5);
  std::vector<float> y(static_cast<size_t>(R * d.D));
  b.cpu->hc_collapse({.x = x.data(), .pre = pre.data(), .y = y.data(), .rows = R, .hc = hc, .dim = d.D});
  Dev<float> dy(y.size());
  b.gpu->hc_collapse({.x = dx.p, .pre = dpre.p, .y = dy.p, .rows = R, .hc = hc, .dim = d.D});
  b.gpu->synchronize();
  EXPECT_LT(rel_err(y, dy.get()), 1e-5);
  {  // With the norm (one pass on the GPU): the bits of the collapse then rms_norm.
    const auto nw = randn(static_cast<size_t>(d.D), 19, 0.5f);
    Dev<float> dnw(nw), dy2(y.size()), dn2(y.size()), dn(y.size());
    b.gpu->hc_collapse({.x = dx.p, .pre = dpre.p, .y = dy2.p, .rows = R, .hc = hc, .dim = d.D, .norm_w = dnw.p, .norm_y = dn2.p,
                        .norm_eps = 1e-6f});
    b.gpu->rms_norm({.x = dy.p, .w = dnw.p, .y = dn.p, .rows = R, .dim = d.D, .eps = 1e-6f});
    b.gpu->synchronize();
    const auto a2 = dy2.get(), a1 = dy.get(), n2 = dn2.get(), n1 = dn.get();
    EXPECT_EQ(std::memcmp(a2.data(), a1.data(), a1.size() * 4), 0) << "the collapse with the norm";
    EXPECT_EQ(std::memcmp(n2.data(), n1.data(), n1.size() * 4), 0) << "the norm of the collapse";
  }
  b.cpu->hc_expand({.x = x.data(), .y = y.data(), .post = post.data(), .comb = comb.data(), .rows = R, .hc = hc, .dim = d.D});
  b.gpu->hc_expand({.x = dx.p, .y = dy.p, .post = dpost.p, .comb = dcomb.p, .rows = R, .hc = hc, .dim = d.D});
  auto kv = randn(static_cast<size_t>(R * (hc + 1) * d.D), 17), w = randn(static_cast<size_t>(hc * d.D), 18);
  Dev<float> dkv(kv), dw(w);
  b.cpu->engram_gate({.x = x.data(), .kv = kv.data(), .w = w.data(), .rows = R, .hc = hc, .dim = d.D});
  b.gpu->engram_gate({.x = dx.p, .kv = dkv.p, .w = dw.p, .rows = R, .hc = hc, .dim = d.D});
  b.gpu->synchronize();
  EXPECT_LT(rel_err(x, dx.get()), 1e-5);
}

// Stream counts other than the model's 4 (the kernels' runtime-count variants): the mixes, the
// collapse with its norm and the expansion against the CPU.
TEST(CudaHyperConnections, OtherStreamCounts) {
  Backends b;
  for (const int64_t hc : {int64_t{2}, int64_t{3}}) {
    const int64_t R = 5, D = 256, mix = (2 + hc) * hc;
    auto x = randn(static_cast<size_t>(R * hc * D), 30 + static_cast<uint32_t>(hc)),
         fn = randn(static_cast<size_t>(mix * hc * D), 31, 0.02f), base = randn(static_cast<size_t>(mix), 32, 0.3f),
         nw = randn(static_cast<size_t>(D), 33, 0.5f);
    std::vector<float> scale = {0.9f, 1.1f, 2.0f};
    std::vector<float> pre(static_cast<size_t>(R * hc)), post(pre.size()), comb(static_cast<size_t>(R * hc * hc));
    b.cpu->hc_mixes({.x = x.data(), .fn = fn.data(), .scale = scale.data(), .base = base.data(), .pre = pre.data(),
                     .post = post.data(), .comb = comb.data(), .rows = R, .hc = hc, .dim = D});
    Dev<float> dx(x), dfn(fn), dbase(base), dscale(scale), dnw(nw), dpre(pre.size()), dpost(post.size()), dcomb(comb.size());
    b.gpu->hc_mixes({.x = dx.p, .fn = dfn.p, .scale = dscale.p, .base = dbase.p, .pre = dpre.p, .post = dpost.p, .comb = dcomb.p,
                     .rows = R, .hc = hc, .dim = D});
    b.gpu->synchronize();
    EXPECT_LT(rel_err(pre, dpre.get()), 1e-5) << "hc " << hc;
    EXPECT_LT(rel_err(post, dpost.get()), 1e-5) << "hc " << hc;
    EXPECT_LT(rel_err(comb, dcomb.get()), 1e-5) << "hc " << hc;
    std::vector<float> y(static_cast<size_t>(R * D)), yn(y.size());
    b.cpu->hc_collapse({.x = x.data(), .pre = pre.data(), .y = y.data(), .rows = R, .hc = hc, .dim = D, .norm_w = nw.data(),
                        .norm_y = yn.data(), .norm_eps = 1e-6f});
    Dev<float> dy(y.size()), dyn(y.size());
    b.gpu->hc_collapse({.x = dx.p, .pre = dpre.p, .y = dy.p, .rows = R, .hc = hc, .dim = D, .norm_w = dnw.p, .norm_y = dyn.p,
                        .norm_eps = 1e-6f});
    b.gpu->synchronize();
    EXPECT_LT(rel_err(y, dy.get()), 1e-5) << "collapse, hc " << hc;
    EXPECT_LT(rel_err(yn, dyn.get()), 1e-5) << "collapse's norm, hc " << hc;
    b.cpu->hc_expand({.x = x.data(), .y = y.data(), .post = post.data(), .comb = comb.data(), .rows = R, .hc = hc, .dim = D});
    b.gpu->hc_expand({.x = dx.p, .y = dy.p, .post = dpost.p, .comb = dcomb.p, .rows = R, .hc = hc, .dim = D});
    b.gpu->synchronize();
    EXPECT_LT(rel_err(x, dx.get()), 1e-5) << "expand, hc " << hc;
  }
}

// mHC mixes of 1030 rows at the released width (4 rows per warp, every mix in one block, the
// slices in chunks through shared memory) against the CPU, and rows alone (a row per warp, 6 mixes per block, the fn slice staged in
// shared memory; and unstaged, fn at an address not 16-byte aligned) giving their bits in the
// batch.
TEST(CudaHyperConnections, MixesOfARowAloneAreItsBitsInABatch) {
  Backends b;
  const int64_t hc = 4, mix = 24, R = 1030, D = 5120;
  auto x = randn(static_cast<size_t>(R * hc * D), 24), fn = randn(static_cast<size_t>(mix * hc * D), 25, 0.02f),
       base = randn(static_cast<size_t>(mix), 26, 0.3f);
  std::vector<float> scale = {0.9f, 1.1f, 2.0f};
  std::vector<float> pre(static_cast<size_t>(R * hc)), post(pre.size()), comb(static_cast<size_t>(R * hc * hc));
  b.cpu->hc_mixes({.x = x.data(), .fn = fn.data(), .scale = scale.data(), .base = base.data(), .pre = pre.data(), .post = post.data(),
                   .comb = comb.data(), .rows = R, .hc = hc, .dim = D});
  std::vector<float> fn_shifted(fn.size() + 1, 0.0f);
  std::copy(fn.begin(), fn.end(), fn_shifted.begin() + 1);
  Dev<float> dx(x), dfn(fn), dfn1(fn_shifted), dbase(base), dscale(scale), dpre(pre.size()), dpost(post.size()), dcomb(comb.size());
  b.gpu->hc_mixes({.x = dx.p, .fn = dfn.p, .scale = dscale.p, .base = dbase.p, .pre = dpre.p, .post = dpost.p, .comb = dcomb.p,
                   .rows = R, .hc = hc, .dim = D});
  b.gpu->synchronize();
  const auto all_pre = dpre.get(), all_post = dpost.get(), all_comb = dcomb.get();
  EXPECT_LT(rel_err(pre, all_pre), 1e-5);
  EXPECT_LT(rel_err(post, all_post), 1e-5);
  EXPECT_LT(rel_err(comb, all_comb), 1e-5);
  // Rows [r0, r0 + n) of x (fn as given) in one call: the bits of those rows in the call above.
  auto same_bits = [&](int64_t r0, int64_t n, const float* f, const std::string& what) {
    Dev<float> p1(static_cast<size_t>(n * hc)), q1(p1.n), c1(static_cast<size_t>(n * hc * hc));
    b.gpu->hc_mixes({.x = dx.p + r0 * hc * D, .fn = f, .scale = dscale.p, .base = dbase.p, .pre = p1.p, .post = q1.p,
                     .comb = c1.p, .rows = n, .hc = hc, .dim = D});
    b.gpu->synchronize();
    EXPECT_EQ(0, std::memcmp(p1.get().data(), all_pre.data() + r0 * hc, p1.n * sizeof(float))) << what;
    EXPECT_EQ(0, std::memcmp(q1.get().data(), all_post.data() + r0 * hc, q1.n * sizeof(float))) << what;
    EXPECT_EQ(0, std::memcmp(c1.get().data(), all_comb.data() + r0 * hc * hc, c1.n * sizeof(float))) << what;
  };
  same_bits(0, 40, dfn.p, "rows 0..39 (a row per warp, staged; more than 48 KB of shared memory)");
  // Row counts whose staging grows past 48 KB after a smaller launch over it (7 rows, then 8:
  // 3 mixes per block), the 6-mix staging, and chunks from 160 rows.
  for (int64_t n : {int64_t{2}, int64_t{7}, int64_t{8}, int64_t{100}, int64_t{200}})
    same_bits(3, n, dfn.p, std::to_string(n) + " rows from row 3");
  same_bits(0, R, dfn1.p + 1, "all rows, fn not 16-byte aligned (from global memory, not in chunks through shared memory)");
  for (int64_t r : {int64_t{0}, int64_t{517}, R - 1}) {
    same_bits(r, 1, dfn.p, "row " + std::to_string(r) + " staged");
    same_bits(r, 1, dfn1.p + 1, "row " + std::to_string(r) + " unstaged");
  }
}

TEST_P(Parity, AttentionIndexerTopkRouter) {
  Backends b;
  const Dims d = GetParam();
  const int64_t S = d.rows, tw = 20, tc = 24, W = 16;
  auto q = randn(static_cast<size_t>(S * d.H * d.hd), 19, 0.2f), win = randn(static_cast<size_t>(tw * d.hd), 20, 0.2f),
       comp = randn(static_cast<size_t>(tc * d.hd), 21, 0.2f), sink = randn(static_cast<size_t>(d.H), 22);
  std::vector<int64_t> qpos(static_cast<size_t>(S)), wpos(static_cast<size_t>(tw));
  for (int64_t i = 0; i < S; ++i) qpos[static_cast<size_t>(i)] = tw - S + i;
  for (int64_t i = 0; i < tw; ++i) wpos[static_cast<size_t>(i)] = i;
  std::vector<uint8_t> sel(static_cast<size_t>(S * tc));
  for (size_t i = 0; i < sel.size(); ++i) sel[i] = (i * 7) % 3 == 0;
  std::vector<float> out(q.size());
  const float sc = 1.0f / std::sqrt(static_cast<float>(d.hd));
  b.cpu->attention({.q = q.data(), .q_pos = qpos.data(), .win = win.data(), .win_pos = wpos.data(), .comp = comp.data(),
                    .comp_sel = sel.data(), .sink = sink.data(), .out = out.data(), .s = S, .heads = d.H, .head_dim = d.hd,
                    .t_win = tw, .t_comp = tc, .window = W, .scale = sc});
  Dev<float> dq(q), dwin(win), dcomp(comp), dsink(sink), dout(out.size());
  Dev<int64_t> dqpos(qpos), dwpos(wpos);
  Dev<uint8_t> dsel(sel);
  b.gpu->attention({.q = dq.p, .q_pos = dqpos.p, .win = dwin.p, .win_pos = dwpos.p, .comp = dcomp.p, .comp_sel = dsel.p,
                    .sink = dsink.p, .out = dout.p, .s = S, .heads = d.H, .head_dim = d.hd, .t_win = tw, .t_comp = tc,
                    .window = W, .scale = sc});
  b.gpu->synchronize();
  EXPECT_LT(rel_err(out, dout.get()), 1e-5);
  // Indexer scores -> candidate blocks -> top-k.
  const int64_t T = 40;
  auto iq = randn(static_cast<size_t>(S * d.idx_heads * d.idx_dim), 23), ik = randn(static_cast<size_t>(T * d.idx_dim), 24),
       iw = randn(static_cast<size_t>(S * d.idx_heads), 25);
  std::vector<int64_t> ipos(static_cast<size_t>(S));
  for (int64_t i = 0; i < S; ++i) ipos[static_cast<size_t>(i)] = 40 + 11 * i;
  std::vector<float> scores(static_cast<size_t>(S * T));
  b.cpu->indexer_scores({.q = iq.data(), .k = ik.data(), .w = iw.data(), .q_pos = ipos.data(), .scores = scores.data(), .s = S,
                         .heads = d.idx_heads, .dim = d.idx_dim, .t = T, .ratio = 2, .score_scale = 0.1f});
  Dev<float> diq(iq), dik(ik), diw(iw), dscores(scores.size());
  Dev<int64_t> dipos(ipos);
  b.gpu->indexer_scores({.q = diq.p, .k = dik.p, .w = diw.p, .q_pos = dipos.p, .scores = dscores.p, .s = S, .heads = d.idx_heads,
                         .dim = d.idx_dim, .t = T, .ratio = 2, .score_scale = 0.1f});
  b.gpu->synchronize();
  EXPECT_LT(rel_err(scores, dscores.get()), 1e-5);
  std::vector<uint8_t> keep(static_cast<size_t>(S * T)), topk(keep.size());
  b.cpu->candidate_blocks({.scores = scores.data(), .q_pos = ipos.data(), .keep = keep.data(), .s = S, .t = T, .ratio = 2,
                           .block_size = 4, .topk_blocks = 3});
  b.cpu->topk_mask({.scores = scores.data(), .restrict_to = keep.data(), .selected = topk.data(), .s = S, .t = T, .k = 6});
  Dev<float> dsc_cpu(scores);  // same inputs for the selections
  Dev<uint8_t> dkeep(keep.size()), dtopk(topk.size());
  b.gpu->candidate_blocks({.scores = dsc_cpu.p, .q_pos = dipos.p, .keep = dkeep.p, .s = S, .t = T, .ratio = 2, .block_size = 4,
                           .topk_blocks = 3});
  b.gpu->topk_mask({.scores = dsc_cpu.p, .restrict_to = dkeep.p, .selected = dtopk.p, .s = S, .t = T, .k = 6});
  b.gpu->synchronize();
  EXPECT_EQ(keep, dkeep.get());
  EXPECT_EQ(topk, dtopk.get());
  // Router.
  auto z = randn(static_cast<size_t>(S * d.experts), 26), bias = randn(static_cast<size_t>(d.experts), 27, 0.1f);
  std::vector<int32_t> ids(static_cast<size_t>(S * d.topk));
  std::vector<float> wts(ids.size());
  b.cpu->router({.logits = z.data(), .bias = bias.data(), .ids = ids.data(), .weights = wts.data(), .rows = S, .experts = d.experts,
                 .top_k = d.topk, .temp = 1.3f, .routed_scaling = 1.5f, .normalize = true});
  Dev<float> dz(z), dbias(bias), dwts(wts.size());
  Dev<int32_t> dids(ids.size());
  b.gpu->router({.logits = dz.p, .bias = dbias.p, .ids = dids.p, .weights = dwts.p, .rows = S, .experts = d.experts,
                 .top_k = d.topk, .temp = 1.3f, .routed_scaling = 1.5f, .normalize = true});
  b.gpu->synchronize();
  EXPECT_EQ(ids, dids.get());
  EXPECT_LT(rel_err(wts, dwts.get()), 1e-5);
}

// ---- Gathers, scale, MoE combine, packed dequantisation, memory: bitwise parity. ----

uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}
float from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// Bitwise equality of two float arrays; names the first difference.
::testing::AssertionResult same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << "sizes " << a.size() << " vs " << b.size();
  for (size_t i = 0; i < a.size(); ++i)
    if (bits(a[i]) != bits(b[i])) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "%.9g (0x%08X) vs %.9g (0x%08X)", static_cast<double>(a[i]), bits(a[i]), static_cast<double>(b[i]),
                    bits(b[i]));
      return ::testing::AssertionFailure() << "element " << i << ": " << buf;
    }
  return ::testing::AssertionSuccess();
}

// Bytes of the values and of the scales of a stored weight matrix.
int64_t value_bytes(const WeightView& w) {
  switch (w.format) {
    case WeightFormat::kF32: return w.rows * w.cols * 4;
    case WeightFormat::kBF16: return w.rows * w.cols * 2;
    case WeightFormat::kFP8Block32:
    case WeightFormat::kFP8Row32: return w.rows * w.cols;
    case WeightFormat::kMXFP4: return w.rows * ((w.cols + 1) / 2);
  }
  return 0;
}
int64_t scale_bytes(const WeightView& w) {
  const int64_t sc_cols = (w.cols + 31) / 32;
  switch (w.format) {
    case WeightFormat::kFP8Block32: return ((w.rows + 31) / 32) * sc_cols;
    case WeightFormat::kFP8Row32:
    case WeightFormat::kMXFP4: return w.rows * sc_cols;
    default: return 0;
  }
}

// A host weight matrix copied to the device (the view points at device memory).
struct DevWeight {
  std::unique_ptr<Dev<uint8_t>> data, scale;
  WeightView view;
  explicit DevWeight(const WeightView& w) : view(w) {
    EXPECT_EQ(value_bytes(w) + scale_bytes(w), weight_bytes(w));
    const auto* d = static_cast<const uint8_t*>(w.data);
    data = std::make_unique<Dev<uint8_t>>(std::vector<uint8_t>(d, d + value_bytes(w)));
    view.data = data->p;
    if (scale_bytes(w)) {
      scale = std::make_unique<Dev<uint8_t>>(std::vector<uint8_t>(w.scale, w.scale + scale_bytes(w)));
      view.scale = scale->p;
    }
  }
};

const WeightFormat kAllFormats[] = {WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kFP8Block32, WeightFormat::kFP8Row32,
                                    WeightFormat::kMXFP4};

// One gather checked three ways: CPU backend, dequant_row directly, CUDA backend, all bitwise.
void check_gather_weight_rows(Backends& b, const WeightView& w, const std::vector<int64_t>& ids, int64_t copies, int64_t ldo,
                              const std::string& what) {
  const int64_t rows = static_cast<int64_t>(ids.size()), stride = ldo ? ldo : copies * w.cols;
  const std::vector<float> init(static_cast<size_t>(rows * stride), -7.25f);  // padding must stay untouched
  std::vector<float> cpu = init, expect = init;
  b.cpu->gather_weight_rows({.w = w, .ids = ids.data(), .out = cpu.data(), .rows = rows, .copies = copies, .ldo = ldo});
  std::vector<float> row(static_cast<size_t>(w.cols));
  for (int64_t i = 0; i < rows; ++i) {
    dequant_row(w, ids[static_cast<size_t>(i)], row.data());
    for (int64_t c = 0; c < copies; ++c) std::copy(row.begin(), row.end(), expect.begin() + i * stride + c * w.cols);
  }
  DevWeight dw(w);
  Dev<int64_t> dids(ids);
  Dev<float> dout(init);
  b.gpu->gather_weight_rows({.w = dw.view, .ids = dids.p, .out = dout.p, .rows = rows, .copies = copies, .ldo = ldo});
  b.gpu->synchronize();
  const auto gpu = dout.get();
  EXPECT_TRUE(same_bits(expect, cpu)) << "CPU backend vs dequant_row, " << what;
  EXPECT_TRUE(same_bits(expect, gpu)) << "CUDA vs dequant_row, " << what;
}

TEST_P(Parity, GatherWeightRowsAllFormats) {
  Backends b;
  const Dims d = GetParam();
  const int64_t Rw = 70;  // three 32-row scale blocks, the last partial
  for (int64_t cols : {int64_t{77}, d.D}) {  // 77: odd, partial 32-channel scale block
    std::mt19937 g(static_cast<uint32_t>(cols));
    std::uniform_int_distribution<int64_t> pick(0, Rw - 1);
    std::vector<int64_t> ids(13);
    for (auto& id : ids) id = pick(g);
    ids[0] = Rw - 1;
    ids[1] = 0;
    ids[2] = ids[5];  // a repeat
    auto wf = randn(static_cast<size_t>(Rw * cols), 30, 0.3f);
    for (size_t i = 0; i < wf.size(); i += 97) wf[i] *= 1e5f;  // spread the block scales
    model::Weights owner;
    for (auto fmt : kAllFormats) {
      // Quantised from floats, as a checkpoint.
      const WeightView q = model::quantize_matrix(WeightView::f32(wf.data(), Rw, cols), fmt, owner);
      // Raw random codes: NaN e4m3 codes, subnormals, every e2m1 code, extreme scales
      // (ue8m0 0..254; 255 would make NaN x NaN, whose payload the CPU does not fix).
      WeightView raw = q;
      auto vals = random_bytes(static_cast<size_t>(value_bytes(q)), 31 + static_cast<uint32_t>(fmt));
      auto scs = random_bytes(static_cast<size_t>(std::max<int64_t>(scale_bytes(q), 1)), 41 + static_cast<uint32_t>(fmt), 0, 254);
      raw.data = vals.data();
      raw.scale = scale_bytes(q) ? scs.data() : nullptr;
      for (auto [src, name] : {std::pair{q, "quantised"}, std::pair{raw, "raw"}})
        for (auto [copies, pad] : {std::pair<int64_t, int64_t>{1, 0}, {4, 0}, {1, 5}, {4, 3}}) {
          const int64_t ldo = pad ? copies * cols + pad : 0;
          check_gather_weight_rows(b, src, ids, copies, ldo,
                                   std::string(name) + " format " + std::to_string(static_cast<int>(fmt)) + " cols " +
                                       std::to_string(cols) + " copies " + std::to_string(copies) + " ldo " + std::to_string(ldo));
        }
    }
  }
}

TEST_P(Parity, ScaleAndGatherRows) {
  Backends b;
  const Dims d = GetParam();
  auto x = randn(static_cast<size_t>(d.rows * d.D + 5), 50, 3.0f);
  // Specials: ±0, ±inf, subnormals, quiet NaNs with payloads (the NaN operand propagates).
  const uint32_t specials[] = {0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u, 0x00000001u, 0x80123456u, 0x7FC01234u, 0xFFC00000u,
                               0x7F7FFFFFu};
  for (size_t i = 0; i < std::size(specials); ++i) x[i * 3] = from_bits(specials[i]);
  for (float s : {-0.3712f, 1e30f, 0x1p-130f}) {
    std::vector<float> cpu = x;
    b.cpu->scale({.x = cpu.data(), .n = static_cast<int64_t>(cpu.size()), .s = s});
    Dev<float> dx(x);
    b.gpu->scale({.x = dx.p, .n = static_cast<int64_t>(x.size()), .s = s});
    b.gpu->synchronize();
    EXPECT_TRUE(same_bits(cpu, dx.get())) << "scale " << s;
  }
  const int64_t src_rows = 40, width = d.D + 3, rows = 3 * d.rows;
  auto src = randn(static_cast<size_t>(src_rows * width), 51);
  src[7] = from_bits(0x7FA00001u);  // a signalling NaN is copied as is
  std::mt19937 g(52);
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(src_rows - 1));
  std::vector<int32_t> idx(static_cast<size_t>(rows));
  for (auto& i : idx) i = pick(g);
  idx[0] = 0;
  idx[1] = static_cast<int32_t>(src_rows - 1);
  std::vector<float> cpu(static_cast<size_t>(rows * width));
  b.cpu->gather_rows({.src = src.data(), .idx = idx.data(), .dst = cpu.data(), .rows = rows, .width = width});
  Dev<float> dsrc(src), ddst(cpu.size());
  Dev<int32_t> didx(idx);
  b.gpu->gather_rows({.src = dsrc.p, .idx = didx.p, .dst = ddst.p, .rows = rows, .width = width});
  b.gpu->synchronize();
  const auto gpu = ddst.get();
  EXPECT_TRUE(same_bits(cpu, gpu));
  for (int64_t i = 0; i < rows; ++i)  // and the CPU result itself
    EXPECT_EQ(std::memcmp(cpu.data() + i * width, src.data() + idx[static_cast<size_t>(i)] * width, static_cast<size_t>(width) * 4), 0);
}

TEST_P(Parity, MoeCombine) {
  Backends b;
  const Dims d = GetParam();
  for (int64_t K : {d.topk, int64_t{16}}) {
    const int64_t n = d.rows, D = d.D, E = std::max<int64_t>(d.experts, 32);
    std::mt19937 g(static_cast<uint32_t>(60 + K));
    std::vector<int32_t> ids(static_cast<size_t>(n * K)), slot_row(ids.size());
    std::vector<int32_t> experts(static_cast<size_t>(E));
    std::iota(experts.begin(), experts.end(), 0);
    for (int64_t t = 0; t < n; ++t) {  // K distinct experts per token, in no particular order
      std::shuffle(experts.begin(), experts.end(), g);
      std::copy(experts.begin(), experts.begin() + K, ids.begin() + t * K);
    }
    std::iota(slot_row.begin(), slot_row.end(), 0);
    std::shuffle(slot_row.begin(), slot_row.end(), g);
    // Wide dynamic range so that a different summation order gives different bits.
    auto eo = randn(static_cast<size_t>(n * K * D), 61), mag = randn(eo.size(), 62, 4.0f);
    for (size_t i = 0; i < eo.size(); ++i) eo[i] *= std::exp(mag[i]);
    auto shared = randn(static_cast<size_t>(n * D), 63);
    Dev<float> deo(eo), dshared(shared);
    Dev<int32_t> dids(ids), dslot(slot_row);
    for (bool with_shared : {true, false}) {
      std::vector<float> cpu(static_cast<size_t>(n * D));
      b.cpu->moe_combine({.expert_out = eo.data(), .slot_row = slot_row.data(), .ids = ids.data(),
                          .shared = with_shared ? shared.data() : nullptr, .y = cpu.data(), .n = n, .k = K, .dim = D});
      Dev<float> dy(cpu.size());
      b.gpu->moe_combine({.expert_out = deo.p, .slot_row = dslot.p, .ids = dids.p, .shared = with_shared ? dshared.p : nullptr,
                          .y = dy.p, .n = n, .k = K, .dim = D});
      b.gpu->synchronize();
      EXPECT_TRUE(same_bits(cpu, dy.get())) << "K " << K << " shared " << with_shared;
      if (K >= 3) {  // the data can tell the orders apart: slot order gives other bits somewhere
        std::vector<float> slot_order(cpu.size(), 0.0f);
        for (int64_t t = 0; t < n; ++t)
          for (int64_t k = 0; k < K; ++k)
            for (int64_t c = 0; c < D; ++c) slot_order[t * D + c] += eo[slot_row[t * K + k] * D + c];
        if (with_shared)
          for (size_t i = 0; i < slot_order.size(); ++i) slot_order[i] += shared[i];
        EXPECT_FALSE(same_bits(cpu, slot_order)) << "test data insensitive to the summation order, K " << K;
      }
    }
  }
}

TEST_P(Parity, DequantPacked) {
  Backends b;
  const Dims d = GetParam();
  const int64_t rows = d.rows, dim = d.hd;
  for (auto [kind, block] : {std::pair{FakeQuant::kFp8Pow2, int64_t{32}}, {FakeQuant::kFp4Pow2, int64_t{32}}, {FakeQuant::kFp4E4m3, int64_t{16}}}) {
    const bool fp8 = kind == FakeQuant::kFp8Pow2;
    const size_t code_bytes = static_cast<size_t>(fp8 ? rows * dim : rows * dim / 2), scale_n = static_cast<size_t>(rows * dim / block);
    // Codes from the fake quantiser (wide range of block scales), then raw random codes.
    auto v = randn(static_cast<size_t>(rows * dim), 70, 3.0f), mag = randn(v.size() / static_cast<size_t>(block), 71, 6.0f);
    for (size_t i = 0; i < v.size(); ++i) v[i] *= std::exp(mag[i / static_cast<size_t>(block)]);
    std::vector<uint8_t> codes(code_bytes), scales(scale_n);
    b.cpu->fake_quant({.x = v.data(), .rows = rows, .dim = dim, .block = block, .kind = kind, .codes = codes.data(), .scales = scales.data()});
    // ue8m0 scales stop at 254 (255 = NaN against a NaN e4m3 code is payload-order dependent on the CPU).
    const auto raw_codes = random_bytes(code_bytes, 72), raw_scales = random_bytes(scale_n, 73, 0, kind == FakeQuant::kFp4E4m3 ? 255 : 254);
    for (bool raw : {false, true}) {
      const auto& c = raw ? raw_codes : codes;
      const auto& s = raw ? raw_scales : scales;
      std::vector<float> expect(v.size()), cpu(v.size(), 1.5f);
      dequant_fake_quant(kind, c.data(), s.data(), rows, dim, block, expect.data());
      if (!raw) {
        EXPECT_TRUE(same_bits(v, expect)) << "fake_quant values vs their codes, kind " << static_cast<int>(kind);
      }
      b.cpu->dequant_packed({.kind = kind, .codes = c.data(), .scales = s.data(), .out = cpu.data(), .rows = rows, .dim = dim, .block = block});
      Dev<uint8_t> dc(c), ds(s);
      Dev<float> dout(v.size());
      b.gpu->dequant_packed({.kind = kind, .codes = dc.p, .scales = ds.p, .out = dout.p, .rows = rows, .dim = dim, .block = block});
      b.gpu->synchronize();
      EXPECT_TRUE(same_bits(expect, cpu)) << "CPU backend, kind " << static_cast<int>(kind) << " raw " << raw;
      EXPECT_TRUE(same_bits(expect, dout.get())) << "CUDA, kind " << static_cast<int>(kind) << " raw " << raw;
    }
  }
}

// The memory API: stream-ordered alloc/release, uploads through the pinned staging ring
// (sources reused at once, more bytes than the ring, one upload larger than the ring), copy,
// zero, ordering with ops, download.
TEST(CudaSelect, GreedyDrawIsTheCpusArgmaxRule) {
  // Vocabulary-wide rows (the released 129280) with planted ties, NaN and all -inf rows.
  Backends b;
  const int64_t rows = 6, V = 129280;
  auto x = randn(static_cast<size_t>(rows * V), 90);
  const float inf = INFINITY, nan = NAN;
  x[0 * V + 70000] = x[0 * V + 90000] = 9.0f;     // tie across threads: the lower id
  x[1 * V + 5] = nan;                               // NaN ignored
  x[1 * V + 129279] = 8.0f;
  for (int64_t c = 0; c < V; ++c) x[2 * V + c] = c % 3 ? -inf : nan;  // nothing finite: 0
  x[3 * V + 17] = inf;                              // +inf wins, the first of two
  x[3 * V + 18] = inf;
  x[4 * V + 129279] = 1e30f;                        // the last id
  x[5 * V + 2019] = x[5 * V + 2020] = 7.0f;         // a tie across the split greedy path's slices
  std::vector<int32_t> cpu(rows);
  b.cpu->sample_rows({.x = x.data(), .ids = cpu.data(), .rows = rows, .cols = V});
  EXPECT_EQ(cpu[0], 70000);
  EXPECT_EQ(cpu[1], 129279);
  EXPECT_EQ(cpu[2], 0);
  EXPECT_EQ(cpu[3], 17);
  EXPECT_EQ(cpu[4], 129279);
  EXPECT_EQ(cpu[5], 2019);
  Dev<float> dx(x);
  Dev<int32_t> dids(static_cast<size_t>(rows)), one(1);
  b.gpu->sample_rows({.x = dx.p, .ids = dids.p, .rows = rows, .cols = V});
  b.gpu->sample_rows({.x = dx.p, .ids = one.p, .rows = 1, .cols = V});  // (batch-1 decode)
  b.gpu->synchronize();
  EXPECT_EQ(dids.get(), cpu);
  EXPECT_EQ(one.get()[0], cpu[0]);
  // Rows enough for one block a row (more than the split path takes): the same ids.
  const int64_t many = 40;
  std::vector<float> xm(static_cast<size_t>(many * V));
  for (int64_t r = 0; r < many; ++r) std::copy(x.begin() + (r % rows) * V, x.begin() + (r % rows + 1) * V, xm.begin() + r * V);
  Dev<float> dxm(xm);
  Dev<int32_t> dm(static_cast<size_t>(many));
  b.gpu->sample_rows({.x = dxm.p, .ids = dm.p, .rows = many, .cols = V});
  b.gpu->synchronize();
  const auto got = dm.get();
  for (int64_t r = 0; r < many; ++r) EXPECT_EQ(got[static_cast<size_t>(r)], cpu[static_cast<size_t>(r % rows)]) << "row " << r;
}

TEST(CudaSelect, DrawsAreTheCpuBackendsTokens) {
  // Every row kind of draw_cases.h at the released vocabulary under the whole params grid: the
  // GPU's tokens equal the CPU backend's (which are the sampler's, test_backend_draw.cpp), and so
  // do the requested logprobs' ids (their values within 1e-6: fp64 sums in another order).
  // A row's token is also the same alone as in its batch.
  Backends b;
  const int64_t rows = 16, V = 129280;
  const auto x = deepinfer::testing::draw_rows(rows, V, 5);
  const auto grid = deepinfer::testing::draw_param_grid();
  Dev<float> dx(x);
  int64_t checked = 0, differ = 0, with_logprobs = 0;
  constexpr int64_t kLp = 20;
  for (size_t c0 = 0; c0 < grid.size(); c0 += 3) {
    std::vector<DrawParams> dp(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      const size_t c = (c0 + static_cast<size_t>(r)) % grid.size();
      dp[static_cast<size_t>(r)] = deepinfer::testing::draw_case(grid[c], c);
    }
    std::vector<int32_t> cpu(static_cast<size_t>(rows)), cpu_top(static_cast<size_t>(rows * kLp));
    std::vector<float> cpu_lp(static_cast<size_t>(rows)), cpu_top_lp(static_cast<size_t>(rows * kLp));
    b.cpu->sample_rows({.x = x.data(), .params = dp.data(), .ids = cpu.data(), .rows = rows, .cols = V, .logprob = cpu_lp.data(),
                        .top_ids = cpu_top.data(), .top_logprobs = cpu_top_lp.data(), .max_logprobs = kLp});
    Dev<DrawParams> dparams(dp);
    Dev<int32_t> dids(static_cast<size_t>(rows)), one(1), dtop(static_cast<size_t>(rows * kLp));
    Dev<float> dlp(static_cast<size_t>(rows)), dtop_lp(static_cast<size_t>(rows * kLp));
    b.gpu->sample_rows({.x = dx.p, .params = dparams.p, .ids = dids.p, .rows = rows, .cols = V, .logprob = dlp.p,
                        .top_ids = dtop.p, .top_logprobs = dtop_lp.p, .max_logprobs = kLp});
    const int64_t r1 = static_cast<int64_t>(c0 / 3) % rows;  // one row alone
    b.gpu->sample_rows({.x = dx.p + r1 * V, .params = dparams.p + r1, .ids = one.p, .rows = 1, .cols = V});
    b.gpu->synchronize();
    const auto gpu = dids.get();
    for (int64_t r = 0; r < rows; ++r) {
      const size_t c = (c0 + static_cast<size_t>(r)) % grid.size();
      ++checked;
      if (gpu[static_cast<size_t>(r)] != cpu[static_cast<size_t>(r)]) {
        ++differ;
        ADD_FAILURE() << "row " << r << " (kind " << r % 8 << "), case " << c << ": T " << grid[c].temperature
                      << " top_k " << grid[c].top_k << " top_p " << grid[c].top_p << " min_p " << grid[c].min_p
                      << ": GPU " << gpu[static_cast<size_t>(r)] << ", CPU " << cpu[static_cast<size_t>(r)];
      }
    }
    EXPECT_EQ(one.get()[0], gpu[static_cast<size_t>(r1)]) << "row " << r1 << " alone";
    const auto g_lp = dlp.get(), g_top_lp = dtop_lp.get();
    const auto g_top = dtop.get();
    for (int64_t r = 0; r < rows; ++r) {
      if (dp[static_cast<size_t>(r)].logprobs < 0) continue;
      ++with_logprobs;
      const auto i = static_cast<size_t>(r);
      if (std::isinf(cpu_lp[i])) EXPECT_EQ(g_lp[i], cpu_lp[i]) << "row " << r;
      else EXPECT_NEAR(g_lp[i], cpu_lp[i], 1e-6) << "row " << r;
      for (int64_t j = 0; j < kLp; ++j) {
        const auto at = static_cast<size_t>(r * kLp + j);
        EXPECT_EQ(g_top[at], cpu_top[at]) << "row " << r << " top " << j;
        if (std::isinf(cpu_top_lp[at])) EXPECT_EQ(g_top_lp[at], cpu_top_lp[at]) << "row " << r << " top " << j;
        else EXPECT_NEAR(g_top_lp[at], cpu_top_lp[at], 1e-6) << "row " << r << " top " << j;
      }
    }
  }
  std::printf("[draws] %lld rows drawn, %lld differ from the CPU backend; %lld with logprobs\n", static_cast<long long>(checked),
              static_cast<long long>(differ), static_cast<long long>(with_logprobs));
  EXPECT_GT(with_logprobs, 0);
}

TEST(CudaMemory, RoundTrip) {
  auto gpu = make_cuda_backend(0);
  EXPECT_FALSE(gpu->host_memory());
  gpu->release(nullptr);
  gpu->release(gpu->alloc(0));
  gpu->upload(nullptr, nullptr, 0);
  gpu->download(nullptr, nullptr, 0);
  gpu->copy(nullptr, nullptr, 0);
  gpu->zero(nullptr, 0);

  std::mt19937 g(80);
  // Many small uploads (odd size, more bytes in all than the 8 MiB initial ring), each from a
  // host buffer that is overwritten and freed right after the call.
  auto small_round = [&](int64_t count, int64_t size) {
    auto* dev = static_cast<uint8_t*>(gpu->alloc(count * size));
    std::vector<uint8_t> expect(static_cast<size_t>(count * size));
    for (int64_t i = 0; i < count; ++i) {
      auto src = std::make_unique<std::vector<uint8_t>>(static_cast<size_t>(size));
      for (auto& x : *src) x = static_cast<uint8_t>(g());
      std::copy(src->begin(), src->end(), expect.begin() + i * size);
      gpu->upload(dev + i * size, src->data(), size);
      std::fill(src->begin(), src->end(), static_cast<uint8_t>(0xAB));
      src.reset();
    }
    std::vector<uint8_t> back(expect.size(), 0);
    gpu->download(back.data(), dev, static_cast<int64_t>(back.size()));
    gpu->release(dev);
    return back == expect;
  };
  EXPECT_TRUE(small_round(3000, 4099));  // ~12 MiB

  // One upload larger than the ring, then copy and zero.
  const int64_t big = (int64_t{20} << 20) + 13;
  std::vector<uint8_t> host(static_cast<size_t>(big));
  for (auto& x : host) x = static_cast<uint8_t>(g());
  auto* a = static_cast<uint8_t*>(gpu->alloc(big));
  auto* c = static_cast<uint8_t*>(gpu->alloc(big));
  {
    std::vector<uint8_t> tmp = host;
    gpu->upload(a, tmp.data(), big);
    std::fill(tmp.begin(), tmp.end(), static_cast<uint8_t>(0));
  }
  gpu->copy(c, a, big);
  gpu->zero(c + 1001, 777);
  std::vector<uint8_t> back_a(host.size()), back_c(host.size());
  gpu->download(back_a.data(), a, big);
  gpu->download(back_c.data(), c, big);
  EXPECT_TRUE(back_a == host);
  std::vector<uint8_t> expect_c = host;
  for (size_t i = 1001; i < 1001 + 777; ++i) expect_c[i] = 0;
  EXPECT_TRUE(back_c == expect_c);
  gpu->release(a);
  gpu->release(c);

  // After the ring grew: small uploads that wrap it again (~24 MiB).
  EXPECT_TRUE(small_round(6000, 4099));

  // Uploads, ops and downloads stay in stream order, without an explicit synchronize.
  const int64_t n = 1000;
  auto* x = static_cast<float*>(gpu->alloc(n * 4));
  std::vector<float> expect(static_cast<size_t>(n));
  for (int round = 0; round < 5; ++round) {
    std::vector<float> v = randn(static_cast<size_t>(n), 81 + static_cast<uint32_t>(round));
    gpu->upload(x, v.data(), n * 4);
    gpu->scale({.x = x, .n = n, .s = 2.0f});
    for (int64_t i = 0; i < n; ++i) expect[static_cast<size_t>(i)] = v[static_cast<size_t>(i)] * 2.0f;
    std::fill(v.begin(), v.end(), 0.0f);
  }
  std::vector<float> back(static_cast<size_t>(n));
  gpu->download(back.data(), x, n * 4);
  EXPECT_TRUE(same_bits(expect, back));
  gpu->release(x);
  gpu->synchronize();
}

// ---- Prefill shapes of the three tiled / block-per-row kernels (attention, indexer scores,
// top-k selections), with the fixture shapes and ragged ones next to them. ----

// Max |a - b| over the finite entries of a, relative to the largest finite |a|; infinite
// entries must match exactly (else +inf).
INSTANTIATE_TEST_SUITE_P(Shapes, Parity, ::testing::Values(kFixture, kReleased),
                         [](const ::testing::TestParamInfo<Dims>& p) { return p.param.D == 64 ? std::string("fixture") : std::string("released"); });

}  // namespace
