// Cases of the top-k selections (kernels/cpu/select.cpp, kernels/cuda/select.cu): candidate
// blocks and the top-k mask, byte for byte.
#include <cmath>

#include "kernels/cases/case_util.h"

namespace deepinfer::op_cases {

namespace {

// Scores with many exact ties (a few distinct values), ±0, -inf; per-row patterns: all -inf,
// fewer finite than k, all distinct, all equal.
std::vector<float> tie_scores(int64_t rows, int64_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> nd;
  std::uniform_real_distribution<float> u;
  std::vector<float> v(sz(rows * n));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < n; ++j) {
      float& x = v[sz(r * n + j)];
      const float z = nd(g), c = u(g);
      switch (r % 7) {
        case 0: x = -INFINITY; break;
        case 1: x = c < 0.05f ? std::round(z * 2) / 2 : -INFINITY; break;
        case 2: x = z; break;
        case 3: x = 0.75f; break;
        default:
          x = c < 0.2f ? -INFINITY : c < 0.25f ? (c < 0.225f ? -0.0f : 0.0f) : std::round(z * 3) / 4;
          if (c > 0.999f) x = INFINITY;
      }
    }
  return v;
}

// (was test_cuda_prefill.cpp's check_topk)
void add_topk(std::vector<OpCase>& t, const std::string& name, int64_t rows, int64_t n, int64_t k, bool restrict, uint32_t seed) {
  t.push_back({.family = "select",
               .name = name,
               .shape = "[" + str(rows) + " x " + str(n) + "] k " + str(k) + (restrict ? ", restricted" : ""),
               .build =
                   [=](Run& r) {
                     std::vector<uint8_t> rs = random_bytes(sz(rows * n), seed + 1, 0, 4);
                     for (auto& x : rs) x = x != 0;
                     const float* sc = r.in(tie_scores(rows, n, seed));
                     const uint8_t* drs = restrict ? r.in(rs) : nullptr;
                     uint8_t* sel = r.out<uint8_t>("selected", sz(rows * n), Rule::kBits, 0, 7);
                     r.op = [=, &be = r.be] {
                       be.topk_mask({.scores = sc, .restrict_to = drs, .selected = sel, .s = rows, .t = n, .k = k});
                     };
                   },
               .bytes = static_cast<double>(rows * n * (4 + 1 + (restrict ? 1 : 0)))});
}

// (was test_cuda_prefill.cpp's check_candidates) Scores -inf past each row's visible entries, as
// the indexer writes them; every 11th row at position 0.
void add_candidates(std::vector<OpCase>& t, const std::string& name, int64_t rows, int64_t T, int64_t ratio, int64_t bs,
                    int64_t topk_blocks, uint32_t seed) {
  t.push_back({.family = "select",
               .name = name,
               .shape = "[" + str(rows) + " x " + str(T) + "] ratio " + str(ratio) + ", blocks of " + str(bs) + ", keep " + str(topk_blocks),
               .build =
                   [=](Run& r) {
                     auto sc = tie_scores(rows, T, seed);
                     std::vector<int64_t> pos(sz(rows));
                     std::mt19937 g(seed + 1);
                     std::uniform_int_distribution<int64_t> pick(0, T * ratio + 3 * bs * ratio);
                     for (int64_t i = 0; i < rows; ++i) {
                       pos[sz(i)] = i % 11 == 5 ? 0 : pick(g);
                       const int64_t vis = (pos[sz(i)] + 1) / ratio;
                       for (int64_t j = vis; j < T; ++j) sc[sz(i * T + j)] = -INFINITY;
                     }
                     const float* dsc = r.in(sc);
                     const int64_t* dpos = r.in(pos);
                     uint8_t* keep = r.out<uint8_t>("keep", sz(rows * T), Rule::kBits, 0, 7);
                     r.op = [=, &be = r.be] {
                       be.candidate_blocks({.scores = dsc, .q_pos = dpos, .keep = keep, .s = rows, .t = T, .ratio = ratio, .block_size = bs,
                                            .topk_blocks = topk_blocks});
                     };
                   },
               .bytes = static_cast<double>(rows * T * (4 + 1))});
}

}  // namespace

void add_select(std::vector<OpCase>& t) {
  // (was Parity.AttentionIndexerTopkRouter) candidate blocks (blocks of 4, keep 3, ratio 2) then the
  // top-6 restricted to them, on the CPU's indexer scores of that test; byte for byte.
  for (const Dims& d : kBothDims) {
    const int64_t S = d.rows, T = 40, H = d.idx_heads, dim = d.idx_dim;
    t.push_back({.family = "select",
                 .name = std::string("candidates_then_topk_") + d.name,
                 .shape = "[" + str(S) + " x 40], blocks of 4, keep 3, then top-6",
                 .build =
                     [=](Run& r) {
                       const IndexerInputs in = indexer_inputs(S, T, H, dim);
                       std::vector<float> scores(sz(S * T));
                       make_cpu_backend(1)->indexer_scores({.q = in.q.data(), .k = in.k.data(), .w = in.w.data(), .q_pos = in.pos.data(),
                                                            .scores = scores.data(), .s = S, .heads = H, .dim = dim, .t = T, .ratio = 2,
                                                            .score_scale = 0.1f});
                       const float* sc = r.in(scores);
                       const int64_t* pos = r.in(in.pos);
                       uint8_t* keep = r.out<uint8_t>("keep", sz(S * T), Rule::kBits);
                       uint8_t* topk = r.out<uint8_t>("top-k", sz(S * T), Rule::kBits);
                       r.op = [=, &be = r.be] {
                         be.candidate_blocks({.scores = sc, .q_pos = pos, .keep = keep, .s = S, .t = T, .ratio = 2, .block_size = 4,
                                              .topk_blocks = 3});
                         be.topk_mask({.scores = sc, .restrict_to = keep, .selected = topk, .s = S, .t = T, .k = 6});
                       };
                     }});
  }
  // (was CudaPrefill.TopkMask)
  add_topk(t, "topk_4096x2048_k512", 4096, 2048, 512, false, 400);
  add_topk(t, "topk_4096x2048_k512_restricted", 4096, 2048, 512, true, 410);
  add_topk(t, "topk_k_equals_n", 70, 2048, 2048, true, 420);
  add_topk(t, "topk_k_above_n", 70, 1000, 3000, false, 430);
  add_topk(t, "topk_k1", 70, 1000, 1, true, 440);
  add_topk(t, "topk_k0", 70, 1000, 0, false, 450);
  add_topk(t, "topk_fixture_size", 7, 40, 6, true, 460);
  add_topk(t, "topk_20000_keys", 3, 20000, 512, true, 470);  // more keys than the shared-memory key cache holds
  // (was CudaPrefill.CandidateBlocks)
  add_candidates(t, "candidates_4096x2048", 4096, 2048, 4, 8, 64, 500);
  add_candidates(t, "candidates_partial_last_block", 512, 2045, 1, 8, 100, 510);
  add_candidates(t, "candidates_keep_above_blocks", 100, 2048, 4, 8, 2048, 520);
  add_candidates(t, "candidates_64x333", 64, 333, 2, 5, 7, 530);
  add_candidates(t, "candidates_fixture_size", 7, 40, 2, 4, 3, 540);
  add_candidates(t, "candidates_100000_keys", 3, 100000, 4, 8, 64, 550);  // more blocks than the key cache holds

  // The lab: [4096 x 2048] uniform scores: top-512 with and without a restriction mask (all
  // allowed), and candidate blocks (256 blocks of 8, keep 64). Bytes: scores and masks once.
  const int64_t S = 4096, T = 2048;
  auto lab_scores = [] {
    std::vector<float> hs(sz(S * T));
    uint32_t x = 12345;
    for (auto& v : hs) {
      x = x * 1664525u + 1013904223u;
      v = static_cast<float>(x >> 8) * 0x1p-24f;
    }
    return hs;
  };
  for (const bool restrict : {false, true})
    t.push_back({.family = "select",
                 .name = std::string("lab_topk_4096x2048_k512") + (restrict ? "_restricted" : ""),
                 .shape = "[4096 x 2048] k 512",
                 .build =
                     [=](Run& r) {
                       const float* sc = r.in(lab_scores());
                       const uint8_t* rs = restrict ? r.in(std::vector<uint8_t>(sz(S * T), 1)) : nullptr;
                       uint8_t* sel = r.out<uint8_t>("selected", sz(S * T), Rule::kBits);
                       r.op = [=, &be = r.be] { be.topk_mask({.scores = sc, .restrict_to = rs, .selected = sel, .s = S, .t = T, .k = 512}); };
                     },
                 .use = kLab,
                 .bytes = static_cast<double>(S * T * (4 + 1 + (restrict ? 1 : 0)))});
  t.push_back({.family = "select",
               .name = "lab_candidates_4096x2048",
               .shape = "[4096 x 2048] ratio 4, 256 blocks of 8, keep 64",
               .build =
                   [=](Run& r) {
                     const float* sc = r.in(lab_scores());
                     const int64_t* qp = r.in(std::vector<int64_t>(sz(S), 4 * T - 1));
                     uint8_t* keep = r.out<uint8_t>("keep", sz(S * T), Rule::kBits);
                     r.op = [=, &be = r.be] {
                       be.candidate_blocks({.scores = sc, .q_pos = qp, .keep = keep, .s = S, .t = T, .ratio = 4, .block_size = 8, .topk_blocks = 64});
                     };
                   },
               .use = kLab,
               .bytes = static_cast<double>(S * T * (4 + 1))});
}

}  // namespace deepinfer::op_cases
