// Cases of RMSNorm and RoPE (kernels/cpu/norm.cpp, kernels/cuda/norm.cu).
#include "kernels/cases/case_util.h"

namespace deepinfer::op_cases {

void add_norm(std::vector<OpCase>& t) {
  for (const Dims& d : kBothDims) {
    // (was Parity.NormRopeSwigluPoolQuant) RMSNorm [rows, D] with a weight; within 1e-5.
    t.push_back({.family = "norm",
                 .name = std::string("rms_norm_") + d.name,
                 .shape = "[" + str(d.rows) + " x " + str(d.D) + "]",
                 .build =
                     [d](Run& r) {
                       const float* x = r.in(randn(sz(d.rows * d.D), 3));
                       const float* w = r.in(randn(sz(d.D), 4));
                       float* y = r.out<float>("y", sz(d.rows * d.D), Rule::kRelErr, 1e-5);
                       r.op = [=, &be = r.be] { be.rms_norm({.x = x, .w = w, .y = y, .rows = d.rows, .dim = d.D, .eps = 1e-20f}); };
                     },
                 .bytes = static_cast<double>((2 * d.rows + 1) * d.D * 4)});
    // (was Parity.NormRopeSwigluPoolQuant) inverse RoPE on [rows, H, hd], 64 rotary dims (8 when
    // hd < 64), in place; within 1e-6.
    const int64_t rd = d.hd >= 64 ? 64 : 8;
    t.push_back({.family = "norm",
                 .name = std::string("rope_inverse_") + d.name,
                 .shape = "[" + str(d.rows) + " x " + str(d.H) + " x " + str(d.hd) + "], rope_dim " + str(rd),
                 .build =
                     [d, rd](Run& r) {
                       float* q = r.in(randn(sz(d.rows * d.H * d.hd), 5));
                       const float* cs = r.in(randn(sz(d.rows * rd / 2), 6));
                       const float* sn = r.in(randn(sz(d.rows * rd / 2), 7));
                       r.output("q", q, sz(d.rows * d.H * d.hd), Rule::kRelErr, 1e-6);
                       r.op = [=, &be = r.be] {
                         be.rope({.x = q, .cos = cs, .sin = sn, .rows = d.rows, .heads = d.H, .head_dim = d.hd, .rope_dim = rd,
                                  .inverse = true});
                       };
                     },
                 .bytes = static_cast<double>(d.rows * (2 * d.H * rd + rd) * 4)});
  }
  // The lab: RMSNorm [4096, 5120] (bytes: x read, y written).
  {
    const int64_t R = 4096, D = 5120;
    t.push_back({.family = "norm",
                 .name = "lab_rms_norm_4096",
                 .shape = "[" + str(R) + " x " + str(D) + "]",
                 .build =
                     [=](Run& r) {
                       const float* x = r.random_f32(R * D, 1);
                       const float* w = r.random_f32(D, 2, 0.1f, 1.0f);
                       float* y = r.out<float>("y", sz(R * D), Rule::kRelErr, 1e-5);
                       r.op = [=, &be = r.be] { be.rms_norm({.x = x, .w = w, .y = y, .rows = R, .dim = D}); };
                     },
                 .use = kLab,
                 .bytes = static_cast<double>(2 * R * D * 4)});
  }
}

}  // namespace deepinfer::op_cases
