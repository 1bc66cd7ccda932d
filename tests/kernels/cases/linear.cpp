// Cases of the products (kernels/cpu/linear.cpp, kernels/cuda/linear*.cu): matmul in every
// weight format, the grouped product of weights not stored as bf16, and the lab's shapes (the
// wq_b product at decode and prefill, a decode step's dense products, one token's experts).
#include "kernels/cases/case_util.h"
#include "model/quantize.h"

namespace deepinfer::op_cases {

void add_linear(std::vector<OpCase>& t) {
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
  struct P {
    const char* name;
    int64_t n, k, groups;
  };
  for (const P& p : {P{"wq_a", 1280, 5120, 1}, P{"wkv", 512, 5120, 1}, P{"wq_b", 32768, 1280, 1}, P{"wo_a_8_groups", 1024, 4096, 8},
                     P{"wo_b", 5120, 8192, 1}, P{"router", 64, 5120, 1}, P{"shared_gate", 2304, 5120, 1},
                     P{"shared_down", 5120, 2304, 1}, P{"head", 129280, 5120, 1}}) {
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
