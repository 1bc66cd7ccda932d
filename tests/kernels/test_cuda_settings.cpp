// The CUDA backend's Settings (kernels/cuda/backend_settings.h) reach its launches and change no
// bits: a backend made with every setting off (no programmatic launches, no clusters, no inline
// uploads) against one made with the defaults, on the ops whose launches they change: a split
// decode product (its k segments added in a cluster, or through the workspace), the decode
// attention at the released shape (5 splits merged in a cluster, or by the combine kernel), and
// small uploads and an upload_batch (in the launch's parameters, or through the pinned ring).
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "core/dtype.h"
#include "kernels/cuda/backend_settings.h"
#include "cuda_test_util.h"

using namespace deepinfer::cuda_test;

namespace {

struct Pair {
  std::unique_ptr<Backend> on = cuda::make_cuda_backend(0, Precision::kBF16, true, cuda::Settings{});
  std::unique_ptr<Backend> off = cuda::make_cuda_backend(0, Precision::kBF16, true,
                                                         cuda::Settings{.pdl = false, .clusters = false, .inline_upload = false});
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(CudaSettings, SplitDecodeProductHasTheSameBitsWithEverySettingOff) {
  Pair be;
  const int64_t n = 1024, k = 4096, G = 8;  // wo_a's 8 groups: split over k in the decode tiling
  const auto f = randn(static_cast<size_t>(G * n * k), 51, 0.05f);
  std::vector<uint16_t> wb(f.size());
  for (size_t i = 0; i < f.size(); ++i) wb[i] = deepinfer::core::f32_to_bf16(f[i]);
  Dev<uint16_t> dw(wb);
  const WeightView w{WeightFormat::kBF16, dw.p, nullptr, G * n, k};
  for (int64_t m : {1, 3}) {
    Dev<float> dx(randn(static_cast<size_t>(m * G * k), 52));
    auto run = [&](Backend& b) {
      Dev<float> dy(static_cast<size_t>(m * G * n));
      b.matmul({.x = dx.p, .w = w, .y = dy.p, .m = m, .n = n, .k = k, .groups = G, .x_group_stride = k, .y_group_stride = n});
      b.synchronize();
      return dy.get();
    };
    EXPECT_TRUE(same_bits(run(*be.on), run(*be.off))) << m << " rows";
  }
}

TEST(CudaSettings, DecodeAttentionHasTheSameBitsWithEverySettingOff) {
  Pair be;
  const int64_t S = 1, H = 64, hd = 512, window = 128, tw = 128, tc = 2048;
  std::mt19937 g(61);
  std::vector<int64_t> qpos{5000}, wpos(static_cast<size_t>(tw));
  for (int64_t i = 0; i < tw; ++i) wpos[static_cast<size_t>(i)] = 5000 - tw + 1 + i;
  std::vector<uint8_t> sel(static_cast<size_t>(S * tc), 0);
  std::uniform_int_distribution<int64_t> pick(0, tc - 1);
  for (int j = 0; j < 512; ++j) sel[static_cast<size_t>(pick(g))] = 1;
  Dev<float> dq(randn(static_cast<size_t>(S * H * hd), 62)), dwin(randn(static_cast<size_t>(tw * hd), 63)),
      dcomp(randn(static_cast<size_t>(tc * hd), 64)), dsink(randn(static_cast<size_t>(H), 65));
  Dev<int64_t> dqpos(qpos), dwpos(wpos);
  Dev<uint8_t> dsel(sel);
  auto run = [&](Backend& b) {
    Dev<float> out(static_cast<size_t>(S * H * hd));
    b.attention({.q = dq.p, .q_pos = dqpos.p, .win = dwin.p, .win_pos = dwpos.p, .comp = dcomp.p, .comp_sel = dsel.p,
                 .sink = dsink.p, .out = out.p, .s = S, .heads = H, .head_dim = hd, .t_win = tw, .t_comp = tc, .window = window,
                 .scale = 0.044f, .max_selected = 512});
    b.synchronize();
    return out.get();
  };
  EXPECT_TRUE(same_bits(run(*be.on), run(*be.off)));
}

TEST(CudaSettings, UploadsLandTheSameWithEverySettingOff) {
  Pair be;
  const auto bytes = random_bytes(3000, 71);
  for (Backend* b : {be.on.get(), be.off.get()}) {
    Dev<uint8_t> one(bytes.size()), batch(4096);
    std::vector<uint8_t> src = bytes;
    b->upload(one.p, src.data(), static_cast<int64_t>(src.size()));
    std::vector<UploadItem> items{{.dst = batch.p, .src = src.data(), .bytes = 100},
                                  {.dst = batch.p + 112, .src = src.data() + 100, .bytes = 517},
                                  {.dst = batch.p + 1000, .src = one.p + 5, .bytes = 300, .from_device = true}};
    b->upload_batch(items.data(), static_cast<int64_t>(items.size()));
    std::fill(src.begin(), src.end(), uint8_t{0});  // the sources may be reused at once
    b->synchronize();
    EXPECT_EQ(one.get(), bytes);
    const auto got = batch.get();
    EXPECT_TRUE(std::equal(bytes.begin(), bytes.begin() + 100, got.begin()));
    EXPECT_TRUE(std::equal(bytes.begin() + 100, bytes.begin() + 617, got.begin() + 112));
    EXPECT_TRUE(std::equal(bytes.begin() + 5, bytes.begin() + 305, got.begin() + 1000));
  }
}

}  // namespace
