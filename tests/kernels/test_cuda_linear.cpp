// CUDA tests of the bf16 products beyond one CPU-vs-CUDA comparison (the plain ones, the
// permutation by expert and the grouped product of other formats, are the op case table's:
// cases/moe.cpp, cases/linear.cpp): the grouped expert product and the dense product on bf16
// tensor cores against the CPU's bf16 emulation with a row's bits the same whatever else is in
// the launch, the tilings' bits against each other, the multi and paired products' bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "kernels/backend.h"
#include "kernels/cuda/gemm_split.h"
#include "kernels/cuda_test_util.h"

using namespace deepinfer;
using namespace deepinfer::kernels;
using namespace deepinfer::cuda_test;

namespace {

// K distinct experts per token, in no particular order.
std::vector<int32_t> random_routing(int64_t n, int64_t K, int64_t E, uint32_t seed) {
  std::mt19937 g(seed);
  std::vector<int32_t> ids(static_cast<size_t>(n * K)), experts(static_cast<size_t>(E));
  std::iota(experts.begin(), experts.end(), 0);
  for (int64_t t = 0; t < n; ++t) {
    std::shuffle(experts.begin(), experts.end(), g);
    std::copy(experts.begin(), experts.begin() + K, ids.begin() + t * K);
  }
  return ids;
}

struct Permuted {
  std::vector<int32_t> offsets, perm_token, slot_row;
  std::vector<float> perm_weight;
};

Permuted permute_cpu(const std::vector<int32_t>& ids, const std::vector<float>& w, int64_t n, int64_t K, int64_t E,
                     bool shared = false) {
  auto cpu = make_cpu_backend(1);
  const size_t rows = ids.size() + (shared ? static_cast<size_t>(n) : 0);
  Permuted p{std::vector<int32_t>(static_cast<size_t>(E + (shared ? 2 : 1))), std::vector<int32_t>(rows),
             std::vector<int32_t>(ids.size()), std::vector<float>(rows)};
  cpu->moe_permute({.ids = ids.data(), .weights = w.data(), .offsets = p.offsets.data(), .perm_token = p.perm_token.data(),
                    .perm_weight = p.perm_weight.data(), .slot_row = p.slot_row.data(), .n = n, .k = K, .experts = E,
                    .shared = shared});
  return p;
}

// The experts' weights as bf16 on the host and the device.
struct Experts {
  std::vector<std::vector<uint16_t>> host;
  std::vector<std::unique_ptr<Dev<uint16_t>>> dev;
  std::vector<WeightView> hv, dv;
  Experts(int64_t E, int64_t n, int64_t k, uint32_t seed) {
    for (int64_t e = 0; e < E; ++e) {
      const auto f = randn(static_cast<size_t>(n * k), seed + static_cast<uint32_t>(e), 0.05f);
      std::vector<uint16_t> b(f.size());
      for (size_t i = 0; i < f.size(); ++i) b[i] = core::f32_to_bf16(f[i]);
      host.push_back(std::move(b));
      dev.push_back(std::make_unique<Dev<uint16_t>>(host.back()));
      hv.push_back({WeightFormat::kBF16, host.back().data(), nullptr, n, k});
      dv.push_back({WeightFormat::kBF16, dev.back()->p, nullptr, n, k});
    }
  }
};

// x ([rows, k], rows grouped by expert at offsets off) through ex's experts on the CPU (its
// bf16 emulation: ref) and on the GPU (got).
struct RefGot {
  std::vector<float> ref, got;
};
RefGot grouped_on_both(Backend& cpu, Backend& gpu, const Experts& ex, const std::vector<int32_t>& off, const std::vector<float>& x) {
  const int64_t E = static_cast<int64_t>(ex.dv.size()), n = ex.dv[0].rows, k = ex.dv[0].cols;
  const int64_t rows = static_cast<int64_t>(x.size()) / k;
  RefGot o{std::vector<float>(static_cast<size_t>(rows * n)), {}};
  cpu.grouped_matmul({.x = x.data(), .w = ex.hv.data(), .offsets = off.data(), .y = o.ref.data(), .rows = rows, .n = n, .k = k,
                      .experts = E});
  Dev<float> dx(x), dy(o.ref.size());
  Dev<int32_t> doff(off);
  gpu.grouped_matmul({.x = dx.p, .w = ex.dv.data(), .offsets = doff.p, .y = dy.p, .rows = rows, .n = n, .k = k, .experts = E});
  gpu.synchronize();
  o.got = dy.get();
  return o;
}

// Row r of x ([rows, k]) through expert e alone, in a launch of one row (the decode tiling).
std::vector<float> expert_row_alone(Backend& gpu, const Experts& ex, const std::vector<float>& x, int64_t e, int64_t r) {
  const int64_t E = static_cast<int64_t>(ex.dv.size()), n = ex.dv[0].rows, k = ex.dv[0].cols;
  std::vector<int32_t> one(static_cast<size_t>(E + 1), 0);
  for (int64_t j = e + 1; j <= E; ++j) one[static_cast<size_t>(j)] = 1;
  Dev<float> dx1(std::vector<float>(x.begin() + r * k, x.begin() + (r + 1) * k)), dy1(static_cast<size_t>(n));
  Dev<int32_t> doff1(one);
  gpu.grouped_matmul({.x = dx1.p, .w = ex.dv.data(), .offsets = doff1.p, .y = dy1.p, .rows = 1, .n = n, .k = k, .experts = E});
  gpu.synchronize();
  return dy1.get();
}

// rows sorted by expert: offsets from a routing of `tokens` tokens.
std::vector<int32_t> offsets_of(int64_t tokens, int64_t K, int64_t E, uint32_t seed) {
  const auto ids = random_routing(tokens, K, E, seed);
  return permute_cpu(ids, std::vector<float>(ids.size(), 1.0f), tokens, K, E).offsets;
}

TEST(CudaLinear, GroupedMatmulBf16MatchesTheCpuAndIsRowInvariant) {
  auto cpu = make_cpu_backend(0, Precision::kBF16);
  auto gpu = make_cuda_backend(0, Precision::kBF16);
  const int64_t E = 64, K = 6;
  // The released expert shapes: up (k 5120 -> n 2304) and down (2304 -> 5120); 1 token (the
  // decode tiling) and 200 tokens (the prefill tiling).
  for (auto [n, k] : {std::pair<int64_t, int64_t>{2304, 5120}, {5120, 2304}}) {
    Experts ex(E, n, k, 100);
    for (int64_t tokens : {1, 200}) {
      const auto off = offsets_of(tokens, K, E, static_cast<uint32_t>(tokens));
      const int64_t rows = tokens * K;
      const auto x = randn(static_cast<size_t>(rows * k), 11);
      const auto [ref, got] = grouped_on_both(*cpu, *gpu, ex, off, x);
      const double err = rel_err(ref, got);
      std::printf("[grouped %lld x %lld, %lld rows] rel err vs the CPU's bf16 emulation %.3g\n", static_cast<long long>(n),
                  static_cast<long long>(k), static_cast<long long>(rows), err);
      EXPECT_LT(err, 2e-5);
      if (tokens == 1) continue;
      // Rows of the big launch again, each alone in a launch of its own (the small-tile
      // configuration): the same bits.
      for (int64_t e : {int64_t{0}, int64_t{17}, E - 1}) {
        const int32_t r = off[static_cast<size_t>(e)];
        if (off[static_cast<size_t>(e) + 1] == r) continue;
        EXPECT_EQ(std::memcmp(expert_row_alone(*gpu, ex, x, e, r).data(), got.data() + r * n, static_cast<size_t>(n) * 4), 0)
            << "expert " << e << " row " << r;
      }
    }
  }
}

TEST(CudaLinear, DenseBf16MatmulIsRowInvariantAndMatchesTheCpu) {
  // The bf16 mma kernel as the dense product (bf16 weights): a row's bits are the same in a
  // product of 1, 37, 300 or 600 rows (other tilings; split over k into blocks up to 512 rows,
  // folded in registers above), and grouped strided products (the output projection's shape)
  // match the CPU's emulation. Shapes: 2 k segments (n 320, k 1280), 10 (the router's 64 x 5120).
  auto cpu = make_cpu_backend(0, Precision::kBF16);
  struct Shape {
    int64_t n, k, G;
    int segments;
  };
  for (const Shape sh : {Shape{320, 1280, 4, 2}, Shape{64, 5120, 1, 10}})
    for (bool invariant : {true, false}) {
      auto gpu = make_cuda_backend(0, Precision::kBF16, invariant);
      const int64_t n = sh.n, k = sh.k, G = sh.G, rows = 600;
      EXPECT_EQ(cuda::gemm_split_segments(n, k, G, false), sh.segments);
      Experts w(1, G * n, k, 500);
      const auto x = randn(static_cast<size_t>(rows * G * k), 501);
      Dev<float> dx(x);
      // Plain product over the first k columns of each row (ldx = G*k).
      std::vector<float> ref(static_cast<size_t>(rows * n));
      cpu->matmul({.x = x.data(), .w = w.hv[0], .y = ref.data(), .m = rows, .n = n, .k = k, .ldx = G * k});
      std::vector<std::vector<float>> got;
      const std::vector<int64_t> ms{1, 37, 300, rows};
      for (int64_t m : ms) {
        Dev<float> dy(static_cast<size_t>(m * n));
        gpu->matmul({.x = dx.p, .w = w.dv[0], .y = dy.p, .m = m, .n = n, .k = k, .ldx = G * k});
        gpu->synchronize();
        got.push_back(dy.get());
      }
      EXPECT_LT(rel_err(ref, got.back()), 2e-5) << "n " << n << ", invariant " << invariant;
      if (invariant) {  // (non-invariant mode may hand large products to cuBLAS)
        for (size_t i = 0; i + 1 < ms.size(); ++i) {
          EXPECT_EQ(std::memcmp(got[i].data(), got.back().data(), static_cast<size_t>(ms[i] * n) * 4), 0)
              << "n " << n << ": the first " << ms[i] << " rows alone";
        }
      }
      if (G == 1) continue;
      // Grouped: group g multiplies columns [g*k, +k) by weight rows [g*n, +n) into y columns [g*n, +n).
      std::vector<float> gref(static_cast<size_t>(rows * G * n));
      const MatmulArgs ga{.x = x.data(), .w = w.hv[0], .y = gref.data(), .m = rows, .n = n, .k = k, .groups = G,
                          .x_group_stride = k, .y_group_stride = n};
      cpu->matmul(ga);
      std::vector<std::vector<float>> ggot;
      for (int64_t m : {int64_t{3}, rows}) {
        Dev<float> gy(static_cast<size_t>(m * G * n));
        MatmulArgs gd = ga;
        gd.x = dx.p;
        gd.w = w.dv[0];
        gd.y = gy.p;
        gd.m = m;
        gpu->matmul(gd);
        gpu->synchronize();
        ggot.push_back(gy.get());
      }
      EXPECT_LT(rel_err(gref, ggot[1]), 2e-5) << "grouped, invariant " << invariant;
      if (invariant) {
        EXPECT_EQ(std::memcmp(ggot[0].data(), ggot[1].data(), static_cast<size_t>(3 * G * n) * 4), 0) << "grouped, 3 rows alone";
      }
    }
}

// The decode tiling (at most 16 rows; float32 x rounded in the kernel; k segments on blocks of
// their own, partial sums added by each tile's last block) against the wider tiling at 40 rows
// (64 x 128 tiles, bf16 x): the same bits, row by row. Shapes: a wide product (not split),
// wo_a's 8 groups (split), a product of one k slice group.
TEST(CudaLinear, DecodeProductHasTheBitsOfTheWiderTiling) {
  auto cpu = make_cpu_backend(0, Precision::kBF16);
  auto gpu = make_cuda_backend(0, Precision::kBF16);
  struct Shape {
    int64_t n, k, G;
  };
  for (const Shape sh : {Shape{25344, 5120, 1}, Shape{1024, 4096, 8}, Shape{640, 512, 1}}) {
    const int64_t n = sh.n, k = sh.k, G = sh.G, rows = 40;
    Experts w(1, G * n, k, 40);
    const auto x = randn(static_cast<size_t>(rows * G * k), 41);
    Dev<float> dx(x);
    auto run = [&](int64_t m) {
      Dev<float> dy(static_cast<size_t>(m * G * n));
      gpu->matmul({.x = dx.p, .w = w.dv[0], .y = dy.p, .m = m, .n = n, .k = k, .groups = G, .x_group_stride = k,
                   .y_group_stride = n});
      gpu->synchronize();
      return dy.get();
    };
    const auto all = run(rows);
    std::vector<float> ref(all.size());
    cpu->matmul({.x = x.data(), .w = w.hv[0], .y = ref.data(), .m = rows, .n = n, .k = k, .groups = G, .x_group_stride = k,
                 .y_group_stride = n});
    EXPECT_LT(rel_err(ref, all), 2e-5) << "n " << n << " k " << k;
    for (int64_t m : {1, 3, 16}) {
      const auto got = run(m);
      EXPECT_EQ(std::memcmp(got.data(), all.data(), got.size() * 4), 0) << "n " << n << " k " << k << ": " << m << " rows";
    }
  }
}

// Products of more than 128 rows per tile (128 x 256 tiles of warpgroup products on sm_90a;
// 128 x 128 where the k segments fold): every row the bits of the decode tiling's
// and the 64 x 128 tiling's, and within the CPU's bf16 emulation. A dense product too wide to
// split (266 column tiles of 64, the last 256-column tile half full, 17 k slices) at 300 rows,
// and 4 experts of 200 rows each over k 64 and 128 (one and two slices: no more than the
// pipeline's depth) and 512.
TEST(CudaLinear, WidestTilingHasTheBitsOfTheOthers) {
  auto cpu = make_cpu_backend(0, Precision::kBF16);
  auto gpu = make_cuda_backend(0, Precision::kBF16);
  {
    const int64_t n = 17024, k = 1088, rows = 300;
    ASSERT_EQ(cuda::gemm_split_segments(n, k, 1, false), 1);
    Experts w(1, n, k, 60);
    const auto x = randn(static_cast<size_t>(rows * k), 61);
    Dev<float> dx(x);
    auto run = [&](int64_t m) {
      Dev<float> dy(static_cast<size_t>(m * n));
      gpu->matmul({.x = dx.p, .w = w.dv[0], .y = dy.p, .m = m, .n = n, .k = k});
      gpu->synchronize();
      return dy.get();
    };
    const auto all = run(rows);
    std::vector<float> ref(all.size());
    cpu->matmul({.x = x.data(), .w = w.hv[0], .y = ref.data(), .m = rows, .n = n, .k = k});
    EXPECT_LT(rel_err(ref, all), 2e-5) << "dense, " << rows << " rows";
    for (int64_t m : {1, 16, 40, 129}) {
      const auto got = run(m);
      EXPECT_EQ(std::memcmp(got.data(), all.data(), got.size() * 4), 0) << "dense: the first " << m << " rows alone";
    }
  }
  for (const int64_t k : {64, 128, 512}) {
    const int64_t E = 4, n = 2304, per = 200, rows = E * per;
    Experts ex(E, n, k, 70);
    std::vector<int32_t> off(static_cast<size_t>(E + 1));
    for (int64_t e = 0; e <= E; ++e) off[static_cast<size_t>(e)] = static_cast<int32_t>(e * per);
    const auto x = randn(static_cast<size_t>(rows * k), 71);
    const auto [ref, got] = grouped_on_both(*cpu, *gpu, ex, off, x);
    EXPECT_LT(rel_err(ref, got), 2e-5) << "grouped, " << per << " rows per expert, k " << k;
    for (int64_t e = 0; e < E; ++e)
      for (int64_t r : {e * per, e * per + per - 1}) {
        EXPECT_EQ(std::memcmp(expert_row_alone(*gpu, ex, x, e, r).data(), got.data() + r * n, static_cast<size_t>(n) * 4), 0)
            << "expert " << e << " row " << r << ", k " << k;
      }
  }
}

// Several products of one x in one op (one launch in the decode tiling): each output's bits
// are those of its own matmul, at 1, 5 and 16 rows (one launch) and 40 (one product each), and
// within the CPU's bf16 emulation. Shapes: the released dims' products of the attention's
// normalised input (q low rank 1280, window KV 512, compressor 512 x 2, indexer head weights
// 64), of the low rank (queries 64 x 512, indexer queries 64 x 128), and of the FFN's input
// (router 64, shared expert 2304 x 2).
TEST(CudaLinear, MultiMatmulGivesEachProductItsOwnBits) {
  auto cpu = make_cpu_backend(0, Precision::kBF16);
  auto gpu = make_cuda_backend(0, Precision::kBF16);
  struct Case {
    int64_t k;
    std::vector<int64_t> ns;
  };
  for (const Case& c : {Case{5120, {1280, 512, 512, 512, 64}}, Case{1280, {32768, 8192}}, Case{5120, {64, 2304, 2304}}})
    for (int64_t m : {1, 5, 16, 40}) {
      const auto x = randn(static_cast<size_t>(m * c.k), 600 + static_cast<uint32_t>(m));
      Dev<float> dx(x);
      std::vector<std::unique_ptr<Experts>> w;
      std::vector<std::unique_ptr<Dev<float>>> dy;
      MultiMatmulArgs a{.x = dx.p, .m = m, .k = c.k};
      for (int64_t n : c.ns) {
        w.push_back(std::make_unique<Experts>(1, n, c.k, 700 + static_cast<uint32_t>(a.count)));
        dy.push_back(std::make_unique<Dev<float>>(static_cast<size_t>(m * n)));
        a.outs[a.count++] = {.w = w.back()->dv[0], .y = dy.back()->p, .n = n};
      }
      gpu->multi_matmul(a);
      for (size_t i = 0; i < c.ns.size(); ++i) {
        const int64_t n = c.ns[i];
        Dev<float> alone(static_cast<size_t>(m * n));
        gpu->matmul({.x = dx.p, .w = w[i]->dv[0], .y = alone.p, .m = m, .n = n, .k = c.k});
        gpu->synchronize();
        const auto got = dy[i]->get();
        EXPECT_EQ(std::memcmp(got.data(), alone.get().data(), got.size() * 4), 0)
            << "k " << c.k << ", output " << i << " (n " << n << "), " << m << " rows";
        std::vector<float> ref(static_cast<size_t>(m * n));
        cpu->matmul({.x = x.data(), .w = w[i]->hv[0], .y = ref.data(), .m = m, .n = n, .k = c.k});
        EXPECT_LT(rel_err(ref, got), 2e-5) << "k " << c.k << ", output " << i << ", " << m << " rows";
      }
    }
}

// An expert's gate and up projections in one op (one launch): each the bits of its own grouped
// product, at one token (the decode tiling), 200 (64 x 128 tiles) and 2200 (about 206 rows per
// expert: the 128 x 256 warpgroup tiles on sm_90a); and with the rows gathered on the way in
// (x_rows over at least 16 source rows, so a tile's index must be its own), the pair and the
// gate alone, the bits of a gathered copy's.
TEST(CudaLinear, GroupedPairGivesEachProductItsOwnBits) {
  auto gpu = make_cuda_backend(0, Precision::kBF16);
  const int64_t E = 64, K = 6, n = 2304, k = 5120;
  Experts gate(E, n, k, 800), up(E, n, k, 900);
  for (int64_t tokens : {1, 200, 2200}) {
    const auto off = offsets_of(tokens, K, E, static_cast<uint32_t>(tokens + 5));
    const int64_t rows = tokens * K;
    Dev<float> dx(randn(static_cast<size_t>(rows * k), 12));
    Dev<int32_t> doff(off);
    Dev<float> g(static_cast<size_t>(rows * n)), u(static_cast<size_t>(rows * n)), g1(static_cast<size_t>(rows * n)),
        u1(static_cast<size_t>(rows * n));
    gpu->grouped_matmul({.x = dx.p, .w = gate.dv.data(), .offsets = doff.p, .y = g.p, .rows = rows, .n = n, .k = k,
                         .experts = E, .w2 = up.dv.data(), .y2 = u.p});
    gpu->grouped_matmul({.x = dx.p, .w = gate.dv.data(), .offsets = doff.p, .y = g1.p, .rows = rows, .n = n, .k = k, .experts = E});
    gpu->grouped_matmul({.x = dx.p, .w = up.dv.data(), .offsets = doff.p, .y = u1.p, .rows = rows, .n = n, .k = k, .experts = E});
    gpu->synchronize();
    const auto a = g.get(), b = u.get();
    EXPECT_EQ(std::memcmp(a.data(), g1.get().data(), a.size() * 4), 0) << "gate, " << tokens << " tokens";
    EXPECT_EQ(std::memcmp(b.data(), u1.get().data(), b.size() * 4), 0) << "up, " << tokens << " tokens";
    EXPECT_NE(std::memcmp(a.data(), b.data(), a.size() * 4), 0);  // two products, not one twice
    // Gathered: row r of the product reads source row idx[r].
    const int64_t src_rows = std::max<int64_t>(tokens, 16);
    const auto src = randn(static_cast<size_t>(src_rows * k), 13);
    std::vector<int32_t> idx(static_cast<size_t>(rows));
    std::vector<float> xg(static_cast<size_t>(rows * k));
    for (int64_t r = 0; r < rows; ++r) {
      idx[static_cast<size_t>(r)] = static_cast<int32_t>((r * 7 + 3) % src_rows);
      std::memcpy(&xg[static_cast<size_t>(r * k)], &src[static_cast<size_t>(idx[static_cast<size_t>(r)] * k)], k * 4);
    }
    Dev<float> dsrc(src), dxg(xg), gg(g.n), gu(g.n), cg(g.n), cu(g.n), g_alone(g.n);
    Dev<int32_t> didx(idx);
    gpu->grouped_matmul({.x = dxg.p, .w = gate.dv.data(), .offsets = doff.p, .y = cg.p, .rows = rows, .n = n, .k = k,
                         .experts = E, .w2 = up.dv.data(), .y2 = cu.p});
    gpu->grouped_matmul({.x = dsrc.p, .w = gate.dv.data(), .offsets = doff.p, .y = gg.p, .rows = rows, .n = n, .k = k,
                         .experts = E, .w2 = up.dv.data(), .y2 = gu.p, .x_rows = didx.p, .x_src_rows = src_rows});
    gpu->grouped_matmul({.x = dsrc.p, .w = gate.dv.data(), .offsets = doff.p, .y = g_alone.p, .rows = rows, .n = n, .k = k,
                         .experts = E, .x_rows = didx.p, .x_src_rows = src_rows});
    gpu->synchronize();
    const auto ga = gg.get(), gb = gu.get(), gc = cg.get();
    EXPECT_EQ(std::memcmp(ga.data(), gc.data(), ga.size() * 4), 0) << "gathered gate, " << tokens << " tokens";
    EXPECT_EQ(std::memcmp(gb.data(), cu.get().data(), gb.size() * 4), 0) << "gathered up, " << tokens << " tokens";
    EXPECT_EQ(std::memcmp(g_alone.get().data(), gc.data(), ga.size() * 4), 0) << "gathered gate alone, " << tokens << " tokens";
  }
}

}  // namespace
