// Cases of the gathers, scale, the MoE combine and the packed rows' dequantisation
// (kernels/cpu/gather.cpp, kernels/cuda/gather.cu): all bit for bit, each also against the
// host's own reading of the inputs where there is one.
#include <cmath>
#include <cstring>

#include "kernels/cases/case_util.h"
#include "model/quantize.h"

namespace deepinfer::op_cases {

namespace {

float from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
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

// (was Parity.GatherWeightRowsAllFormats) 13 rows (the last, the first, a repeat) of a [70, cols]
// matrix (three 32-row scale blocks, the last partial), quantised from floats with spread block
// scales, or raw random codes (NaN e4m3 codes, subnormals, every e2m1 code, ue8m0 scales
// 0..254), gathered with 1 and 4 copies, packed and with padded rows (the padding untouched):
// each layout bit for bit on both backends and equal to dequant_row's rows.
void add_gather_weight_rows(std::vector<OpCase>& t, int64_t cols, const std::string& tag) {
  const int64_t Rw = 70;
  for (auto fmt : {WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kFP8Block32, WeightFormat::kFP8Row32, WeightFormat::kMXFP4})
    for (const bool raw : {false, true}) {
      t.push_back({.family = "gather",
                   .name = std::string("gather_weight_rows_") + format_name(fmt) + (raw ? "_raw_" : "_quantised_") + tag,
                   .shape = "13 of [70 x " + str(cols) + "], copies 1 and 4, ldo packed and padded",
                   .build =
                       [=](Run& r) {
                         std::mt19937 g(static_cast<uint32_t>(cols));
                         std::uniform_int_distribution<int64_t> pick(0, Rw - 1);
                         std::vector<int64_t> ids(13);
                         for (auto& id : ids) id = pick(g);
                         ids[0] = Rw - 1;
                         ids[1] = 0;
                         ids[2] = ids[5];
                         auto wf = randn(sz(Rw * cols), 30, 0.3f);
                         for (size_t i = 0; i < wf.size(); i += 97) wf[i] *= 1e5f;
                         model::Weights owner;
                         const WeightView q = model::quantize_matrix(WeightView::f32(wf.data(), Rw, cols), fmt, owner);
                         WeightView w = q;
                         const auto vals = random_bytes(sz(value_bytes(q)), 31 + static_cast<uint32_t>(fmt));
                         const auto scs = random_bytes(sz(std::max<int64_t>(scale_bytes(q), 1)), 41 + static_cast<uint32_t>(fmt), 0, 254);
                         if (raw) {
                           w.data = vals.data();
                           w.scale = scale_bytes(q) ? scs.data() : nullptr;
                         }
                         if (value_bytes(w) + scale_bytes(w) != weight_bytes(w))
                           r.checks.push_back([](const Host&) { return std::string("weight_bytes is not the values' and the scales' bytes"); });
                         const WeightView dw = upload_weight(r, w);
                         const int64_t* dids = r.in(ids);
                         const int64_t rows = static_cast<int64_t>(ids.size());
                         std::vector<float> row(sz(cols));
                         std::vector<std::function<void()>> ops;
                         size_t at = 0;
                         for (auto [copies, pad] : {std::pair<int64_t, int64_t>{1, 0}, {4, 0}, {1, 5}, {4, 3}}) {
                           const int64_t ldo = pad ? copies * cols + pad : 0, stride = ldo ? ldo : copies * cols;
                           std::vector<float> expect(sz(rows * stride), -7.25f);  // padding must stay untouched
                           for (int64_t i = 0; i < rows; ++i) {
                             dequant_row(w, ids[sz(i)], row.data());
                             for (int64_t c = 0; c < copies; ++c) std::copy(row.begin(), row.end(), expect.begin() + i * stride + c * cols);
                           }
                           const std::string what = "copies " + str(copies) + " ldo " + str(ldo);
                           float* out = r.out<float>(what, expect.size(), Rule::kBits, 0, -7.25f);
                           ops.push_back([=, &be = r.be] {
                             be.gather_weight_rows({.w = dw, .ids = dids, .out = out, .rows = rows, .copies = copies, .ldo = ldo});
                           });
                           r.checks.push_back([expect, at, what](const Host& h) {
                             const auto got = as<float>(h[at]);
                             const std::string e = bits_differ(expect.data(), got.data(), expect.size());
                             return e.empty() ? e : "vs dequant_row, " + what + ": " + e;
                           });
                           ++at;
                         }
                         r.op = [ops] {
                           for (const auto& f : ops) f();
                         };
                       },
                   .bytes = static_cast<double>(13 * cols * (1 + 4 + 1 + 4) * 4)});
    }
}

}  // namespace

void add_gather(std::vector<OpCase>& t) {
  add_gather_weight_rows(t, 77, "cols77");  // odd, a partial 32-channel scale block (both dims' tests had it)
  for (const Dims& d : kBothDims) add_gather_weight_rows(t, d.D, d.name);

  for (const Dims& d : kBothDims) {
    // (was Parity.ScaleAndGatherRows) scale of [rows * D + 5] with specials (±0, ±inf,
    // subnormals, quiet NaNs with payloads: the NaN operand propagates), by a negative, a huge
    // and a subnormal factor.
    const size_t n = sz(d.rows * d.D + 5);
    for (auto [s, sname] : {std::pair{-0.3712f, "neg"}, {1e30f, "huge"}, {0x1p-130f, "subnormal"}})
      t.push_back({.family = "gather",
                   .name = std::string("scale_") + sname + "_" + d.name,
                   .shape = "[" + str(static_cast<int64_t>(n)) + "]",
                   .build =
                       [=](Run& r) {
                         auto x = randn(n, 50, 3.0f);
                         const uint32_t specials[] = {0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u, 0x00000001u,
                                                      0x80123456u, 0x7FC01234u, 0xFFC00000u, 0x7F7FFFFFu};
                         for (size_t i = 0; i < std::size(specials); ++i) x[i * 3] = from_bits(specials[i]);
                         float* dx = r.in(x);
                         r.output("x", dx, n, Rule::kBits);
                         r.op = [=, &be = r.be] { be.scale({.x = dx, .n = static_cast<int64_t>(n), .s = s}); };
                       },
                   .bytes = static_cast<double>(2 * n * 4)});
    // (was Parity.ScaleAndGatherRows) gather_rows: 3 rows per row of 40 of width D + 3 (a
    // signalling NaN copied as is), the first and last source rows among them; and each row
    // the source row it names.
    const int64_t src_rows = 40, width = d.D + 3, rows = 3 * d.rows;
    t.push_back({.family = "gather",
                 .name = std::string("gather_rows_") + d.name,
                 .shape = str(rows) + " of [40 x " + str(width) + "]",
                 .build =
                     [=](Run& r) {
                       auto src = randn(sz(src_rows * width), 51);
                       src[7] = from_bits(0x7FA00001u);
                       std::mt19937 g(52);
                       std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(src_rows - 1));
                       std::vector<int32_t> idx(sz(rows));
                       for (auto& i : idx) i = pick(g);
                       idx[0] = 0;
                       idx[1] = static_cast<int32_t>(src_rows - 1);
                       const float* dsrc = r.in(src);
                       const int32_t* didx = r.in(idx);
                       float* dst = r.out<float>("dst", sz(rows * width), Rule::kBits);
                       r.op = [=, &be = r.be] {
                         be.gather_rows({.src = dsrc, .idx = didx, .dst = dst, .rows = rows, .width = width});
                       };
                       r.checks.push_back([src, idx, width](const Host& h) {
                         const auto got = as<float>(h[0]);
                         for (size_t i = 0; i < idx.size(); ++i)
                           if (std::memcmp(got.data() + i * sz(width), src.data() + sz(idx[i]) * sz(width), sz(width) * 4) != 0)
                             return "row " + std::to_string(i) + " is not source row " + std::to_string(idx[i]);
                         return std::string();
                       });
                     },
                 .bytes = static_cast<double>(2 * rows * width * 4)});
  }

  // (was Parity.MoeCombine) K = top-k and 16 distinct experts (of at least 32) per token in no
  // particular order, expert rows shuffled, outputs of a wide dynamic range (so that another
  // summation order gives other bits: checked for K >= 3), with and without the shared
  // expert's output; bit for bit.
  for (const Dims& d : kBothDims)
    for (const int64_t K : {d.topk, int64_t{16}})
      for (const bool with_shared : {true, false}) {
        const int64_t n = d.rows, D = d.D, E = std::max<int64_t>(d.experts, 32);
        t.push_back({.family = "gather",
                     .name = "moe_combine_k" + str(K) + (with_shared ? "_shared_" : "_") + d.name,
                     .shape = str(n) + " tokens x " + str(K) + " slots x " + str(D),
                     .build =
                         [=](Run& r) {
                           std::mt19937 g(static_cast<uint32_t>(60 + K));
                           std::vector<int32_t> ids(sz(n * K)), slot_row(ids.size()), experts(sz(E));
                           std::iota(experts.begin(), experts.end(), 0);
                           for (int64_t i = 0; i < n; ++i) {
                             std::shuffle(experts.begin(), experts.end(), g);
                             std::copy(experts.begin(), experts.begin() + K, ids.begin() + i * K);
                           }
                           std::iota(slot_row.begin(), slot_row.end(), 0);
                           std::shuffle(slot_row.begin(), slot_row.end(), g);
                           auto eo = randn(sz(n * K * D), 61);
                           const auto mag = randn(eo.size(), 62, 4.0f);
                           for (size_t i = 0; i < eo.size(); ++i) eo[i] *= std::exp(mag[i]);
                           const auto shared = randn(sz(n * D), 63);
                           const float *deo = r.in(eo), *dsh = with_shared ? r.in(shared) : nullptr;
                           const int32_t *dids = r.in(ids), *dslot = r.in(slot_row);
                           float* y = r.out<float>("y", sz(n * D), Rule::kBits);
                           r.op = [=, &be = r.be] {
                             be.moe_combine({.expert_out = deo, .slot_row = dslot, .ids = dids, .shared = dsh, .y = y, .n = n, .k = K, .dim = D});
                           };
                           if (K >= 3) {  // the data can tell the orders apart: slot order gives other bits somewhere
                             std::vector<float> slot_order(sz(n * D), 0.0f);
                             for (int64_t i = 0; i < n; ++i)
                               for (int64_t k = 0; k < K; ++k)
                                 for (int64_t c = 0; c < D; ++c) slot_order[sz(i * D + c)] += eo[sz(slot_row[sz(i * K + k)] * D + c)];
                             if (with_shared)
                               for (size_t i = 0; i < slot_order.size(); ++i) slot_order[i] += shared[i];
                             r.checks.push_back([slot_order](const Host& h) {
                               const auto got = as<float>(h[0]);
                               return bits_differ(got.data(), slot_order.data(), got.size()).empty()
                                          ? std::string("test data insensitive to the summation order")
                                          : std::string();
                             });
                           }
                         },
                     .bytes = static_cast<double>((n * K * D + (with_shared ? 2 : 1) * n * D) * 4)});
      }

  // (was Parity.DequantPacked) the three packed forms of [rows, hd]: codes from the fake quantiser
  // (a wide range of block scales; its values must be the codes' values), then raw random codes
  // (ue8m0 scales up to 254: 255 = NaN against a NaN e4m3 code is payload-order dependent on
  // the CPU): bit for bit on both backends and equal to dequant_fake_quant's values.
  for (const Dims& d : kBothDims)
    for (auto [kind, block, kname] : {std::tuple{FakeQuant::kFp8Pow2, int64_t{32}, "fp8_pow2"},
                                      {FakeQuant::kFp4Pow2, int64_t{32}, "fp4_pow2"}, {FakeQuant::kFp4E4m3, int64_t{16}, "fp4_e4m3"}})
      for (const bool raw : {false, true}) {
        const int64_t rows = d.rows, dim = d.hd;
        t.push_back({.family = "gather",
                     .name = std::string("dequant_packed_") + kname + (raw ? "_raw_" : "_") + d.name,
                     .shape = "[" + str(rows) + " x " + str(dim) + "] block " + str(block),
                     .build =
                         [=](Run& r) {
                           const bool fp8 = kind == FakeQuant::kFp8Pow2;
                           const size_t code_bytes = sz(fp8 ? rows * dim : rows * dim / 2), scale_n = sz(rows * dim / block);
                           auto v = randn(sz(rows * dim), 70, 3.0f);
                           const auto mag = randn(v.size() / sz(block), 71, 6.0f);
                           for (size_t i = 0; i < v.size(); ++i) v[i] *= std::exp(mag[i / sz(block)]);
                           std::vector<uint8_t> codes(code_bytes), scales(scale_n);
                           make_cpu_backend(1)->fake_quant(
                               {.x = v.data(), .rows = rows, .dim = dim, .block = block, .kind = kind, .codes = codes.data(), .scales = scales.data()});
                           if (raw) {
                             codes = random_bytes(code_bytes, 72);
                             scales = random_bytes(scale_n, 73, 0, kind == FakeQuant::kFp4E4m3 ? 255 : 254);
                           }
                           std::vector<float> expect(v.size());
                           dequant_fake_quant(kind, codes.data(), scales.data(), rows, dim, block, expect.data());
                           if (!raw)
                             if (auto e = bits_differ(v.data(), expect.data(), v.size()); !e.empty())
                               r.checks.push_back([e](const Host&) { return "fake_quant values vs their codes: " + e; });
                           const uint8_t *dc = r.in(codes), *ds = r.in(scales);
                           float* out = r.out<float>("out", v.size(), Rule::kBits, 0, 1.5f);
                           r.op = [=, &be = r.be] {
                             be.dequant_packed({.kind = kind, .codes = dc, .scales = ds, .out = out, .rows = rows, .dim = dim, .block = block});
                           };
                           r.checks.push_back([expect](const Host& h) {
                             const auto got = as<float>(h[0]);
                             const std::string e = bits_differ(expect.data(), got.data(), expect.size());
                             return e.empty() ? e : "vs dequant_fake_quant: " + e;
                           });
                         },
                     .bytes = static_cast<double>(rows * dim * 4 + rows * dim / (kind == FakeQuant::kFp8Pow2 ? 1 : 2) + rows * dim / block)});
      }
}

}  // namespace deepinfer::op_cases
