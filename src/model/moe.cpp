#include "model/deepseek_v41.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"
#include "model/engram_rows.h"

namespace deepinfer::model {

using kernels::FakeQuant;

void DeepseekV41::moe(int64_t l, const float* xn, int64_t n, float* y, const kernels::HcExpandArgs& expand) {
  const auto& c = cfg_;
  const MoeWeights& F = block(l).ffn;
  const bool draft = l >= c.num_hidden_layers;  // a draft stage: its own experts
  const int64_t D = c.hidden_size, I = c.moe_intermediate_size;
  const int64_t E = draft ? c.dspark_n_routed_experts : c.n_routed_experts;
  const int64_t K = draft ? c.dspark_num_experts_per_tok : c.num_experts_per_tok;
  // The shared expert (expert E of F's tables) runs as one more expert of the grouped products
  // when it is stored like the routed ones (a backend's fast grouped path takes one format);
  // otherwise (a release checkpoint: FP4 experts, an FP8 shared expert) as dense products, its
  // gate and up in one op with the router'b.
  const auto same = [&](const std::vector<Mat>& w) { return w[static_cast<size_t>(E)].format == w[0].format; };
  const bool merged = same(F.w1) && same(F.w2) && same(F.w3);
  const int64_t R = n * K, rows = R + (merged ? n : 0), experts = E + (merged ? 1 : 0);
  kernels::Buf<float> logits(be_, n * E), sg(be_), su(be_), sa(be_), so(be_);
  if (merged) {
    linear(xn, n, F.gate, logits.data());
  } else {
    for (auto* b : {&sg, &su, &sa}) b->resize(n * I);
    so.resize(n * D);
    linears(xn, n, {{&F.gate, logits.data()}, {&F.w1[static_cast<size_t>(E)], sg.data()}, {&F.w3[static_cast<size_t>(E)], su.data()}});
  }
  kernels::Buf<int32_t> routed_ids(be_, n * K);
  kernels::Buf<float> routed_w(be_, n * K);
  int32_t* ids = routed_ids.data();
  float* wts = routed_w.data();
  kernels::ScoringFunc fn = c.scoring_func == "softmax"   ? kernels::ScoringFunc::kSoftmax
                            : c.scoring_func == "sigmoid" ? kernels::ScoringFunc::kSigmoid
                                                          : kernels::ScoringFunc::kSqrtSoftplus;
  // The routing, then (one op) its pairs grouped by expert (in backend memory: no round trip to the
  // host); expert e's rows are contiguous in the permuted order, and each product covers all experts.
  // Merged, the shared expert's rows follow: every token once, rows [n*K, n*K + n) in token
  // order, weight 1.
  kernels::Buf<int32_t> offsets(be_, E + 2), perm_token(be_, rows), slot_row(be_, R);
  kernels::Buf<float> perm_w(be_, rows);
  be_.route({.logits = logits.data(), .bias = F.bias, .ids = ids, .weights = wts, .rows = n, .experts = E,
             .top_k = K, .temp = static_cast<float>(c.gate_temp), .routed_scaling = static_cast<float>(c.routed_scaling_factor),
             .normalize = c.norm_topk_prob, .func = fn},
            {.ids = ids, .weights = wts, .offsets = offsets.data(), .perm_token = perm_token.data(),
             .perm_weight = perm_w.data(), .slot_row = slot_row.data(), .n = n, .k = K, .experts = E, .shared = merged});
  kernels::Buf<float> g(be_, rows * I), u(be_, rows * I), a(be_, rows * I), eo(be_, rows * D);
  const float limit = static_cast<float>(c.swiglu_limit);
  // Every expert's gate and up projections in one op, reading the tokens' rows in the permuted
  // order through the index (no gathered copy), then its down projection.
  be_.grouped_matmul({.x = xn, .w = F.w1.data(), .offsets = offsets.data(), .y = g.data(), .rows = rows, .n = I, .k = D,
                      .experts = experts, .w2 = F.w3.data(), .y2 = u.data(), .x_rows = perm_token.data(), .x_src_rows = n});
  be_.swiglu({.gate = g.data(), .up = u.data(), .weight = perm_w.data(), .out = a.data(), .rows = rows, .inter = I, .limit = limit});
  be_.grouped_matmul({.x = a.data(), .w = F.w2.data(), .offsets = offsets.data(), .y = eo.data(), .rows = rows, .n = D,
                      .k = I, .experts = experts});
  if (!merged) {
    be_.swiglu({.gate = sg.data(), .up = su.data(), .weight = nullptr, .out = sa.data(), .rows = n, .inter = I, .limit = limit});
    linear(sa.data(), n, F.w2[static_cast<size_t>(E)], so.data());
  }
  // Per token: routed outputs in ascending expert order (as the reference accumulates),
  // then the shared expert's; then (one op) the streams expanded with it.
  be_.moe_combine_expand({.expert_out = eo.data(), .slot_row = slot_row.data(), .ids = ids,
                          .shared = merged ? eo.data() + R * D : so.data(), .y = y, .n = n, .k = K, .dim = D},
                         expand);
}

void DeepseekV41::engram(int64_t l, ForwardBatch& b) {
  const auto& c = cfg_;
  const size_t j = static_cast<size_t>(std::find(c.engram_layer_ids.begin(), c.engram_layer_ids.end(), l) -
                                       c.engram_layer_ids.begin());
  const EngramWeights& e = w_.layers[static_cast<size_t>(l)].engram;
  const int64_t n = b.n_pad, cols = engram_->n_cols(), hd = c.engram_head_dim, D = c.hidden_size, hc = c.hc_mult;
  // Gather the hashed rows [n, cols * hd] (from the table, or from the step's staged rows: the
  // block stage_engram sent), project to hc keys + one value, gate into the streams. Float
  // rows, or FP8 rows times their power-of-two scales (exact in float).
  const EngramStep step(engram_tables_, engram_staged_, cols, n);
  kernels::Buf<float> rows(be_, n * cols * hd), kv(be_, n * (hc + 1) * D);
  be_.gather_weight_rows({.w = step.table(j, b.engram.data()), .ids = step.ids(j, b.engram.data()), .out = rows.data(),
                          .rows = n * cols});
  linear(rows.data(), n, e.wkv, kv.data());
  be_.engram_gate({.x = b.X.data(), .kv = kv.data(), .w = engram_qk_[j].data(), .rows = n, .hc = hc, .dim = D,
                   .eps = static_cast<float>(c.rms_norm_eps)});
}

}  // namespace deepinfer::model
