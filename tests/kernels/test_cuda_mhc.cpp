// CUDA tests of the hyper-connections beyond one op's CPU-vs-CUDA comparison (those are the op
// case table's, cases/mhc.cpp): the mixes of a row alone giving its bits in a batch. Built with
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

}  // namespace
