// CUDA backend parity: every kernels::Backend op on random inputs, CPU reference vs CUDA, at
// the fixture shapes and at the released V4.1-Flash dims. Built with DEEPINFER_CUDA=ON only
// (run on the device machine by scripts/device_run.sh).
#include <gtest/gtest.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/backend.h"
#include "model/quantize.h"

using namespace deepinfer;
using namespace deepinfer::kernels;

namespace {

template <typename T>
struct Dev {
  T* p = nullptr;
  size_t n = 0;
  explicit Dev(const std::vector<T>& h) : n(h.size()) {
    cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T));
    if (n) cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice);
  }
  explicit Dev(size_t count) : n(count) {
    cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T));
    cudaMemset(p, 0, std::max<size_t>(n, 1) * sizeof(T));
  }
  ~Dev() { cudaFree(p); }
  std::vector<T> get() const {
    std::vector<T> h(n);
    if (n) cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost);
    return h;
  }
};

std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (auto& x : v) x = scale * d(g);
  return v;
}

double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0, d = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    m = std::max(m, static_cast<double>(std::fabs(a[i])));
    double e = std::fabs(static_cast<double>(a[i]) - b[i]);
    if (std::isnan(a[i]) != std::isnan(b[i])) e = INFINITY;
    if (!std::isnan(a[i])) d = std::max(d, e);
  }
  return m > 0 ? d / m : d;
}

struct Backends {
  std::unique_ptr<Backend> cpu = make_cpu_backend(0), gpu = make_cuda_backend(0);
};

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
  b.cpu->hc_expand({.x = x.data(), .y = y.data(), .post = post.data(), .comb = comb.data(), .rows = R, .hc = hc, .dim = d.D});
  b.gpu->hc_expand({.x = dx.p, .y = dy.p, .post = dpost.p, .comb = dcomb.p, .rows = R, .hc = hc, .dim = d.D});
  auto kv = randn(static_cast<size_t>(R * (hc + 1) * d.D), 17), w = randn(static_cast<size_t>(hc * d.D), 18);
  Dev<float> dkv(kv), dw(w);
  b.cpu->engram_gate({.x = x.data(), .kv = kv.data(), .w = w.data(), .rows = R, .hc = hc, .dim = d.D});
  b.gpu->engram_gate({.x = dx.p, .kv = dkv.p, .w = dw.p, .rows = R, .hc = hc, .dim = d.D});
  b.gpu->synchronize();
  EXPECT_LT(rel_err(x, dx.get()), 1e-5);
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

INSTANTIATE_TEST_SUITE_P(Shapes, Parity, ::testing::Values(kFixture, kReleased),
                         [](const ::testing::TestParamInfo<Dims>& p) { return p.param.D == 64 ? std::string("fixture") : std::string("released"); });

}  // namespace
