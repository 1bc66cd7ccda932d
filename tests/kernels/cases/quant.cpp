// Cases of the fake quantisers and of the weight quantiser to the release formats
// (kernels/cpu/quant.cpp, kernels/cuda/quant.cu).
#include <cmath>
#include <limits>
#include <utility>

#include "kernels/cases/case_util.h"

namespace deepinfer::op_cases {

namespace {

// Exact ties of each format at scale 1 (the block's amax is the largest code, so its scale is
// 2^0), with the codes round-to-nearest-even (e2m1: the reference's tie rule) gives them.
// e4m3: 1.0625 between 1 and 1.125 -> 1 (even), 1.1875 -> 1.25, 136 between 128 and 144 ->
// 128, 152 -> 160, 2^-10 between 0 and the smallest subnormal 2^-9 -> 0, 3 * 2^-10 -> 2^-8.
const std::vector<std::pair<float, uint8_t>>& ties(WeightFormat f) {
  static const std::vector<std::pair<float, uint8_t>> fp8 = {
      {448.0f, 0x7E},  {1.0625f, 0x38}, {1.1875f, 0x3A}, {-1.0625f, 0xB8}, {136.0f, 0x70},
      {152.0f, 0x72},  {0x1p-10f, 0x00}, {0x3p-10f, 0x02}, {-0x3p-10f, 0x82}, {0.0f, 0x00}};
  // e2m1 codes: 0, 0.5, 1, 1.5, 2, 3, 4, 6 (sign bit 8); 0.25, 1.25, 2.5, 5 round down,
  // 0.75, 1.75, 3.5 up.
  static const std::vector<std::pair<float, uint8_t>> fp4 = {
      {6.0f, 7},  {0.25f, 0}, {0.75f, 2}, {1.25f, 2}, {1.75f, 4}, {2.5f, 4},
      {3.5f, 6},  {5.0f, 6},  {-0.75f, 10}, {-5.0f, 14}, {-0.0f, 8}};
  return f == WeightFormat::kMXFP4 ? fp4 : fp8;
}

// A matrix to quantise: block rows (32 rows for kFP8Block32, else one) of normal values scaled
// by powers of two from 2^-149 to 2^120 block by block (subnormal to near-overflow), except
// block row 0: the ties at block column 0 and zeros (signed) at column 1; block row 1: a NaN,
// an infinity and a huge value at column 0 and one subnormal among zeros at column 1.
std::vector<float> weight_input(int64_t rows, int64_t cols, WeightFormat f, uint32_t seed) {
  std::vector<float> x = randn(sz(rows * cols), seed);
  const int64_t bh = f == WeightFormat::kFP8Block32 ? 32 : 1;
  static constexpr int kExp[] = {-149, -140, -126, -100, -20, -3, 0, 7, 60, 120};
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t br = r / bh, bc = c / 32, i = r * cols + c, in_block = (r % bh) * 32 + c % 32;
      float& v = x[sz(i)];
      if (br == 0 && bc == 0) {
        const auto& t = ties(f);
        v = t[sz(in_block) % t.size()].first;
      } else if (br == 0 && bc == 1) {
        v = in_block % 2 ? -0.0f : 0.0f;
      } else if (br == 1 && bc == 0) {
        if (in_block == 3) v = std::numeric_limits<float>::quiet_NaN();
        else if (in_block == 5) v = -std::numeric_limits<float>::infinity();
        else if (in_block == 6) v = 3.0e38f;
      } else if (br == 1 && bc == 1) {
        v = in_block == 7 ? -0x1p-149f : 0.0f;
      } else {
        v = std::ldexp(v, kExp[(br * 7 + bc) % 10]);
      }
    }
  return x;
}

}  // namespace

void add_quant(std::vector<OpCase>& t) {
  // (was Parity.NormRopeSwigluPoolQuant) the three fake quantisers on [rows, hd]: the values and
  // the stored codes and scales, bit for bit.
  for (const Dims& d : kBothDims)
    for (auto [kind, block, kname] : {std::tuple{FakeQuant::kFp8Pow2, int64_t{32}, "fp8_pow2"},
                                      {FakeQuant::kFp4Pow2, int64_t{32}, "fp4_pow2"}, {FakeQuant::kFp4E4m3, int64_t{16}, "fp4_e4m3"}}) {
      const int64_t rows = d.rows, dim = d.hd;
      const int64_t code_bytes = kind == FakeQuant::kFp8Pow2 ? rows * dim : rows * dim / 2;
      t.push_back({.family = "quant",
                   .name = std::string("fake_quant_") + kname + "_" + d.name,
                   .shape = "[" + str(rows) + " x " + str(dim) + "] block " + str(block),
                   .build =
                       [=](Run& r) {
                         float* x = r.in(randn(sz(rows * dim), 13, 3.0f));
                         r.output("values", x, sz(rows * dim), Rule::kBits);
                         uint8_t* codes = r.out<uint8_t>("codes", sz(code_bytes), Rule::kBits);
                         uint8_t* scales = r.out<uint8_t>("scales", sz(rows * dim / block), Rule::kBits);
                         r.op = [=, &be = r.be] {
                           be.fake_quant({.x = x, .rows = rows, .dim = dim, .block = block, .kind = kind, .codes = codes, .scales = scales});
                         };
                       },
                   .bytes = static_cast<double>(2 * rows * dim * 4 + code_bytes + rows * dim / block)});
    }

  // quantize_weight: the three release formats, codes and scales bit for bit, on shapes whose
  // rows and columns are not multiples of 32 (odd columns: a half-filled last FP4 byte), whole
  // or in row chunks (row0: whole 32-row blocks for kFP8Block32, 13 rows for the others),
  // with ties, zeros, subnormals, NaN and infinities (weight_input). Every backend's codes of
  // the ties are checked against the format's rounding.
  for (const WeightFormat f : {WeightFormat::kFP8Block32, WeightFormat::kFP8Row32, WeightFormat::kMXFP4})
    for (const auto& [rows, cols, chunk] : {std::tuple<int64_t, int64_t, int64_t>{70, 45, 0}, {100, 77, 1}, {256, 320, 0}}) {
      const bool block32 = f == WeightFormat::kFP8Block32, fp4 = f == WeightFormat::kMXFP4;
      const int64_t step = chunk ? (block32 ? 32 : 13) : rows;
      const int64_t code_cols = fp4 ? (cols + 1) / 2 : cols, sc_cols = (cols + 31) / 32;
      const int64_t sc_rows = block32 ? (rows + 31) / 32 : rows;
      t.push_back({.family = "quant",
                   .name = std::string("quantize_weight_") + format_name(f) + "_" + str(rows) + "x" + str(cols) +
                           (chunk ? "_chunks" + str(step) : ""),
                   .shape = "[" + str(rows) + " x " + str(cols) + "]" + (chunk ? " in chunks of " + str(step) + " rows" : ""),
                   .build =
                       [=](Run& r) {
                         const std::vector<float> hx = weight_input(rows, cols, f, 21);
                         const float* x = r.in(hx);
                         uint8_t* codes = r.out<uint8_t>("codes", sz(rows * code_cols), Rule::kBits, 0, uint8_t{0xA5});
                         uint8_t* scales = r.out<uint8_t>("scales", sz(sc_rows * sc_cols), Rule::kBits, 0, uint8_t{0xA5});
                         r.op = [=, &be = r.be] {
                           for (int64_t r0 = 0; r0 < rows; r0 += step)
                             be.quantize_weight({.x = x + r0 * cols, .rows = std::min(step, rows - r0), .cols = cols, .row0 = r0,
                                                 .format = f, .codes = codes, .scales = scales});
                         };
                         r.checks.push_back([=](const Host& h) -> std::string {
                           const auto& tie = ties(f);
                           if (h[1][0] != 127) return "the ties' block has scale code " + str(h[1][0]) + ", expected 127 (2^0)";
                           for (int64_t rr = 0; rr < (block32 ? 32 : 1); ++rr)
                             for (int64_t c = 0; c < 32; ++c) {
                               const auto& [v, want] = tie[sz(rr * 32 + c) % tie.size()];
                               const uint8_t byte = h[0][sz(rr * code_cols + (fp4 ? c / 2 : c))];
                               const uint8_t got = fp4 ? (c % 2 ? byte >> 4 : byte & 0xF) : byte;
                               if (got != want)
                                 return "tie " + std::to_string(v) + " at row " + str(rr) + " column " + str(c) + " has code " +
                                        str(got) + ", expected " + str(want);
                             }
                           return "";
                         });
                       },
                   .bytes = static_cast<double>(rows * cols * 4 + rows * code_cols + sc_rows * sc_cols)});
    }

  // The lab: an expert's w1 (MXFP4) and the attention's wq_b (FP8 blocks) at the released
  // dims, from values made on the backend (what random release weights do).
  for (const auto& [f, rows, cols, what] : {std::tuple{WeightFormat::kMXFP4, int64_t{2304}, int64_t{5120}, "expert_w1"},
                                            {WeightFormat::kFP8Block32, int64_t{32768}, int64_t{1280}, "wq_b"}}) {
    const int64_t code_bytes = f == WeightFormat::kMXFP4 ? rows * cols / 2 : rows * cols;
    const int64_t sc_bytes = (f == WeightFormat::kFP8Block32 ? rows / 32 : rows) * (cols / 32);
    t.push_back({.family = "quant",
                 .name = std::string("quantize_weight_") + what + "_released",
                 .shape = "[" + str(rows) + " x " + str(cols) + "] " + format_name(f),
                 .build =
                     [=](Run& r) {
                       const float* x = r.random_f32(rows * cols, 5, 0.02f);
                       uint8_t* codes = r.out<uint8_t>("codes", sz(code_bytes), Rule::kBits);
                       uint8_t* scales = r.out<uint8_t>("scales", sz(sc_bytes), Rule::kBits);
                       r.op = [=, &be = r.be] {
                         be.quantize_weight({.x = x, .rows = rows, .cols = cols, .format = f, .codes = codes, .scales = scales});
                       };
                     },
                 .use = kLab,
                 .bytes = static_cast<double>(rows * cols * 4 + code_bytes + sc_bytes)});
  }
}

}  // namespace deepinfer::op_cases
