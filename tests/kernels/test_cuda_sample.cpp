// CUDA tests of the draws (Backend::sample_rows): greedy rows against the CPU's argmax rule with
// planted ties, NaN and non-finite rows, and every row kind of draw_cases.h under the params grid
// against the CPU backend's tokens and logprobs, rows alone as in their batch. Built with
// DEEPINFER_CUDA=ON only (run on the device machine by scripts/device_run.sh).
#include <gtest/gtest.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "engine/draw_cases.h"
#include "kernels/cuda_test_util.h"

using namespace deepinfer;
using namespace deepinfer::kernels;
using namespace deepinfer::cuda_test;

namespace {

TEST(CudaSelect, GreedyDrawIsTheCpusArgmaxRule) {
  // Vocabulary-wide rows (the released 129280) with planted ties, NaN and all -inf rows.
  Backends b;
  const int64_t rows = 7, V = 129280;
  auto x = randn(static_cast<size_t>(rows * V), 90);
  const float inf = INFINITY, nan = NAN;
  x[0 * V + 70000] = x[0 * V + 90000] = 9.0f;     // tie across threads: the lower id
  x[1 * V + 129279] = 8.0f;
  x[2 * V + 100000] = nan;                          // a NaN: no token
  x[3 * V + 17] = inf;                              // +inf wins, the first of two
  x[3 * V + 18] = inf;
  x[4 * V + 129279] = 1e30f;                        // the last id
  x[5 * V + 2019] = x[5 * V + 2020] = 7.0f;         // a tie across the split greedy path's slices
  for (int64_t c = 0; c < V; ++c) x[6 * V + c] = -inf;  // nothing above -inf: no token
  std::vector<int32_t> cpu(rows);
  b.cpu->sample_rows({.x = x.data(), .ids = cpu.data(), .rows = rows, .cols = V});
  EXPECT_EQ(cpu[0], 70000);
  EXPECT_EQ(cpu[1], 129279);
  EXPECT_EQ(cpu[2], kNoToken);
  EXPECT_EQ(cpu[3], 17);
  EXPECT_EQ(cpu[4], 129279);
  EXPECT_EQ(cpu[5], 2019);
  EXPECT_EQ(cpu[6], kNoToken);
  Dev<float> dx(x);
  Dev<int32_t> dids(static_cast<size_t>(rows)), one(1);
  b.gpu->sample_rows({.x = dx.p, .ids = dids.p, .rows = rows, .cols = V});
  b.gpu->sample_rows({.x = dx.p, .ids = one.p, .rows = 1, .cols = V});  // (batch-1 decode)
  b.gpu->synchronize();
  EXPECT_EQ(dids.get(), cpu);
  EXPECT_EQ(one.get()[0], cpu[0]);
  // Rows enough for one block a row (more than the split path takes): the same ids.
  const int64_t many = 40;
  std::vector<float> xm(static_cast<size_t>(many * V));
  for (int64_t r = 0; r < many; ++r) std::copy(x.begin() + (r % rows) * V, x.begin() + (r % rows + 1) * V, xm.begin() + r * V);
  Dev<float> dxm(xm);
  Dev<int32_t> dm(static_cast<size_t>(many));
  b.gpu->sample_rows({.x = dxm.p, .ids = dm.p, .rows = many, .cols = V});
  b.gpu->synchronize();
  const auto got = dm.get();
  for (int64_t r = 0; r < many; ++r) EXPECT_EQ(got[static_cast<size_t>(r)], cpu[static_cast<size_t>(r % rows)]) << "row " << r;
}

TEST(CudaSelect, DrawsAreTheCpuBackendsTokens) {
  // Every row kind of draw_cases.h at the released vocabulary under the whole params grid: the
  // GPU's tokens equal the CPU backend's (which are the sampler's, test_backend_draw.cpp), and so
  // do the requested logprobs' ids (their values within 1e-6: fp64 sums in another order).
  // A row's token is also the same alone as in its batch.
  Backends b;
  const int64_t rows = 16, V = 129280;
  const auto x = deepinfer::testing::draw_rows(rows, V, 5);
  const auto grid = deepinfer::testing::draw_param_grid();
  Dev<float> dx(x);
  int64_t checked = 0, differ = 0, with_logprobs = 0;
  constexpr int64_t kLp = 20;
  for (size_t c0 = 0; c0 < grid.size(); c0 += 3) {
    std::vector<DrawParams> dp(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      const size_t c = (c0 + static_cast<size_t>(r)) % grid.size();
      dp[static_cast<size_t>(r)] = deepinfer::testing::draw_case(grid[c], c);
    }
    std::vector<int32_t> cpu(static_cast<size_t>(rows)), cpu_top(static_cast<size_t>(rows * kLp));
    std::vector<float> cpu_lp(static_cast<size_t>(rows)), cpu_top_lp(static_cast<size_t>(rows * kLp));
    b.cpu->sample_rows({.x = x.data(), .params = dp.data(), .ids = cpu.data(), .rows = rows, .cols = V, .logprob = cpu_lp.data(),
                        .top_ids = cpu_top.data(), .top_logprobs = cpu_top_lp.data(), .max_logprobs = kLp});
    Dev<DrawParams> dparams(dp);
    Dev<int32_t> dids(static_cast<size_t>(rows)), one(1), dtop(static_cast<size_t>(rows * kLp));
    Dev<float> dlp(static_cast<size_t>(rows)), dtop_lp(static_cast<size_t>(rows * kLp));
    b.gpu->sample_rows({.x = dx.p, .params = dparams.p, .ids = dids.p, .rows = rows, .cols = V, .logprob = dlp.p,
                        .top_ids = dtop.p, .top_logprobs = dtop_lp.p, .max_logprobs = kLp});
    const int64_t r1 = static_cast<int64_t>(c0 / 3) % rows;  // one row alone
    b.gpu->sample_rows({.x = dx.p + r1 * V, .params = dparams.p + r1, .ids = one.p, .rows = 1, .cols = V});
    b.gpu->synchronize();
    const auto gpu = dids.get();
    for (int64_t r = 0; r < rows; ++r) {
      const size_t c = (c0 + static_cast<size_t>(r)) % grid.size();
      ++checked;
      if (gpu[static_cast<size_t>(r)] != cpu[static_cast<size_t>(r)]) {
        ++differ;
        ADD_FAILURE() << "row " << r << " (kind " << r % 8 << "), case " << c << ": T " << grid[c].temperature
                      << " top_k " << grid[c].top_k << " top_p " << grid[c].top_p << " min_p " << grid[c].min_p
                      << ": GPU " << gpu[static_cast<size_t>(r)] << ", CPU " << cpu[static_cast<size_t>(r)];
      }
    }
    EXPECT_EQ(one.get()[0], gpu[static_cast<size_t>(r1)]) << "row " << r1 << " alone";
    const auto g_lp = dlp.get(), g_top_lp = dtop_lp.get();
    const auto g_top = dtop.get();
    for (int64_t r = 0; r < rows; ++r) {
      if (dp[static_cast<size_t>(r)].logprobs < 0) continue;
      ++with_logprobs;
      const auto i = static_cast<size_t>(r);
      if (std::isinf(cpu_lp[i])) EXPECT_EQ(g_lp[i], cpu_lp[i]) << "row " << r;
      else EXPECT_NEAR(g_lp[i], cpu_lp[i], 1e-6) << "row " << r;
      for (int64_t j = 0; j < kLp; ++j) {
        const auto at = static_cast<size_t>(r * kLp + j);
        EXPECT_EQ(g_top[at], cpu_top[at]) << "row " << r << " top " << j;
        if (std::isinf(cpu_top_lp[at])) EXPECT_EQ(g_top_lp[at], cpu_top_lp[at]) << "row " << r << " top " << j;
        else EXPECT_NEAR(g_top_lp[at], cpu_top_lp[at], 1e-6) << "row " << r << " top " << j;
      }
    }
  }
  std::printf("[draws] %lld rows drawn, %lld differ from the CPU backend; %lld with logprobs\n", static_cast<long long>(checked),
              static_cast<long long>(differ), static_cast<long long>(with_logprobs));
  EXPECT_GT(with_logprobs, 0);
}

}  // namespace
