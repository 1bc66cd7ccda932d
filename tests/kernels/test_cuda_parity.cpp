// CUDA backend tests that are not one op's CPU-vs-CUDA comparison on random inputs (those are
// the op case table's: op_cases.h, test_cuda_cases.cpp): the mixes' rows alone giving their
// bits in a batch, the draws against the CPU's rules and tokens, the memory API. Built with
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

// mHC mixes of 1030 rows at the released width (4 rows per warp, every mix in one block, the
// slices in chunks through shared memory) against the CPU, and rows alone (a row per warp, 6 mixes per block, the fn slice staged in
// shared memory; and unstaged, fn at an address not 16-byte aligned) giving their bits in the
// batch.
TEST(CudaHyperConnections, MixesOfARowAloneAreItsBitsInABatch) {
  Backends b;
  const int64_t hc = 4, mix = 24, R = 1030, D = 5120;
  auto x = randn(static_cast<size_t>(R * hc * D), 24), fn = randn(static_cast<size_t>(mix * hc * D), 25, 0.02f),
       base = randn(static_cast<size_t>(mix), 26, 0.3f);
  std::vector<float> scale = {0.9f, 1.1f, 2.0f};
  std::vector<float> pre(static_cast<size_t>(R * hc)), post(pre.size()), comb(static_cast<size_t>(R * hc * hc));
  b.cpu->hc_mixes({.x = x.data(), .fn = fn.data(), .scale = scale.data(), .base = base.data(), .pre = pre.data(), .post = post.data(),
                   .comb = comb.data(), .rows = R, .hc = hc, .dim = D});
  std::vector<float> fn_shifted(fn.size() + 1, 0.0f);
  std::copy(fn.begin(), fn.end(), fn_shifted.begin() + 1);
  Dev<float> dx(x), dfn(fn), dfn1(fn_shifted), dbase(base), dscale(scale), dpre(pre.size()), dpost(post.size()), dcomb(comb.size());
  b.gpu->hc_mixes({.x = dx.p, .fn = dfn.p, .scale = dscale.p, .base = dbase.p, .pre = dpre.p, .post = dpost.p, .comb = dcomb.p,
                   .rows = R, .hc = hc, .dim = D});
  b.gpu->synchronize();
  const auto all_pre = dpre.get(), all_post = dpost.get(), all_comb = dcomb.get();
  EXPECT_LT(rel_err(pre, all_pre), 1e-5);
  EXPECT_LT(rel_err(post, all_post), 1e-5);
  EXPECT_LT(rel_err(comb, all_comb), 1e-5);
  // Rows [r0, r0 + n) of x (fn as given) in one call: the bits of those rows in the call above.
  auto same_bits = [&](int64_t r0, int64_t n, const float* f, const std::string& what) {
    Dev<float> p1(static_cast<size_t>(n * hc)), q1(p1.n), c1(static_cast<size_t>(n * hc * hc));
    b.gpu->hc_mixes({.x = dx.p + r0 * hc * D, .fn = f, .scale = dscale.p, .base = dbase.p, .pre = p1.p, .post = q1.p,
                     .comb = c1.p, .rows = n, .hc = hc, .dim = D});
    b.gpu->synchronize();
    EXPECT_EQ(0, std::memcmp(p1.get().data(), all_pre.data() + r0 * hc, p1.n * sizeof(float))) << what;
    EXPECT_EQ(0, std::memcmp(q1.get().data(), all_post.data() + r0 * hc, q1.n * sizeof(float))) << what;
    EXPECT_EQ(0, std::memcmp(c1.get().data(), all_comb.data() + r0 * hc * hc, c1.n * sizeof(float))) << what;
  };
  same_bits(0, 40, dfn.p, "rows 0..39 (a row per warp, staged; more than 48 KB of shared memory)");
  // Row counts whose staging grows past 48 KB after a smaller launch over it (7 rows, then 8:
  // 3 mixes per block), the 6-mix staging, and chunks from 160 rows.
  for (int64_t n : {int64_t{2}, int64_t{7}, int64_t{8}, int64_t{100}, int64_t{200}})
    same_bits(3, n, dfn.p, std::to_string(n) + " rows from row 3");
  same_bits(0, R, dfn1.p + 1, "all rows, fn not 16-byte aligned (from global memory, not in chunks through shared memory)");
  for (int64_t r : {int64_t{0}, int64_t{517}, R - 1}) {
    same_bits(r, 1, dfn.p, "row " + std::to_string(r) + " staged");
    same_bits(r, 1, dfn1.p + 1, "row " + std::to_string(r) + " unstaged");
  }
}


uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}
// Bitwise equality of two float arrays; names the first difference.
::testing::AssertionResult same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << "sizes " << a.size() << " vs " << b.size();
  for (size_t i = 0; i < a.size(); ++i)
    if (bits(a[i]) != bits(b[i])) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "%.9g (0x%08X) vs %.9g (0x%08X)", static_cast<double>(a[i]), bits(a[i]), static_cast<double>(b[i]),
                    bits(b[i]));
      return ::testing::AssertionFailure() << "element " << i << ": " << buf;
    }
  return ::testing::AssertionSuccess();
}

TEST(CudaSelect, GreedyDrawIsTheCpusArgmaxRule) {
  // Vocabulary-wide rows (the released 129280) with planted ties, NaN and all -inf rows.
  Backends b;
  const int64_t rows = 6, V = 129280;
  auto x = randn(static_cast<size_t>(rows * V), 90);
  const float inf = INFINITY, nan = NAN;
  x[0 * V + 70000] = x[0 * V + 90000] = 9.0f;     // tie across threads: the lower id
  x[1 * V + 5] = nan;                               // NaN ignored
  x[1 * V + 129279] = 8.0f;
  for (int64_t c = 0; c < V; ++c) x[2 * V + c] = c % 3 ? -inf : nan;  // nothing finite: 0
  x[3 * V + 17] = inf;                              // +inf wins, the first of two
  x[3 * V + 18] = inf;
  x[4 * V + 129279] = 1e30f;                        // the last id
  x[5 * V + 2019] = x[5 * V + 2020] = 7.0f;         // a tie across the split greedy path's slices
  std::vector<int32_t> cpu(rows);
  b.cpu->sample_rows({.x = x.data(), .ids = cpu.data(), .rows = rows, .cols = V});
  EXPECT_EQ(cpu[0], 70000);
  EXPECT_EQ(cpu[1], 129279);
  EXPECT_EQ(cpu[2], 0);
  EXPECT_EQ(cpu[3], 17);
  EXPECT_EQ(cpu[4], 129279);
  EXPECT_EQ(cpu[5], 2019);
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

// The memory API: stream-ordered alloc/release, uploads through the pinned staging ring
// (sources reused at once, more bytes than the ring, one upload larger than the ring), copy,
// zero, ordering with ops, download.
TEST(CudaMemory, RoundTrip) {
  auto gpu = make_cuda_backend(0);
  EXPECT_FALSE(gpu->host_memory());
  gpu->release(nullptr);
  gpu->release(gpu->alloc(0));
  gpu->upload(nullptr, nullptr, 0);
  gpu->download(nullptr, nullptr, 0);
  gpu->copy(nullptr, nullptr, 0);
  gpu->zero(nullptr, 0);

  std::mt19937 g(80);
  // Many small uploads (odd size, more bytes in all than the 8 MiB initial ring), each from a
  // host buffer that is overwritten and freed right after the call.
  auto small_round = [&](int64_t count, int64_t size) {
    auto* dev = static_cast<uint8_t*>(gpu->alloc(count * size));
    std::vector<uint8_t> expect(static_cast<size_t>(count * size));
    for (int64_t i = 0; i < count; ++i) {
      auto src = std::make_unique<std::vector<uint8_t>>(static_cast<size_t>(size));
      for (auto& x : *src) x = static_cast<uint8_t>(g());
      std::copy(src->begin(), src->end(), expect.begin() + i * size);
      gpu->upload(dev + i * size, src->data(), size);
      std::fill(src->begin(), src->end(), static_cast<uint8_t>(0xAB));
      src.reset();
    }
    std::vector<uint8_t> back(expect.size(), 0);
    gpu->download(back.data(), dev, static_cast<int64_t>(back.size()));
    gpu->release(dev);
    return back == expect;
  };
  EXPECT_TRUE(small_round(3000, 4099));  // ~12 MiB

  // One upload larger than the ring, then copy and zero.
  const int64_t big = (int64_t{20} << 20) + 13;
  std::vector<uint8_t> host(static_cast<size_t>(big));
  for (auto& x : host) x = static_cast<uint8_t>(g());
  auto* a = static_cast<uint8_t*>(gpu->alloc(big));
  auto* c = static_cast<uint8_t*>(gpu->alloc(big));
  {
    std::vector<uint8_t> tmp = host;
    gpu->upload(a, tmp.data(), big);
    std::fill(tmp.begin(), tmp.end(), static_cast<uint8_t>(0));
  }
  gpu->copy(c, a, big);
  gpu->zero(c + 1001, 777);
  std::vector<uint8_t> back_a(host.size()), back_c(host.size());
  gpu->download(back_a.data(), a, big);
  gpu->download(back_c.data(), c, big);
  EXPECT_TRUE(back_a == host);
  std::vector<uint8_t> expect_c = host;
  for (size_t i = 1001; i < 1001 + 777; ++i) expect_c[i] = 0;
  EXPECT_TRUE(back_c == expect_c);
  gpu->release(a);
  gpu->release(c);

  // After the ring grew: small uploads that wrap it again (~24 MiB).
  EXPECT_TRUE(small_round(6000, 4099));

  // Uploads, ops and downloads stay in stream order, without an explicit synchronize.
  const int64_t n = 1000;
  auto* x = static_cast<float*>(gpu->alloc(n * 4));
  std::vector<float> expect(static_cast<size_t>(n));
  for (int round = 0; round < 5; ++round) {
    std::vector<float> v = randn(static_cast<size_t>(n), 81 + static_cast<uint32_t>(round));
    gpu->upload(x, v.data(), n * 4);
    gpu->scale({.x = x, .n = n, .s = 2.0f});
    for (int64_t i = 0; i < n; ++i) expect[static_cast<size_t>(i)] = v[static_cast<size_t>(i)] * 2.0f;
    std::fill(v.begin(), v.end(), 0.0f);
  }
  std::vector<float> back(static_cast<size_t>(n));
  gpu->download(back.data(), x, n * 4);
  EXPECT_TRUE(same_bits(expect, back));
  gpu->release(x);
  gpu->synchronize();
}

}  // namespace
