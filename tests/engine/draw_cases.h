// Rows and sampling params for the backend-draw tests (test_backend_draw.cpp on the CPU,
// test_cuda_sample.cpp on the GPU): peaked, flat, tied and non-finite rows under a grid of
// temperature / top-k / top-p / min-p, each with its own seeded uniform.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "deepinfer/sampling_params.h"
#include "engine/engine.h"

namespace deepinfer::testing {

// rows [n_rows, vocab]: row r's kind is r % 8.
inline std::vector<float> draw_rows(int64_t n_rows, int64_t vocab, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> x(static_cast<size_t>(n_rows * vocab));
  for (int64_t r = 0; r < n_rows; ++r) {
    float* row = x.data() + r * vocab;
    const int kind = static_cast<int>(r % 8);
    for (int64_t i = 0; i < vocab; ++i) {
      const float z = nd(g);
      switch (kind) {
        case 0: row[i] = z; break;                                 // a language model's spread
        case 1: row[i] = 6.0f * z; break;                          // peaked
        case 2: row[i] = std::round(2.0f * z) / 2.0f; break;      // many ties
        case 3: row[i] = 0.05f * z; break;                         // nearly flat: top-p's long path
        case 4: row[i] = 1.0f; break;                              // flat: every weight tied
        case 5: row[i] = i % 7 == 3 ? nan : 3.0f * z; break;       // a NaN: no token
        case 6: row[i] = i % 11 == 0 ? -inf : (i % 2 ? z : -z); break;
        default: row[i] = i % 3 == 0 ? -inf : 2.0f * z; break;
      }
    }
    if (kind == 6) row[vocab / 3] = row[vocab / 2] = inf;  // +inf shares the mass
    if (kind == 7 && r % 16 == 15)
      for (int64_t i = 0; i < vocab; ++i) row[i] = -inf;  // nothing finite: no token
  }
  return x;
}

// Whether the backend's draw gives kernels::kNoToken for the row (a NaN, or nothing above -inf).
inline bool no_token_row(const float* row, int64_t vocab) {
  bool any = false;
  for (int64_t i = 0; i < vocab; ++i) {
    if (std::isnan(row[i])) return true;
    any = any || row[i] > -std::numeric_limits<float>::infinity();
  }
  return !any;
}

// A grid of params (every third asks for 0..20 logprobs); case c's seed is 1000 + c, its step c % 5.
inline std::vector<SamplingParams> draw_param_grid() {
  std::vector<SamplingParams> out;
  for (float t : {0.0f, 0.7f, 1.0f, 1.6f})
    for (int k : {0, 1, 20, 500})
      for (float p : {1.0f, 0.9f, 0.5f, 0.999f})
        for (float mp : {0.0f, 0.05f}) {
          SamplingParams s;
          s.temperature = t;
          s.top_k = k;
          s.top_p = p;
          s.min_p = mp;
          if (out.size() % 3 == 0) s.logprobs = static_cast<int>(out.size() % 7) + (out.size() % 9 == 0 ? 14 : 0);
          out.push_back(s);
        }
  return out;
}

inline kernels::DrawParams draw_case(const SamplingParams& p, size_t c) {
  return engine::draw_params(p, 1000 + c, c % 5, 0);
}

}  // namespace deepinfer::testing
