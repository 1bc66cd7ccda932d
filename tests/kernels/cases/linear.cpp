// Cases of the products (kernels/cpu/linear.cpp, kernels/cuda/linear*.cu): matmul in every
// weight format, the grouped product of weights not stored as bf16, the bf16 products of FP8 and
// MXFP4 weights read as stored (bitwise the products of the weights dequantised to bf16, in every
// tiling), and the lab's shapes (the wq_b product at decode and prefill, a decode step's dense
// products in bf16 and FP8, the experts in bf16 and MXFP4 from one token to prefill).
#include <cmath>

#include "kernels/cases/case_util.h"
#include "model/quantize.h"

namespace deepinfer::op_cases {

namespace {

// A decode step's dense products at the released per-layer dims (groups: the grouped low-rank
// output projection), and whether the release stores the weight as FP8 (the router is float32,
// the head bf16).
struct DecodeProduct {
  const char* name;
  int64_t n, k, groups;
  bool fp8;
};
constexpr DecodeProduct kDecodeProducts[] = {
    {"wq_a", 1280, 5120, 1, true},          {"wkv", 512, 5120, 1, true},   {"wq_b", 32768, 1280, 1, true},
    {"wo_a_8_groups", 1024, 4096, 8, true}, {"wo_b", 5120, 8192, 1, true}, {"router", 64, 5120, 1, false},
    {"shared_gate", 2304, 5120, 1, true},   {"shared_down", 5120, 2304, 1, true}, {"head", 129280, 5120, 1, false}};

// A host weight in a stored format, quantised from N(0, std) values times a power of two from
// 2^-20 to 2^20 per scale block (32 x 32 for FP8, 32 inputs of a row for MXFP4: scales from
// about 2^-30 to 2^12, the two-multiply decode among them), and the same values as bf16 (exact:
// FP8 / FP4 codes times a power of two in bf16's range), both uploaded to the run's backend.
struct StoredPair {
  WeightView stored, bf16;
};
StoredPair stored_pair(Run& r, WeightFormat fmt, int64_t n, int64_t k, uint32_t seed, float std) {
  auto wf = randn(sz(n * k), seed, std);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < k; ++j) {
      const auto block = static_cast<uint32_t>((fmt == WeightFormat::kFP8Block32 ? i / 32 : i) * 7919 + (j / 32) * 104729 + seed);
      wf[sz(i * k + j)] = std::ldexp(wf[sz(i * k + j)], static_cast<int>((block * 2654435761u >> 16) % 41) - 20);
    }
  model::Weights owner;
  const WeightView q = model::quantize_matrix(WeightView::f32(wf.data(), n, k), fmt, owner);
  std::vector<uint16_t> b(sz(n * k));
  std::vector<float> row(sz(k));
  for (int64_t i = 0; i < n; ++i) {
    dequant_row(q, i, row.data());
    for (int64_t j = 0; j < k; ++j) {
      uint32_t bits;
      __builtin_memcpy(&bits, &row[sz(j)], 4);
      b[sz(i * k + j)] = static_cast<uint16_t>(bits >> 16);  // exact: the low half is zero
    }
  }
  return {upload_weight(r, q), WeightView{WeightFormat::kBF16, r.in(b), nullptr, n, k}};
}

// A check that output `a` and output `b` of the run are the same bits.
std::function<std::string(const Host&)> same_bits(size_t a, size_t b, std::string what) {
  return [=](const Host& h) {
    const auto x = as<float>(h[a]), y = as<float>(h[b]);
    const std::string d = bits_differ(x.data(), y.data(), x.size());
    return d.empty() ? d : what + ": " + d;
  };
}

// Products of FP8 / MXFP4 weights on the bf16 backend against the CPU, each also checked bit for
// bit against the same product of the weights dequantised to bf16: dense at every tiling's row
// counts (decode 1-16 rows, 64 x 128 tiles, 128 x 128 tiles; k a multiple of 128 or only of 32),
// the grouped low-rank projection with a first row, several outputs of one x, and the grouped
// experts with a second product (gate and up) at one token to prefill-sized tiles.
void add_stored_linear(std::vector<OpCase>& t) {
  for (auto fmt : {WeightFormat::kFP8Block32, WeightFormat::kMXFP4}) {
    struct D {
      int64_t m, n, k;
    };
    for (const D& d : {D{1, 256, 1280}, D{5, 192, 512}, D{16, 128, 2304}, D{3, 96, 96}, D{40, 128, 1024},
                       D{200, 256, 640}, D{256, 128, 512}, D{700, 192, 256}, D{700, 192, 1024}, D{300, 64, 160}}) {
      t.push_back({.family = "linear",
                   .name = std::string("stored_matmul_") + format_name(fmt) + "_m" + str(d.m) + "_k" + str(d.k),
                   .shape = "[" + str(d.m) + " x " + str(d.k) + "] x [" + str(d.n) + " x " + str(d.k) + "]",
                   .build =
                       [=](Run& r) {
                         const StoredPair w = stored_pair(r, fmt, d.n, d.k, 40 + static_cast<uint32_t>(d.m), 0.05f);
                         const float* x = r.in(randn(sz(d.m * d.k), 41));
                         float* y = r.out<float>("y", sz(d.m * d.n), Rule::kRelErr, 1e-5);
                         float* yb = r.out<float>("y of the bf16 weights", sz(d.m * d.n), Rule::kRelErr, 1e-5);
                         r.checks.push_back(same_bits(0, 1, "stored against dequantised"));
                         r.op = [=, &be = r.be] { be.matmul({.x = x, .w = w.stored, .y = y, .m = d.m, .n = d.n, .k = d.k}); };
                         r.after = [=, &be = r.be] { be.matmul({.x = x, .w = w.bf16, .y = yb, .m = d.m, .n = d.n, .k = d.k}); };
                       },
                   .precisions = {Precision::kBF16}});
    }
    // Grouped low-rank output projection: 4 groups of [64 x 256] from weight row 64 on.
    for (int64_t m : {int64_t{1}, int64_t{24}}) {
      const int64_t G = 4, n = 64, k = 256, row0 = 64;
      t.push_back({.family = "linear",
                   .name = std::string("stored_matmul_groups_") + format_name(fmt) + "_m" + str(m),
                   .shape = str(G) + " groups [" + str(m) + " x " + str(k) + "] x [" + str(n) + " x " + str(k) + "], row " + str(row0),
                   .build =
                       [=](Run& r) {
                         const StoredPair w = stored_pair(r, fmt, row0 + G * n, k, 50, 0.05f);
                         const float* x = r.in(randn(sz(m * G * k), 51));
                         float* y = r.out<float>("y", sz(m * G * n), Rule::kRelErr, 1e-5);
                         float* yb = r.out<float>("y of the bf16 weights", sz(m * G * n), Rule::kRelErr, 1e-5);
                         r.checks.push_back(same_bits(0, 1, "stored against dequantised"));
                         auto args = [=](const WeightView& wv, float* out) {
                           return MatmulArgs{.x = x, .w = wv, .y = out, .m = m, .n = n, .k = k, .w_row0 = row0, .groups = G,
                                             .x_group_stride = k, .y_group_stride = n};
                         };
                         r.op = [=, &be = r.be] { be.matmul(args(w.stored, y)); };
                         r.after = [=, &be = r.be] { be.matmul(args(w.bf16, yb)); };
                       },
                   .precisions = {Precision::kBF16}});
    }
    // A row's bits do not depend on the rows beside it, read as stored (1, 16, 256 rows) or
    // through the dequantised weights (300 rows).
    {
      const int64_t n = 128, k = 640;
      t.push_back({.family = "linear",
                   .name = std::string("stored_matmul_rows_agree_") + format_name(fmt),
                   .shape = "rows 0-15 of [1 | 16 | 256 | 300 x " + str(k) + "] x [" + str(n) + " x " + str(k) + "]",
                   .build =
                       [=](Run& r) {
                         const StoredPair w = stored_pair(r, fmt, n, k, 55, 0.05f);
                         const float* x = r.in(randn(sz(300 * k), 56));
                         std::vector<float*> ys;
                         for (int64_t m : {int64_t{1}, int64_t{16}, int64_t{256}, int64_t{300}})
                           ys.push_back(r.out<float>("y of " + str(m) + " rows", sz(m * n), Rule::kRelErr, 1e-5));
                         r.checks.push_back([n](const Host& h) {
                           const auto y1 = as<float>(h[0]), y16 = as<float>(h[1]), y256 = as<float>(h[2]), y300 = as<float>(h[3]);
                           std::string d = bits_differ(y1.data(), y16.data(), sz(n));
                           if (d.empty()) d = bits_differ(y16.data(), y256.data(), sz(16 * n));
                           if (d.empty()) d = bits_differ(y16.data(), y300.data(), sz(16 * n));
                           return d.empty() ? d : "a row's bits depend on the batch: " + d;
                         });
                         r.op = [=, &be = r.be] {
                           int i = 0;
                           for (int64_t m : {int64_t{1}, int64_t{16}, int64_t{256}, int64_t{300}})
                             be.matmul({.x = x, .w = w.stored, .y = ys[sz(i++)], .m = m, .n = n, .k = k});
                         };
                       },
                   .precisions = {Precision::kBF16}});
    }
    // Three outputs of one x (one launch at decode rows; one product each above, reading x
    // rounded once, and through the dequantised weights above 256 rows).
    for (int64_t m : {int64_t{1}, int64_t{8}, int64_t{40}, int64_t{300}}) {
      const int64_t k = 512;
      const int64_t ns[3] = {128, 64, 192};
      t.push_back({.family = "linear",
                   .name = std::string("stored_multi_matmul_") + format_name(fmt) + "_m" + str(m),
                   .shape = "[" + str(m) + " x " + str(k) + "] x [128 | 64 | 192 x " + str(k) + "]",
                   .build =
                       [=](Run& r) {
                         MultiMatmulArgs a{.x = r.in(randn(sz(m * k), 61)), .m = m, .k = k, .count = 3};
                         MultiMatmulArgs b = a;
                         for (int i = 0; i < 3; ++i) {
                           const StoredPair w = stored_pair(r, fmt, ns[i], k, 62 + static_cast<uint32_t>(i), 0.05f);
                           a.outs[i] = {w.stored, r.out<float>("y" + str(i), sz(m * ns[i]), Rule::kRelErr, 1e-5), ns[i]};
                           b.outs[i] = {w.bf16, nullptr, ns[i]};
                         }
                         for (int i = 0; i < 3; ++i) {
                           b.outs[i].y = r.out<float>("y" + str(i) + " of the bf16 weights", sz(m * ns[i]), Rule::kRelErr, 1e-5);
                           r.checks.push_back(same_bits(static_cast<size_t>(i), static_cast<size_t>(3 + i), "output " + str(i)));
                         }
                         r.op = [=, &be = r.be] { be.multi_matmul(a); };
                         r.after = [=, &be = r.be] { be.multi_matmul(b); };
                       },
                   .precisions = {Precision::kBF16}});
    }
    // The experts (8 of [64 x 256]), gate and up in one op: 1, 7, 300 and 2048 tokens x 2; and
    // k 1408 (11 slices: the experts' decode stages wrap) at 7 tokens. At 2048 tokens (the
    // warpgroup tiling) also as the model's prefill runs them: [128 x 256] experts reading x
    // through a row index (gate and up), and one product alone (down).
    struct G {
      int64_t tokens, k, n = 64;
      bool gathered = false, pair = true;
    };
    for (const G& g : {G{1, 256}, G{7, 256}, G{300, 256}, G{2048, 256}, G{7, 1408}, G{2048, 256, 128, true},
                       G{2048, 256, 128, false, false}}) {
      const int64_t E = 8, K = 2, n = g.n, k = g.k, tokens = g.tokens, rows = tokens * K;
      const bool gathered = g.gathered, pair = g.pair;
      t.push_back({.family = "linear",
                   .name = std::string("stored_grouped_matmul_") + format_name(fmt) + "_t" + str(tokens) + "_k" + str(k) +
                           (n != 64 ? "_n" + str(n) : "") + (gathered ? "_gathered" : "") + (pair ? "" : "_one"),
                   .shape = str(E) + " experts [" + str(n) + " x " + str(k) + "] x " + (pair ? "2, " : "1, ") + str(rows) + " rows" +
                            (gathered ? " through a row index" : ""),
                   .build =
                       [=](Run& r) {
                         std::vector<WeightView> w, w2, b, b2;
                         for (int64_t e = 0; e < E; ++e) {
                           const StoredPair p = stored_pair(r, fmt, n, k, 70 + static_cast<uint32_t>(e), 0.1f);
                           const StoredPair q = stored_pair(r, fmt, n, k, 90 + static_cast<uint32_t>(e), 0.1f);
                           w.push_back(p.stored);
                           b.push_back(p.bf16);
                           w2.push_back(q.stored);
                           b2.push_back(q.bf16);
                         }
                         const int32_t* off = r.in(offsets_of(tokens, K, E, 7));
                         // Gathered: x has `tokens` rows, product row i reads row (i * 7) % tokens.
                         const int64_t x_n = gathered ? tokens : rows;
                         std::vector<int32_t> idx(sz(rows));
                         for (int64_t i = 0; i < rows; ++i) idx[sz(i)] = static_cast<int32_t>((i * 7) % tokens);
                         const int32_t* x_rows = gathered ? r.in(idx) : nullptr;
                         const float* x = r.in(randn(sz(x_n * k), 71));
                         float* y = r.out<float>("gate", sz(rows * n), Rule::kRelErr, 1e-5);
                         float* y2 = pair ? r.out<float>("up", sz(rows * n), Rule::kRelErr, 1e-5) : nullptr;
                         float* yb = r.out<float>("gate of the bf16 weights", sz(rows * n), Rule::kRelErr, 1e-5);
                         float* yb2 = pair ? r.out<float>("up of the bf16 weights", sz(rows * n), Rule::kRelErr, 1e-5) : nullptr;
                         r.checks.push_back(same_bits(0, pair ? 2 : 1, "gate"));
                         if (pair) r.checks.push_back(same_bits(1, 3, "up"));
                         const WeightView *ws = r.keep(w), *ws2 = pair ? r.keep(w2) : nullptr, *bs = r.keep(b),
                                          *bs2 = pair ? r.keep(b2) : nullptr;
                         auto args = [=](const WeightView* a, float* ya, const WeightView* a2, float* ya2) {
                           return GroupedMatmulArgs{.x = x, .w = a, .offsets = off, .y = ya, .rows = rows, .n = n, .k = k,
                                                    .experts = E, .w2 = a2, .y2 = ya2, .x_rows = x_rows, .x_src_rows = x_n};
                         };
                         r.op = [=, &be = r.be] { be.grouped_matmul(args(ws, y, ws2, y2)); };
                         r.after = [=, &be = r.be] { be.grouped_matmul(args(bs, yb, bs2, yb2)); };
                       },
                   .precisions = {Precision::kBF16}});
    }
  }
}

// The lab: a decode step's dense products with FP8 weights as the release stores them (the
// released per-layer dims, at 1, 8 and 16 rows; bf16 backend), and the routed experts (128 of
// [2304 x 5120] up with gate, [5120 x 2304] down, top-6) in bf16 and MXFP4 from one token to
// prefill. Stored codes are random bytes (timing only; the parity cases check the values).
// Bytes: the weights read (every expert with rows once), x and y.
void add_stored_lab(std::vector<OpCase>& t) {
  for (int64_t m : {int64_t{1}, int64_t{8}, int64_t{16}})
    for (const DecodeProduct& p : kDecodeProducts) {
      if (!p.fp8) continue;
      const int64_t rows = p.groups * p.n, codes = rows * p.k, scales = (rows / 32) * (p.k / 32);
      t.push_back({.family = "linear",
                   .name = std::string("lab_fp8_decode_m") + str(m) + "_" + p.name,
                   .shape = "m " + str(m) + " [" + str(p.n) + " x " + str(p.k) + "] x " + str(p.groups) + " fp8",
                   .build =
                       [=](Run& r) {
                         const WeightView w{WeightFormat::kFP8Block32, r.random_bf16(codes / 2, 24, 0.02f),
                                            r.in(std::vector<uint8_t>(sz(scales), 120)), rows, p.k};
                         const float* x = r.random_f32(m * p.groups * p.k, 22);
                         float* y = r.out<float>("y", sz(m * rows), Rule::kRelErr, 1e-5);
                         r.op = [=, &be = r.be] {
                           be.matmul({.x = x, .w = w, .y = y, .m = m, .n = p.n, .k = p.k, .groups = p.groups,
                                      .x_group_stride = p.k, .y_group_stride = p.n});
                         };
                       },
                   .use = kLab,
                   .lab_precision = Precision::kBF16,
                   .bytes = static_cast<double>(codes + scales + m * p.groups * (p.k + p.n) * 4),
                   .flops = 2.0 * static_cast<double>(m * rows * p.k)});
    }
  for (auto fmt : {WeightFormat::kBF16, WeightFormat::kMXFP4})
    for (int64_t tokens : {int64_t{1}, int64_t{64}, int64_t{256}, int64_t{4096}})
      for (bool up : {true, false}) {
        const int64_t E = 128, K = 6, rows = tokens * K, n = up ? 2304 : 5120, k = up ? 5120 : 2304;
        const auto off = offsets_of(tokens, K, E, 5);
        int64_t active = 0;
        for (int64_t e = 0; e < E; ++e) active += off[sz(e + 1)] > off[sz(e)];
        const int64_t per = fmt == WeightFormat::kBF16 ? n * k * 2 : n * k / 2 + n * (k / 32), mats = up ? 2 : 1;
        t.push_back({.family = "linear",
                     .name = std::string("lab_experts_") + format_name(fmt) + "_t" + str(tokens) + (up ? "_gate_up" : "_down"),
                     .shape = str(rows) + " rows, " + str(active) + " of 128 experts [" + str(n) + " x " + str(k) + "] x " + str(mats),
                     .build =
                         [=](Run& r) {
                           std::vector<WeightView> w[2];
                           for (int64_t i = 0; i < mats; ++i)
                             for (int64_t e = 0; e < E; ++e) {
                               const uint64_t seed = 100 + static_cast<uint64_t>(i * E + e);
                               if (fmt == WeightFormat::kBF16)
                                 w[i].push_back({fmt, r.random_bf16(n * k, seed, 0.02f), nullptr, n, k});
                               else
                                 w[i].push_back({fmt, r.random_bf16(n * k / 4, seed, 0.02f),
                                                 r.in(std::vector<uint8_t>(sz(n * (k / 32)), static_cast<uint8_t>(118 + e % 4))), n, k});
                             }
                           const WeightView* w0 = r.keep(w[0]);
                           const WeightView* w1 = up ? r.keep(w[1]) : nullptr;
                           const int32_t* doff = r.in(off);
                           const float* x = r.random_f32(rows * k, 23);
                           float* y = r.out<float>("y", sz(rows * n), Rule::kRelErr, 1e-5);
                           float* y2 = up ? r.out<float>("y2", sz(rows * n), Rule::kRelErr, 1e-5) : nullptr;
                           r.op = [=, &be = r.be] {
                             be.grouped_matmul({.x = x, .w = w0, .offsets = doff, .y = y, .rows = rows, .n = n, .k = k, .experts = E,
                                                .w2 = w1, .y2 = y2});
                           };
                         },
                     .use = kLab,
                     .lab_precision = Precision::kBF16,
                     .bytes = static_cast<double>(active * per * mats + rows * (k + n * mats) * 4),
                     .flops = 2.0 * static_cast<double>(rows * n * k * mats)});
      }
}

}  // namespace

void add_linear(std::vector<OpCase>& t) {
  add_stored_linear(t);
  add_stored_lab(t);
  // (was Parity.MatmulAllFormats) y = x · wᵀ, m = rows, n = q low rank, k = D; within 1e-5.
  for (const Dims& d : kBothDims)
    for (auto fmt : {WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kFP8Block32, WeightFormat::kMXFP4}) {
      const int64_t m = d.rows, n = d.qlora, k = d.D;
      t.push_back({.family = "linear",
                   .name = std::string("matmul_") + format_name(fmt) + "_" + d.name,
                   .shape = "[" + str(m) + " x " + str(k) + "] x [" + str(n) + " x " + str(k) + "]",
                   .build =
                       [=](Run& r) {
                         const auto x = randn(sz(m * k), 1), wf = randn(sz(n * k), 2, 0.05f);
                         model::Weights owner;
                         const WeightView w = upload_weight(r, model::quantize_matrix(WeightView::f32(wf.data(), n, k), fmt, owner));
                         const float* dx = r.in(x);
                         float* y = r.out<float>("y", sz(m * n), Rule::kRelErr, 1e-5);
                         r.op = [=, &be = r.be] { be.matmul({.x = dx, .w = w, .y = y, .m = m, .n = n, .k = k}); };
                       },
                   .bytes = 0,
                   .flops = 2.0 * static_cast<double>(m * n * k)});
    }

  // MatmulArgs.f32 on the bf16 backend: float32 math (the float32 backend's product, within
  // 1e-5), not the bf16 product the same call gives without it (checked on bf16 backends). A
  // bf16 weight and an FP8 one; one row (the confidence head's width) and a few.
  for (auto fmt : {WeightFormat::kBF16, WeightFormat::kFP8Block32})
    for (int64_t m : {int64_t{5}, int64_t{40}}) {
      const int64_t n = 3, k = 5376;
      t.push_back({.family = "linear",
                   .name = std::string("matmul_f32_on_bf16_") + format_name(fmt) + "_m" + str(m),
                   .shape = "[" + str(m) + " x " + str(k) + "] x [" + str(n) + " x " + str(k) + "]",
                   .build =
                       [=](Run& r) {
                         const auto x = randn(sz(m * k), 61), wf = randn(sz(n * k), 62, 0.05f);
                         model::Weights owner;
                         const WeightView w = upload_weight(r, model::quantize_matrix(WeightView::f32(wf.data(), n, k), fmt, owner));
                         const float* dx = r.in(x);
                         float* y = r.out<float>("y (f32)", sz(m * n), Rule::kRelErr, 1e-5);
                         float* yb = r.out<float>("y (the backend's precision)", sz(m * n), Rule::kRelErr, 1e-5);
                         if (r.be.precision() == Precision::kBF16)
                           r.checks.push_back([](const Host& h) {
                             const auto a = as<float>(h[0]), b = as<float>(h[1]);
                             return bits_differ(a.data(), b.data(), a.size()).empty() ? "f32 gave the bf16 product" : "";
                           });
                         r.op = [=, &be = r.be] { be.matmul({.x = dx, .w = w, .y = y, .m = m, .n = n, .k = k, .f32 = true}); };
                         r.after = [=, &be = r.be] { be.matmul({.x = dx, .w = w, .y = yb, .m = m, .n = n, .k = k}); };
                       },
                   .precisions = {Precision::kBF16}});
    }

  // (was CudaMoe.GroupedMatmulAnyFormatMatchesTheCpu) 8 experts of [32 x 96] weights not stored as
  // bf16, 7 tokens x 2; and the same with the rows gathered on the way in (row r reads row
  // rows - 1 - r). Both precisions; within 1e-5.
  for (auto fmt : {WeightFormat::kF32, WeightFormat::kFP8Block32, WeightFormat::kMXFP4}) {
    const int64_t E = 8, K = 2, tokens = 7, n = 32, k = 96, rows = tokens * K;
    t.push_back({.family = "linear",
                 .name = std::string("grouped_matmul_") + format_name(fmt),
                 .shape = str(E) + " experts [" + str(n) + " x " + str(k) + "], " + str(rows) + " rows",
                 .build =
                     [=](Run& r) {
                       const auto off = offsets_of(tokens, K, E, 3);
                       const auto x = randn(sz(rows * k), 30);
                       std::vector<WeightView> w;
                       for (int64_t e = 0; e < E; ++e) {
                         const auto wf = randn(sz(n * k), 20 + static_cast<uint32_t>(e), 0.1f);
                         model::Weights owner;
                         w.push_back(upload_weight(r, model::quantize_matrix(WeightView::f32(wf.data(), n, k), fmt, owner)));
                       }
                       std::vector<int32_t> rev(sz(rows));
                       for (int64_t i = 0; i < rows; ++i) rev[sz(i)] = static_cast<int32_t>(rows - 1 - i);
                       const WeightView* ws = r.keep(w);
                       const float* dx = r.in(x);
                       const int32_t* doff = r.in(off);
                       const int32_t* drev = r.in(rev);
                       float* y = r.out<float>("y", sz(rows * n), Rule::kRelErr, 1e-5);
                       float* yg = r.out<float>("y of the gathered rows", sz(rows * n), Rule::kRelErr, 1e-5);
                       r.op = [=, &be = r.be] {
                         be.grouped_matmul({.x = dx, .w = ws, .offsets = doff, .y = y, .rows = rows, .n = n, .k = k, .experts = E});
                         be.grouped_matmul({.x = dx, .w = ws, .offsets = doff, .y = yg, .rows = rows, .n = n, .k = k, .experts = E,
                                            .x_rows = drev, .x_src_rows = rows});
                       };
                     },
                 .precisions = {Precision::kFloat32, Precision::kBF16},
                 .flops = 2 * 2.0 * static_cast<double>(rows * n * k)});
  }

  // The lab: the wq_b product [32768, 1280] at decode (m = 8) and prefill (m = 4096), float32
  // and FP8 weights, on the float32 backend. Bytes: the weights and x and y once.
  for (int64_t m : {int64_t{8}, int64_t{4096}})
    for (bool fp8 : {false, true}) {
      const int64_t N = 32768, K = 1280;
      const double wbytes = fp8 ? static_cast<double>(N * K + (N / 32) * (K / 32)) : static_cast<double>(N * K * 4);
      t.push_back({.family = "linear",
                   .name = std::string("lab_matmul_wq_b_") + (fp8 ? "fp8" : "f32") + "_m" + str(m),
                   .shape = "m " + str(m) + " [" + str(N) + " x " + str(K) + "]",
                   .build =
                       [=](Run& r) {
                         WeightView w = fp8 ? WeightView{WeightFormat::kFP8Block32, nullptr, nullptr, N, K} : WeightView::f32(nullptr, N, K);
                         if (fp8) {
                           w.data = r.in(std::vector<uint8_t>(sz(N * K), 0x38));
                           w.scale = r.in(std::vector<uint8_t>(sz((N / 32) * (K / 32)), 127));
                         } else {
                           w.data = r.random_f32(N * K, 11, 0.01f);
                         }
                         const float* x = r.random_f32(m * K, 12);
                         float* y = r.out<float>("y", sz(m * N), Rule::kRelErr, 1e-5);
                         r.op = [=, &be = r.be] { be.matmul({.x = x, .w = w, .y = y, .m = m, .n = N, .k = K}); };
                       },
                   .use = kLab,
                   .bytes = wbytes + static_cast<double>((m * K + m * N) * 4),
                   .flops = 2.0 * static_cast<double>(m * N * K)});
    }

  // The lab: a decode step's dense products at one token (the released per-layer dims, bf16
  // weights, the batch-invariant bf16 backend; each launch timed alone, with its activation
  // conversion). Bytes: the weights streamed.
  for (const DecodeProduct& p : kDecodeProducts) {
    t.push_back({.family = "linear",
                 .name = std::string("lab_decode_") + p.name,
                 .shape = "m 1 [" + str(p.n) + " x " + str(p.k) + "] x " + str(p.groups),
                 .build =
                     [p](Run& r) {
                       const WeightView w{WeightFormat::kBF16, r.random_bf16(p.groups * p.n * p.k, 21, 0.02f), nullptr, p.groups * p.n, p.k};
                       const float* x = r.random_f32(p.groups * p.k, 22);
                       float* y = r.out<float>("y", sz(p.groups * p.n), Rule::kRelErr, 1e-5);
                       r.op = [=, &be = r.be] {
                         be.matmul({.x = x, .w = w, .y = y, .m = 1, .n = p.n, .k = p.k, .groups = p.groups, .x_group_stride = p.k,
                                    .y_group_stride = p.n});
                       };
                     },
                 .use = kLab,
                 .lab_precision = Precision::kBF16,
                 .bytes = static_cast<double>(p.groups * p.n * p.k * 2),
                 .flops = 2.0 * static_cast<double>(p.groups * p.n * p.k)});
  }
  // One token's six experts (of 64), up [2304 x 5120] and down [5120 x 2304], as one grouped op.
  for (auto [n, k] : {std::pair<int64_t, int64_t>{2304, 5120}, {5120, 2304}}) {
    const int64_t E = 64, rows = 6;
    t.push_back({.family = "linear",
                 .name = std::string("lab_decode_experts_x6_") + (n < k ? "up" : "down"),
                 .shape = "6 rows, 6 of 64 experts [" + str(n) + " x " + str(k) + "]",
                 .build =
                     [=](Run& r) {
                       std::vector<WeightView> w;
                       for (int64_t e = 0; e < E; ++e)
                         w.push_back({WeightFormat::kBF16, e < rows ? r.random_bf16(n * k, 30 + static_cast<uint64_t>(e), 0.02f) : w[0].data,
                                      nullptr, n, k});
                       std::vector<int32_t> off(sz(E + 1), static_cast<int32_t>(rows));
                       for (int64_t e = 0; e <= rows; ++e) off[sz(e)] = static_cast<int32_t>(e);
                       const WeightView* ws = r.keep(w);
                       const int32_t* doff = r.in(off);
                       const float* x = r.random_f32(rows * k, 23);
                       float* y = r.out<float>("y", sz(rows * n), Rule::kRelErr, 1e-5);
                       r.op = [=, &be = r.be] {
                         be.grouped_matmul({.x = x, .w = ws, .offsets = doff, .y = y, .rows = rows, .n = n, .k = k, .experts = E});
                       };
                     },
                 .use = kLab,
                 .lab_precision = Precision::kBF16,
                 .bytes = static_cast<double>(rows * n * k * 2),
                 .flops = 2.0 * static_cast<double>(rows * n * k)});
  }
}

}  // namespace deepinfer::op_cases
