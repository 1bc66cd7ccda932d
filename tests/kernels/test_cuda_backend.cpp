// CUDA backend's memory API (Backend::alloc, upload, download, copy, zero): stream order and the
// pinned staging ring. Built with DEEPINFER_CUDA=ON only (run on the device machine by
// scripts/device_run.sh).
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

// upload_ahead: packed into pinned host memory, copied once the compute stream has reached the
// call (so ops queued before it, here a busy stream then a copy into the same buffer, finish
// first), seen by the ops issued after await_uploads; several before one await; download
// (a synchronize) implies the await.
TEST(CudaMemory, UploadAheadKeepsStreamOrder) {
  auto gpu = make_cuda_backend(0);
  const int64_t n = 4096, big = int64_t{16} << 20;
  auto* x = static_cast<float*>(gpu->alloc(n * 4));
  auto* y = static_cast<float*>(gpu->alloc(n * 4));
  auto* busy = static_cast<float*>(gpu->alloc(big * 4));
  const std::vector<float> vy = randn(static_cast<size_t>(n), 90), v = randn(static_cast<size_t>(n), 91);
  gpu->upload(y, vy.data(), n * 4);
  gpu->zero(busy, big * 4);
  gpu->synchronize();
  for (int i = 0; i < 40; ++i) gpu->scale({.x = busy, .n = big, .s = 1.5f});
  gpu->copy(x, y, n * 4);
  bool pinned = false;
  gpu->upload_ahead(x, n * 4, [&](uint8_t* out) {
    cudaPointerAttributes a{};
    pinned = cudaPointerGetAttributes(&a, out) == cudaSuccess && a.type == cudaMemoryTypeHost;
    std::memcpy(out, v.data(), static_cast<size_t>(n) * 4);
  });
  EXPECT_TRUE(pinned);
  gpu->await_uploads();
  gpu->scale({.x = x, .n = n, .s = 2.0f});
  std::vector<float> expect(static_cast<size_t>(n)), back(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) expect[static_cast<size_t>(i)] = v[static_cast<size_t>(i)] * 2.0f;
  gpu->download(back.data(), x, n * 4);
  EXPECT_TRUE(same_bits(expect, back));

  // Two halves ahead, no await: the download sees both.
  for (int i = 0; i < 40; ++i) gpu->scale({.x = busy, .n = big, .s = 1.5f});
  gpu->copy(x, y, n * 4);
  for (int64_t h = 0; h < 2; ++h)
    gpu->upload_ahead(x + h * n / 2, n * 2, [&](uint8_t* out) { std::memcpy(out, v.data() + h * n / 2, static_cast<size_t>(n) * 2); });
  gpu->download(back.data(), x, n * 4);
  EXPECT_TRUE(same_bits(v, back));
  for (void* p : {static_cast<void*>(x), static_cast<void*>(y), static_cast<void*>(busy)}) gpu->release(p);
}

}  // namespace
