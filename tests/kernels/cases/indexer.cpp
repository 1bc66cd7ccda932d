// Cases of the indexer's scores (kernels/cpu/indexer.cpp, kernels/cuda/indexer.cu).
#include <cmath>

#include "kernels/cases/case_util.h"

namespace deepinfer::op_cases {

namespace {

// (was test_cuda_prefill.cpp's check_indexer) Scores of S queries over T keys; positions
// decreasing from the last visible one (16 apart) or random; within 1e-5 over the finite
// scores, the -inf ones exactly.
void add_prefill(std::vector<OpCase>& t, const std::string& name, int64_t S, int64_t T, int64_t H, int64_t dim, int64_t ratio,
                 bool decreasing, uint32_t seed) {
  t.push_back({.family = "indexer",
               .name = name,
               .shape = "S " + str(S) + ", T " + str(T) + ", " + str(H) + " heads x " + str(dim) + ", ratio " + str(ratio),
               .build =
                   [=](Run& r) {
                     const float *q = r.in(randn(sz(S * H * dim), seed)), *k = r.in(randn(sz(T * dim), seed + 1)),
                                 *w = r.in(randn(sz(S * H), seed + 2, 0.3f));
                     std::vector<int64_t> pos(sz(S));
                     std::mt19937 g(seed + 3);
                     std::uniform_int_distribution<int64_t> pick(0, T * ratio + 20);
                     for (int64_t i = 0; i < S; ++i) pos[sz(i)] = decreasing ? std::max<int64_t>(0, T * ratio - 1 - 16 * i) : pick(g);
                     const int64_t* dpos = r.in(pos);
                     float* sc = r.out<float>("scores", sz(S * T), Rule::kFiniteRelErr, 1e-5, NAN);
                     r.op = [=, &be = r.be] {
                       be.indexer_scores({.q = q, .k = k, .w = w, .q_pos = dpos, .scores = sc, .s = S, .heads = H, .dim = dim, .t = T,
                                          .ratio = ratio, .score_scale = 0.088f});
                     };
                   },
               .flops = 2.0 * static_cast<double>(S * T * H * dim)});
}

}  // namespace

void add_indexer(std::vector<OpCase>& t) {
  // (was Parity.AttentionIndexerTopkRouter) S = rows queries at positions 40 + 11 i over 40 keys,
  // ratio 2; within 1e-5.
  for (const Dims& d : kBothDims) {
    const int64_t S = d.rows, T = 40, H = d.idx_heads, dim = d.idx_dim;
    t.push_back({.family = "indexer",
                 .name = std::string("indexer_scores_") + d.name,
                 .shape = "S " + str(S) + ", T 40, " + str(H) + " heads x " + str(dim) + ", ratio 2",
                 .build =
                     [=](Run& r) {
                       const IndexerInputs in = indexer_inputs(S, T, H, dim);
                       const float *q = r.in(in.q), *k = r.in(in.k), *w = r.in(in.w);
                       const int64_t* pos = r.in(in.pos);
                       float* sc = r.out<float>("scores", sz(S * T), Rule::kRelErr, 1e-5);
                       r.op = [=, &be = r.be] {
                         be.indexer_scores({.q = q, .k = k, .w = w, .q_pos = pos, .scores = sc, .s = S, .heads = H, .dim = dim, .t = T,
                                            .ratio = 2, .score_scale = 0.1f});
                       };
                     },
                 .flops = 2.0 * static_cast<double>(S * T * H * dim)});
  }
  // (was CudaPrefill.IndexerScores)
  add_prefill(t, "prefill_released_causal", 512, 2048, 32, 128, 4, true, 300);  // causal mask over whole tiles
  add_prefill(t, "prefill_ragged_tiles", 77, 333, 32, 128, 1, false, 310);
  add_prefill(t, "prefill_fixture_dims", 37, 300, 8, 32, 2, false, 320);
  add_prefill(t, "prefill_dim_68", 9, 130, 64, 68, 1, false, 330);              // dim not a multiple of the 32-wide chunk
  add_prefill(t, "prefill_5_heads_fallback", 11, 50, 5, 12, 1, false, 340);     // heads not dividing 128: the fallback

  // The lab: s = 4096 x t = 2048, 32 heads x 128: all visible (dense), then causal (ratio 2:
  // half the products).
  for (const bool causal : {false, true}) {
    const int64_t S = 4096, T = 2048, H = 32, dim = 128;
    t.push_back({.family = "indexer",
                 .name = std::string("lab_4096x2048_") + (causal ? "causal" : "dense"),
                 .shape = "s 4096, t 2048, 32 heads x 128" + std::string(causal ? ", ratio 2" : ""),
                 .build =
                     [=](Run& r) {
                       const float *q = r.random_f32(S * H * dim, 1, 0.05f), *k = r.random_f32(T * dim, 2, 0.05f),
                                   *w = r.random_f32(S * H, 3, 0.1f, 0.5f);
                       std::vector<int64_t> hq(sz(S));
                       for (int64_t i = 0; i < S; ++i) hq[sz(i)] = causal ? i : T + i;
                       const int64_t* qp = r.in(hq);
                       float* sc = r.out<float>("scores", sz(S * T), Rule::kFiniteRelErr, 1e-5);
                       r.op = [=, &be = r.be] {
                         be.indexer_scores({.q = q, .k = k, .w = w, .q_pos = qp, .scores = sc, .s = S, .heads = H, .dim = dim, .t = T,
                                            .ratio = causal ? 2 : 1, .score_scale = 0.088f});
                       };
                     },
                 .use = kLab,
                 .bytes = static_cast<double>((S * H * dim + T * dim + S * H + S * T) * 4),
                 .flops = 2.0 * static_cast<double>(S * T * H * dim) * (causal ? 0.5 : 1.0)});
  }
}

}  // namespace deepinfer::op_cases
