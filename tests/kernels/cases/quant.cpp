// Cases of the fake quantisers (kernels/cpu/quant.cpp, kernels/cuda/quant.cu).
#include "kernels/cases/case_util.h"

namespace deepinfer::op_cases {

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
}

}  // namespace deepinfer::op_cases
