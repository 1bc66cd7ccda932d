// The backend's draw (kernels::DrawParams through Backend::sample_rows) against the sampler:
// on the CPU backend, every token and every requested logprob is the one sample::Sampler gives
// for the same raw row; a row with a NaN or nothing finite has no token (kNoToken).
#include <gtest/gtest.h>

#include <cmath>
#include <span>
#include <vector>

#include "engine/draw_cases.h"
#include "kernels/backend.h"
#include "sample/rng.h"
#include "sample/sampler.h"

using namespace deepinfer;

namespace {

void expect_sampler_tokens(int64_t rows, int64_t vocab, const std::vector<SamplingParams>& grid, size_t stride) {
  auto be = kernels::make_cpu_backend(2);
  const std::vector<float> x = deepinfer::testing::draw_rows(rows, vocab, 5);
  sample::Sampler sampler;
  int64_t checked = 0, sampled = 0, with_logprobs = 0, no_token = 0;
  for (size_t c0 = 0; c0 < grid.size(); c0 += stride) {
    std::vector<kernels::DrawParams> dp(static_cast<size_t>(rows));
    std::vector<int32_t> ids(static_cast<size_t>(rows), -1);
    for (int64_t r = 0; r < rows; ++r) {
      const size_t c = (c0 + static_cast<size_t>(r)) % grid.size();
      dp[static_cast<size_t>(r)] = deepinfer::testing::draw_case(grid[c], c);
    }
    const int64_t max_lp = 20;
    std::vector<float> lp(static_cast<size_t>(rows)), top_lp(static_cast<size_t>(rows * max_lp));
    std::vector<int32_t> top_ids(static_cast<size_t>(rows * max_lp));
    be->sample_rows({.x = x.data(), .params = dp.data(), .ids = ids.data(), .rows = rows, .cols = vocab, .logprob = lp.data(),
                     .top_ids = top_ids.data(), .top_logprobs = top_lp.data(), .max_logprobs = max_lp});
    for (int64_t r = 0; r < rows; ++r) {
      const size_t c = (c0 + static_cast<size_t>(r)) % grid.size();
      sample::SampleRequest q;
      q.logits = std::span<const float>(x.data() + r * vocab, static_cast<size_t>(vocab));
      q.params = &grid[c];
      q.seed = 1000 + c;
      q.step = c % 5;
      const sample::SampleResult res = sampler.sample(q);
      if (deepinfer::testing::no_token_row(x.data() + r * vocab, vocab)) {  // the engine fails the request
        ASSERT_EQ(ids[static_cast<size_t>(r)], kernels::kNoToken) << "row " << r << ", case " << c;
        if (dp[static_cast<size_t>(r)].logprobs >= 0) {
          EXPECT_EQ(lp[static_cast<size_t>(r)], -INFINITY) << "row " << r;
        }
        ++no_token;
        continue;
      }
      const int32_t want = res.token;
      if (res.logprob) {  // the sampler's logprobs, bitwise
        EXPECT_EQ(lp[static_cast<size_t>(r)], res.logprob->logprob) << "row " << r << ", case " << c;
        for (int64_t j = 0; j < max_lp; ++j) {
          const bool in = j < static_cast<int64_t>(res.logprob->top.size());
          const size_t at = static_cast<size_t>(r * max_lp + j);
          EXPECT_EQ(top_ids[at], in ? res.logprob->top[static_cast<size_t>(j)].first : -1) << "row " << r << " top " << j;
          if (in) {
            EXPECT_EQ(top_lp[at], res.logprob->top[static_cast<size_t>(j)].second) << "row " << r << " top " << j;
          }
        }
        ++with_logprobs;
      }
      ASSERT_EQ(ids[static_cast<size_t>(r)], want) << "row " << r << " (kind " << r % 8 << "), case " << c << ": T "
                                                    << grid[c].temperature << " top_k " << grid[c].top_k << " top_p "
                                                    << grid[c].top_p << " min_p " << grid[c].min_p;
      ++checked;
      sampled += grid[c].temperature > 0.0f;
    }
  }
  EXPECT_GT(sampled, checked / 2);
  EXPECT_GT(with_logprobs, 0);
  EXPECT_GT(no_token, 0);
}

}  // namespace

TEST(BackendDraw, CpuBackendDrawsTheSamplersTokens) {
  // 2048 rows of 3000 ids: the whole grid against every row kind.
  expect_sampler_tokens(16, 3000, deepinfer::testing::draw_param_grid(), 1);
}

TEST(BackendDraw, CpuBackendAtTheReleasedVocabulary) {
  expect_sampler_tokens(16, 129280, deepinfer::testing::draw_param_grid(), 37);
}

TEST(BackendDraw, ParamsFromTheSamplingParams) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.top_k = 5;
  kernels::DrawParams d = engine::draw_params(p, 1, 2, 3);
  EXPECT_EQ(d.temperature, 0.0f);  // greedy: nothing else matters
  p.temperature = 0.8f;
  p.top_k = -1;  // vLLM's off
  p.top_p = 0.9f;
  p.min_p = 0.1f;
  d = engine::draw_params(p, 1, 2, 3);
  EXPECT_EQ(d.temperature, 0.8f);
  EXPECT_EQ(d.top_k, 0);
  EXPECT_EQ(d.top_p, 0.9f);
  EXPECT_EQ(d.log_min_p, std::log(static_cast<double>(0.1f)));
  EXPECT_EQ(d.u, sample::draw_uniform(1, 2, 3));
  p.min_p = 0.0f;
  EXPECT_EQ(engine::draw_params(p, 1, 2, 3).log_min_p, -INFINITY);
}
