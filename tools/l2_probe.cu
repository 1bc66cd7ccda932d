// A device experiment: whether an L2 prefetch (bulk, or per line) makes a following read of
// N MB faster, against the same read cold (L2 flushed) and warm (read just before).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#define CK(x)                                                              \
  do {                                                                     \
    cudaError_t e = (x);                                                   \
    if (e != cudaSuccess) {                                                \
      std::printf("CUDA %s at %d: %s\n", #x, __LINE__, cudaGetErrorString(e)); \
      return 1;                                                            \
    }                                                                      \
  } while (0)

__global__ void read_k(const float4* p, int64_t n, float* out) {
  float s = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += gridDim.x * int64_t(blockDim.x)) {
    const float4 v = __ldcg(p + i);
    s += v.x + v.y + v.z + v.w;
  }
  if (s == 1234.5f) *out = s;
}
__global__ void write_k(float4* p, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += gridDim.x * int64_t(blockDim.x))
    p[i] = make_float4(1, 2, 3, 4);
}
__global__ void spin_k(long long ns) {
  const long long t0 = clock64();
  while (clock64() - t0 < ns * 2) {}  // ~2 cycles per ns at 1.98 GHz
}
__global__ void prefetch_k(const char* p, int64_t bytes, int mode, int64_t chunk) {
  const int64_t tid = blockIdx.x * int64_t(blockDim.x) + threadIdx.x, nt = gridDim.x * int64_t(blockDim.x);
  uint64_t pol = 0;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(pol));
  if (mode <= 1) {
    for (int64_t c = tid; c * chunk < bytes; c += nt) {
      const uint32_t sz = uint32_t(min(chunk, bytes - c * chunk));
      if (mode == 0) asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(p + c * chunk), "r"(sz) : "memory");
      else asm volatile("cp.async.bulk.prefetch.L2.global.L2::cache_hint [%0], %1, %2;\n" ::"l"(p + c * chunk), "r"(sz), "l"(pol) : "memory");
    }
  } else if (mode == 2) {
    for (int64_t c = tid; c * 128 < bytes; c += nt) asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p + c * 128));
  } else {  // mode 3: plain loads
    float s = 0;
    for (int64_t c = tid; c * 16 < bytes; c += nt) s += __ldcg(reinterpret_cast<const float4*>(p) + c).x;
    if (s == 1234.5f) *(float*)p = s;
  }
}

int main() {
  const int64_t big = 512ll << 20;
  char *flush = nullptr, *buf = nullptr;
  float* out = nullptr;
  CK(cudaMalloc(&flush, big));
  CK(cudaMalloc(&buf, 64ll << 20));
  CK(cudaMalloc(&out, 4));
  cudaStream_t s, side;
  CK(cudaStreamCreate(&s));
  CK(cudaStreamCreate(&side));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  auto do_flush = [&] { write_k<<<264, 512, 0, s>>>(reinterpret_cast<float4*>(flush), big / 16); };
  auto timed_read = [&](int64_t bytes) {
    cudaEventRecord(a, s);
    read_k<<<264, 512, 0, s>>>(reinterpret_cast<const float4*>(buf), bytes / 16, out);
    cudaEventRecord(b, s);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    return ms * 1000.0f;
  };
  const char* names[] = {"cold", "warm", "bulk 16x32 32K", "bulk 132x32 32K", "bulk evict_last 16x32", "lines 32x512",
                         "loads 132x512", "side bulk 16 + spin 20us", "side lines + spin 20us", "side loads + spin 20us",
                         "spin 20us only (cold)"};
  for (int64_t mb : {8, 16, 32, 48}) {
    const int64_t bytes = mb << 20;
    for (int c = 0; c < 11; ++c) {
      std::vector<float> t;
      for (int it = 0; it < 7; ++it) {
        do_flush();
        switch (c) {
          case 1: read_k<<<264, 512, 0, s>>>(reinterpret_cast<const float4*>(buf), bytes / 16, out); break;
          case 2: prefetch_k<<<16, 32, 0, s>>>(buf, bytes, 0, 32 << 10); break;
          case 3: prefetch_k<<<132, 32, 0, s>>>(buf, bytes, 0, 32 << 10); break;
          case 4: prefetch_k<<<16, 32, 0, s>>>(buf, bytes, 1, 32 << 10); break;
          case 5: prefetch_k<<<32, 512, 0, s>>>(buf, bytes, 2, 0); break;
          case 6: prefetch_k<<<132, 512, 0, s>>>(buf, bytes, 3, 0); break;
          default: break;
        }
        if (c >= 7) {
          CK(cudaStreamSynchronize(s));
          if (c < 10) {
            const int mode = c == 7 ? 0 : c == 8 ? 2 : 3;
            const int blocks = c == 7 ? 16 : c == 8 ? 32 : 132;
            spin_k<<<1, 32, 0, s>>>(20000);
            prefetch_k<<<blocks, c == 7 ? 32 : 512, 0, side>>>(buf, bytes, mode, 32 << 10);
          } else {
            spin_k<<<1, 32, 0, s>>>(20000);
          }
        }
        CK(cudaStreamSynchronize(s));
        CK(cudaStreamSynchronize(side));
        t.push_back(timed_read(bytes));
      }
      std::sort(t.begin(), t.end());
      std::printf("%2lld MB %-28s read %7.1f us = %6.0f GB/s\n", static_cast<long long>(mb), names[c], t[3],
                  bytes / (t[3] * 1e3));
    }
  }
  CK(cudaGetLastError());
  return 0;
}
