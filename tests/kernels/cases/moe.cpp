// Cases of the router and the permutation by expert (kernels/cpu/moe.cpp, kernels/cuda/moe.cu).
#include "kernels/cases/case_util.h"

namespace deepinfer::op_cases {

void add_moe(std::vector<OpCase>& t) {
  // (was Parity.AttentionIndexerTopkRouter) the router (sqrt-softplus, bias, temperature 1.3,
  // scaling 1.5, normalised): the ids exactly, the weights within 1e-5.
  for (const Dims& d : kBothDims) {
    const int64_t S = d.rows, E = d.experts, K = d.topk;
    t.push_back({.family = "moe",
                 .name = std::string("router_") + d.name,
                 .shape = str(S) + " rows, top-" + str(K) + " of " + str(E),
                 .build =
                     [=](Run& r) {
                       const float *z = r.in(randn(sz(S * E), 26)), *bias = r.in(randn(sz(E), 27, 0.1f));
                       int32_t* ids = r.out<int32_t>("ids", sz(S * K), Rule::kBits);
                       float* w = r.out<float>("weights", sz(S * K), Rule::kRelErr, 1e-5);
                       r.op = [=, &be = r.be] {
                         be.router({.logits = z, .bias = bias, .ids = ids, .weights = w, .rows = S, .experts = E, .top_k = K, .temp = 1.3f,
                                    .routed_scaling = 1.5f, .normalize = true});
                       };
                     }});
  }
  // (was CudaMoe.PermuteIsBitwiseTheCpusStableSort) one token; the fixture shape; many chunks of
  // 1024 pairs; the released expert count; each with and without the shared expert appended.
  // Every output byte for byte.
  struct C {
    int64_t n, K, E;
  };
  for (C c : {C{1, 6, 64}, C{7, 2, 8}, C{5000, 6, 64}, C{9, 6, 384}})
    for (const bool shared : {false, true}) {
      const int64_t n = c.n, K = c.K, E = c.E;
      const size_t rows = sz(n * K + (shared ? n : 0));
      t.push_back({.family = "moe",
                   .name = "permute_n" + str(n) + "_k" + str(K) + "_e" + str(E) + (shared ? "_shared" : ""),
                   .shape = str(n) + " tokens x " + str(K) + " of " + str(E) + " experts" + (shared ? " + the shared expert" : ""),
                   .build =
                       [=](Run& r) {
                         const auto ids = random_routing(n, K, E, static_cast<uint32_t>(n + E));
                         const int32_t* dids = r.in(ids);
                         const float* dw = r.in(randn(ids.size(), 7));
                         int32_t* off = r.out<int32_t>("offsets", sz(E + (shared ? 2 : 1)), Rule::kBits);
                         int32_t* tok = r.out<int32_t>("perm_token", rows, Rule::kBits);
                         int32_t* slot = r.out<int32_t>("slot_row", ids.size(), Rule::kBits);
                         float* pw = r.out<float>("perm_weight", rows, Rule::kBits);
                         r.op = [=, &be = r.be] {
                           be.moe_permute({.ids = dids, .weights = dw, .offsets = off, .perm_token = tok, .perm_weight = pw, .slot_row = slot,
                                           .n = n, .k = K, .experts = E, .shared = shared});
                         };
                       }});
    }
}

}  // namespace deepinfer::op_cases
