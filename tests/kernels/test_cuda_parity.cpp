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
    // cudaMemcpy from pageable memory may return before the DMA lands, and the backend's
    // stream does not wait for the legacy default stream: finish before any op reads it.
    cudaDeviceSynchronize();
  }
  explicit Dev(size_t count) : n(count) {
    cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T));
    cudaMemset(p, 0, std::max<size_t>(n, 1) * sizeof(T));
    cudaDeviceSynchronize();  // cudaMemset is asynchronous (see above)
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

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed, int lo = 0, int hi = 255) {
  std::mt19937 g(seed);
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<uint8_t> v(n);
  for (auto& x : v) x = static_cast<uint8_t>(d(g));
  return v;
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
double finite_rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double m = 0, d = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isinf(a[i]) || std::isinf(b[i]) || std::isnan(a[i]) || std::isnan(b[i])) {
      if (!(a[i] == b[i])) return INFINITY;
      continue;
    }
    m = std::max(m, static_cast<double>(std::fabs(a[i])));
    d = std::max(d, std::fabs(static_cast<double>(a[i]) - b[i]));
  }
  return m > 0 ? d / m : d;
}

// Byte-for-byte equality of two selections [rows, n]; names the first difference.
::testing::AssertionResult same_selection(const std::vector<uint8_t>& cpu, const std::vector<uint8_t>& gpu, int64_t n) {
  if (cpu.size() != gpu.size()) return ::testing::AssertionFailure() << "sizes " << cpu.size() << " vs " << gpu.size();
  size_t diffs = 0, first = 0;
  for (size_t i = 0; i < cpu.size(); ++i)
    if (cpu[i] != gpu[i] && diffs++ == 0) first = i;
  if (!diffs) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << diffs << " differences, first at row " << first / static_cast<size_t>(n) << " col "
                                       << first % static_cast<size_t>(n) << ": cpu " << int{cpu[first]} << " gpu " << int{gpu[first]};
}

// One attention call on both backends. Queries at positions p0 .. p0+S-1 (query 0 moved before
// every entry when `blind_first`); window entries: `cached` before the chunk plus the chunk's
// own, in shuffled (ring) order, plus `stale` old ones nobody sees; `n_sel` random compressed
// entries of t_comp selected per query (none for the last query).
void check_attention(Backends& b, int64_t S, int64_t H, int64_t hd, int64_t window, int64_t cached, int64_t stale,
                     int64_t t_comp, int64_t n_sel, bool blind_first, uint32_t seed, const std::string& what) {
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
  const bool with_comp = t_comp > 0;
  const float sc = 1.0f / std::sqrt(static_cast<float>(hd));
  std::vector<float> out(q.size());
  b.cpu->attention({.q = q.data(), .q_pos = qpos.data(), .win = win.data(), .win_pos = wpos.data(), .comp = with_comp ? comp.data() : nullptr,
                    .comp_sel = with_comp ? sel.data() : nullptr, .sink = sink.data(), .out = out.data(), .s = S, .heads = H,
                    .head_dim = hd, .t_win = tw, .t_comp = t_comp, .window = window, .scale = sc});
  Dev<float> dq(q), dwin(win), dcomp(comp), dsink(sink), dout(std::vector<float>(out.size(), NAN));
  Dev<int64_t> dqpos(qpos), dwpos(wpos);
  Dev<uint8_t> dsel(sel);
  b.gpu->attention({.q = dq.p, .q_pos = dqpos.p, .win = dwin.p, .win_pos = dwpos.p, .comp = with_comp ? dcomp.p : nullptr,
                    .comp_sel = with_comp ? dsel.p : nullptr, .sink = dsink.p, .out = dout.p, .s = S, .heads = H, .head_dim = hd,
                    .t_win = tw, .t_comp = t_comp, .window = window, .scale = sc});
  b.gpu->synchronize();
  const auto got = dout.get();
  const double e = rel_err(out, got);
  EXPECT_LT(e, 1e-5) << what;
  std::printf("attention %-44s rel err %.2e\n", what.c_str(), e);
  if (blind_first) {  // the query that sees nothing: only the sink, a zero output
    for (int64_t i = 0; i < H * hd; ++i) ASSERT_EQ(got[static_cast<size_t>(i)], 0.0f) << what;
  }
}

TEST(CudaPrefill, AttentionReleasedShapes) {
  Backends b;
  // 64 heads x 512, window 128, 512 of 2048 compressed entries selected per query.
  check_attention(b, 96, 64, 512, 128, 127, 50, 2048, 512, false, 100, "S=96 64x512 (split in 2)");
  check_attention(b, 300, 64, 512, 128, 127, 50, 2048, 512, false, 108, "S=300 64x512 (one CTA per query and 32 heads)");
  check_attention(b, 8, 64, 512, 128, 127, 50, 2048, 512, true, 101, "S=8 64x512 (split over the entries)");
  check_attention(b, 1, 64, 512, 128, 127, 0, 2048, 512, false, 102, "S=1 64x512 (split)");
  check_attention(b, 200, 64, 512, 128, 127, 9, 0, 0, false, 103, "S=200 64x512 window only");
  check_attention(b, 8, 64, 512, 128, 40, 3, 700, 700, true, 104, "S=8 64x512 short cache, all selected");
  check_attention(b, 3, 64, 512, 4096, 4000, 0, 300, 120, false, 105, "S=3 64x512 window 4096 (split)");
  check_attention(b, 280, 8, 512, 4096, 4000, 0, 300, 120, false, 106, "S=280 8x512 window 4096 (list in batches)");
  check_attention(b, 300, 4, 32, 4096, 4000, 0, 300, 120, false, 107, "S=300 4x32 window 4096 (list in batches)");
}

TEST(CudaPrefill, AttentionOtherShapes) {
  Backends b;
  struct Shape { int64_t H, hd; };
  for (Shape sh : {Shape{4, 32}, Shape{40, 128}, Shape{8, 64}, Shape{33, 256}, Shape{3, 96}}) {
    for (int64_t S : {int64_t{3}, int64_t{140}}) {
      const std::string what = "S=" + std::to_string(S) + " " + std::to_string(sh.H) + "x" + std::to_string(sh.hd);
      check_attention(b, S, sh.H, sh.hd, 16, 20, 5, 200, 30, S == 3, 200 + static_cast<uint32_t>(sh.hd + S), what);
    }
  }
}

void check_indexer(Backends& b, int64_t S, int64_t T, int64_t H, int64_t dim, int64_t ratio, bool decreasing, uint32_t seed) {
  auto q = randn(static_cast<size_t>(S * H * dim), seed), k = randn(static_cast<size_t>(T * dim), seed + 1),
       w = randn(static_cast<size_t>(S * H), seed + 2, 0.3f);
  std::vector<int64_t> pos(static_cast<size_t>(S));
  std::mt19937 g(seed + 3);
  std::uniform_int_distribution<int64_t> pick(0, T * ratio + 20);
  for (int64_t i = 0; i < S; ++i) pos[static_cast<size_t>(i)] = decreasing ? std::max<int64_t>(0, T * ratio - 1 - 16 * i) : pick(g);
  std::vector<float> cpu(static_cast<size_t>(S * T));
  b.cpu->indexer_scores({.q = q.data(), .k = k.data(), .w = w.data(), .q_pos = pos.data(), .scores = cpu.data(), .s = S, .heads = H,
                         .dim = dim, .t = T, .ratio = ratio, .score_scale = 0.088f});
  Dev<float> dq(q), dk(k), dw(w), dsc(std::vector<float>(cpu.size(), NAN));
  Dev<int64_t> dpos(pos);
  b.gpu->indexer_scores({.q = dq.p, .k = dk.p, .w = dw.p, .q_pos = dpos.p, .scores = dsc.p, .s = S, .heads = H, .dim = dim, .t = T,
                         .ratio = ratio, .score_scale = 0.088f});
  b.gpu->synchronize();
  const double e = finite_rel_err(cpu, dsc.get());
  EXPECT_LT(e, 1e-5) << "indexer S=" << S << " T=" << T << " heads " << H << " dim " << dim;
  std::printf("indexer S=%lld T=%lld heads %lld dim %lld ratio %lld: rel err %.2e\n", static_cast<long long>(S), static_cast<long long>(T),
              static_cast<long long>(H), static_cast<long long>(dim), static_cast<long long>(ratio), e);
}

TEST(CudaPrefill, IndexerScores) {
  Backends b;
  check_indexer(b, 512, 2048, 32, 128, 4, true, 300);   // released dims, causal mask over whole tiles
  check_indexer(b, 77, 333, 32, 128, 1, false, 310);    // ragged tiles
  check_indexer(b, 37, 300, 8, 32, 2, false, 320);      // fixture dims
  check_indexer(b, 9, 130, 64, 68, 1, false, 330);      // dim not a multiple of the 32-wide chunk
  check_indexer(b, 11, 50, 5, 12, 1, false, 340);       // heads not dividing 128: the fallback
}

// Scores with many exact ties (a few distinct values), ±0, -inf; per-row patterns: all -inf,
// fewer finite than k, all distinct, all equal.
std::vector<float> tie_scores(int64_t rows, int64_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> nd;
  std::uniform_real_distribution<float> u;
  std::vector<float> v(static_cast<size_t>(rows * n));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < n; ++j) {
      float& x = v[static_cast<size_t>(r * n + j)];
      const float z = nd(g), c = u(g);
      switch (r % 7) {
        case 0: x = -INFINITY; break;
        case 1: x = c < 0.05f ? std::round(z * 2) / 2 : -INFINITY; break;
        case 2: x = z; break;
        case 3: x = 0.75f; break;
        default:
          x = c < 0.2f ? -INFINITY : c < 0.25f ? (c < 0.225f ? -0.0f : 0.0f) : std::round(z * 3) / 4;
          if (c > 0.999f) x = INFINITY;
      }
    }
  return v;
}

void check_topk(Backends& b, int64_t rows, int64_t n, int64_t k, bool restrict, uint32_t seed) {
  const auto sc = tie_scores(rows, n, seed);
  std::vector<uint8_t> rs = random_bytes(static_cast<size_t>(rows * n), seed + 1, 0, 4);
  for (auto& x : rs) x = x != 0;
  std::vector<uint8_t> cpu(sc.size());
  b.cpu->topk_mask({.scores = sc.data(), .restrict_to = restrict ? rs.data() : nullptr, .selected = cpu.data(), .s = rows, .t = n, .k = k});
  Dev<float> dsc(sc);
  Dev<uint8_t> drs(rs), dsel(std::vector<uint8_t>(sc.size(), 7));
  b.gpu->topk_mask({.scores = dsc.p, .restrict_to = restrict ? drs.p : nullptr, .selected = dsel.p, .s = rows, .t = n, .k = k});
  b.gpu->synchronize();
  EXPECT_TRUE(same_selection(cpu, dsel.get(), n)) << "topk rows " << rows << " n " << n << " k " << k << " restrict " << restrict;
}

TEST(CudaPrefill, TopkMask) {
  Backends b;
  check_topk(b, 4096, 2048, 512, false, 400);
  check_topk(b, 4096, 2048, 512, true, 410);
  check_topk(b, 70, 2048, 2048, true, 420);  // k = n
  check_topk(b, 70, 1000, 3000, false, 430); // k > n
  check_topk(b, 70, 1000, 1, true, 440);
  check_topk(b, 70, 1000, 0, false, 450);
  check_topk(b, 7, 40, 6, true, 460);        // fixture size
}

void check_candidates(Backends& b, int64_t rows, int64_t T, int64_t ratio, int64_t bs, int64_t topk_blocks, uint32_t seed) {
  auto sc = tie_scores(rows, T, seed);
  std::vector<int64_t> pos(static_cast<size_t>(rows));
  std::mt19937 g(seed + 1);
  std::uniform_int_distribution<int64_t> pick(0, T * ratio + 3 * bs * ratio);
  for (int64_t r = 0; r < rows; ++r) {
    pos[static_cast<size_t>(r)] = r % 11 == 5 ? 0 : pick(g);
    const int64_t vis = (pos[static_cast<size_t>(r)] + 1) / ratio;
    for (int64_t j = vis; j < T; ++j) sc[static_cast<size_t>(r * T + j)] = -INFINITY;  // invisible, as the indexer writes them
  }
  std::vector<uint8_t> cpu(sc.size());
  b.cpu->candidate_blocks({.scores = sc.data(), .q_pos = pos.data(), .keep = cpu.data(), .s = rows, .t = T, .ratio = ratio, .block_size = bs,
                           .topk_blocks = topk_blocks});
  Dev<float> dsc(sc);
  Dev<int64_t> dpos(pos);
  Dev<uint8_t> dkeep(std::vector<uint8_t>(sc.size(), 7));
  b.gpu->candidate_blocks({.scores = dsc.p, .q_pos = dpos.p, .keep = dkeep.p, .s = rows, .t = T, .ratio = ratio, .block_size = bs,
                           .topk_blocks = topk_blocks});
  b.gpu->synchronize();
  EXPECT_TRUE(same_selection(cpu, dkeep.get(), T)) << "candidates rows " << rows << " t " << T << " block " << bs << " topk " << topk_blocks;
}

TEST(CudaPrefill, CandidateBlocks) {
  Backends b;
  check_candidates(b, 4096, 2048, 4, 8, 64, 500);
  check_candidates(b, 512, 2045, 1, 8, 100, 510);  // partial last block
  check_candidates(b, 100, 2048, 4, 8, 2048, 520); // topk_blocks > blocks
  check_candidates(b, 64, 333, 2, 5, 7, 530);
  check_candidates(b, 7, 40, 2, 4, 3, 540);        // fixture size
}

INSTANTIATE_TEST_SUITE_P(Shapes, Parity, ::testing::Values(kFixture, kReleased),
                         [](const ::testing::TestParamInfo<Dims>& p) { return p.param.D == 64 ? std::string("fixture") : std::string("released"); });

}  // namespace

// Several sequences in one attention call (AttentionArgs.seqs): the CPU reference, and each
// query's output bitwise equal to its sequence attended alone on the GPU (batch invariance).
TEST(CudaMultiSequence, AttentionMatchesTheCpuAndEachSequenceAlone) {
  Backends b;
  const int64_t H = 64, hd = 512, window = 128;
  struct Seq {
    int64_t m, t_win, t_comp;
  };
  const std::vector<Seq> shape{{1, 128, 2048}, {5, 40, 0}, {1, 10, 300}, {3, 130, 64}};
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
  int64_t r0 = 0, max_win = 0, max_comp = 0;
  for (size_t i = 0; i < shape.size(); ++i) {
    const Seq& sq = shape[i];
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
  b.gpu->attention({.q = dq.p, .q_pos = dqpos.p, .sink = dsink.p, .out = dout.p, .s = s, .heads = H, .head_dim = hd,
                    .window = window, .scale = scale, .seqs = reinterpret_cast<const AttentionSeq*>(dseq_bytes.p),
                    .q_seq = dqseq.p, .n_seqs = static_cast<int64_t>(dseqs.size()), .max_t_win = max_win,
                    .max_t_comp = max_comp});
  b.gpu->synchronize();
  const std::vector<float> got = dout.get();
  EXPECT_LT(rel_err(ref, got), 1e-5);
  // Each sequence alone (single-sequence form) on the GPU: the same bits.
  r0 = 0;
  for (size_t i = 0; i < shape.size(); ++i) {
    const Seq& sq = shape[i];
    Dev<float> one(static_cast<size_t>(sq.m * H * hd));
    b.gpu->attention({.q = dq.p + r0 * H * hd, .q_pos = dqpos.p + r0, .win = dwin[i]->p, .win_pos = dwpos[i]->p,
                      .comp = sq.t_comp ? dcomp[i]->p : nullptr, .comp_sel = sq.t_comp ? dsel[i]->p : nullptr,
                      .sink = dsink.p, .out = one.p, .s = sq.m, .heads = H, .head_dim = hd, .t_win = sq.t_win,
                      .t_comp = sq.t_comp, .window = window, .scale = scale});
    b.gpu->synchronize();
    const std::vector<float> alone = one.get();
    EXPECT_EQ(std::memcmp(alone.data(), got.data() + r0 * H * hd, alone.size() * sizeof(float)), 0) << "sequence " << i;
    r0 += sq.m;
  }
}

// copy_batch and dequant_packed_batch against their single forms.
TEST(CudaMultiSequence, BatchedCopiesAndRingReads) {
  Backends b;
  const int64_t dim = 512, block = 32;
  std::vector<int64_t> rows{3, 0, 127, 1};
  std::vector<std::vector<uint8_t>> codes, scales;
  std::mt19937 g(9);
  for (int64_t r : rows) {
    codes.emplace_back(static_cast<size_t>(r * dim));
    scales.emplace_back(static_cast<size_t>(r * dim / block));
    for (auto& c : codes.back()) c = static_cast<uint8_t>(g() & 0x7E);  // no NaN codes
    for (auto& c : scales.back()) c = static_cast<uint8_t>(110 + g() % 30);
  }
  int64_t total = 0;
  for (int64_t r : rows) total += r;
  Dev<float> out(static_cast<size_t>(total * dim));
  std::vector<std::unique_ptr<Dev<uint8_t>>> dc, ds;
  std::vector<PackedDesc> descs;
  std::vector<float> ref(static_cast<size_t>(total * dim));
  int64_t off = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    dc.push_back(std::make_unique<Dev<uint8_t>>(codes[i]));
    ds.push_back(std::make_unique<Dev<uint8_t>>(scales[i]));
    descs.push_back({dc[i]->p, ds[i]->p, out.p + off * dim, rows[i]});
    if (rows[i]) dequant_fake_quant(FakeQuant::kFp8Pow2, codes[i].data(), scales[i].data(), rows[i], dim, block, ref.data() + off * dim);
    off += rows[i];
  }
  std::vector<uint8_t> bytes(descs.size() * sizeof(PackedDesc));
  std::memcpy(bytes.data(), descs.data(), bytes.size());
  Dev<uint8_t> ddesc(bytes);
  b.gpu->dequant_packed_batch({.kind = FakeQuant::kFp8Pow2, .descs = reinterpret_cast<const PackedDesc*>(ddesc.p),
                               .n = static_cast<int64_t>(descs.size()), .dim = dim, .block = block, .max_rows = 127});
  b.gpu->synchronize();
  const std::vector<float> got = out.get();
  EXPECT_EQ(std::memcmp(got.data(), ref.data(), ref.size() * sizeof(float)), 0);
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
