// Cases of SwiGLU and the compressor's pooling (kernels/cpu/elementwise.cpp,
// kernels/cuda/elementwise.cu).
#include "kernels/cases/case_util.h"

namespace deepinfer::op_cases {

void add_elementwise(std::vector<OpCase>& t) {
  for (const Dims& d : kBothDims) {
    // (was Parity.NormRopeSwigluPoolQuant) SwiGLU [rows, inter] with clamps (limit 10, inputs of
    // scale 6) and per-row weights; within 1e-5.
    t.push_back({.family = "elementwise",
                 .name = std::string("swiglu_") + d.name,
                 .shape = "[" + str(d.rows) + " x " + str(d.inter) + "]",
                 .build =
                     [d](Run& r) {
                       const size_t n = sz(d.rows * d.inter);
                       const float* g = r.in(randn(n, 8, 6.0f));
                       const float* u = r.in(randn(n, 9, 6.0f));
                       const float* w = r.in(randn(sz(d.rows), 10));
                       float* o = r.out<float>("out", n, Rule::kRelErr, 1e-5);
                       r.op = [=, &be = r.be] {
                         be.swiglu({.gate = g, .up = u, .weight = w, .out = o, .rows = d.rows, .inter = d.inter, .limit = 10.0f});
                       };
                     },
                 .bytes = static_cast<double>(3 * d.rows * d.inter * 4)});
    // (was Parity.NormRopeSwigluPoolQuant) the compressor's pooling, 2 groups of ratio 2 over hd
    // channels; within 1e-5.
    t.push_back({.family = "elementwise",
                 .name = std::string("compress_pool_") + d.name,
                 .shape = "2 groups x 2 rows x " + str(d.hd),
                 .build =
                     [d](Run& r) {
                       const float* kv = r.in(randn(sz(4 * d.hd), 11));
                       const float* gt = r.in(randn(sz(4 * d.hd), 12));
                       float* o = r.out<float>("out", sz(2 * d.hd), Rule::kRelErr, 1e-5);
                       r.op = [=, &be = r.be] {
                         be.compress_pool({.kv = kv, .gate = gt, .out = o, .groups = 2, .ratio = 2, .dim = d.hd});
                       };
                     },
                 .bytes = static_cast<double>(10 * d.hd * 4)});
  }
}

}  // namespace deepinfer::op_cases
