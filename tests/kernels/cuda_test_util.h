// Helpers of the CUDA parity tests: device arrays filled from / read back to the host, seeded
// random inputs, relative error, the two backends.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "kernels/backend.h"
#include "kernels/compare.h"

namespace deepinfer::cuda_test {

using namespace deepinfer::kernels;


template <typename T>
struct Dev {
  T* p = nullptr;
  size_t n = 0;
  explicit Dev(const std::vector<T>& h) : n(h.size()) {
    cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T));
    if (n) cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice);
    // cudaMemcpy from pageable memory may return before the DMA lands, and the backend's
    // stream does not wait for the legacy default stream: finish before any op reads it.
    cudaDeviceSynchronize();
  }
  explicit Dev(size_t count) : n(count) {
    cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T));
    cudaMemset(p, 0, std::max<size_t>(n, 1) * sizeof(T));
    cudaDeviceSynchronize();  // cudaMemset is asynchronous (see above)
  }
  ~Dev() { cudaFree(p); }
  std::vector<T> get() const {
    std::vector<T> h(n);
    if (n) cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost);
    return h;
  }
};

inline std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (auto& x : v) x = scale * d(g);
  return v;
}

using kernel_tests::rel_err;

struct Backends {
  std::unique_ptr<Backend> cpu = make_cpu_backend(0), gpu = make_cuda_backend(0);
};

inline std::vector<uint8_t> random_bytes(size_t n, uint32_t seed, int lo = 0, int hi = 255) {
  std::mt19937 g(seed);
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<uint8_t> v(n);
  for (auto& x : v) x = static_cast<uint8_t>(d(g));
  return v;
}

}  // namespace deepinfer::cuda_test
