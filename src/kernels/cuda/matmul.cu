// CUDA: the bf16 tensor-core path of matmul (activations rounded to bf16, weights in bf16 or
// dequantised into bf16, float32 accumulation through cuBLAS), and seeded random fills.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstring>
#include <cstdlib>
#include <utility>
#include <vector>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/mma.cuh"

namespace deepinfer::kernels::cuda {

bool env_switch_on(const char* name) {
  const char* e = std::getenv(name);
  return !(e && e[0] == '0');
}

bool pdl_enabled() {
  static const bool on = env_switch_on("DEEPINFER_CUDA_PDL");
  return on;
}

bool clusters_enabled() {
  static const bool on = env_switch_on("DEEPINFER_CUDA_CLUSTER");
  return on;
}

void func_attr_at_least(const void* kern, cudaFuncAttribute attr, int value) {
  struct Set {
    const void* kern;
    int dev;
    cudaFuncAttribute attr;
    int value;  // the value set so far
  };
  static std::vector<Set> set;
  int dev = 0;
  DI_CUDA_CHECK(cudaGetDevice(&dev));
  auto it = std::find_if(set.begin(), set.end(), [&](const Set& o) { return o.kern == kern && o.dev == dev && o.attr == attr; });
  if (it != set.end() && it->value >= value) return;
  DI_CUDA_CHECK(cudaFuncSetAttribute(kern, attr, value));
  if (it == set.end()) set.push_back({kern, dev, attr, value});
  else it->value = value;
}

namespace {

constexpr int kThreads = 256;
unsigned grid(int64_t n) { return static_cast<unsigned>(ceil_div(n, kThreads)); }

__global__ void to_bf16_k(const float* x, int64_t m, int64_t mp, int64_t k, int64_t ldx, __nv_bfloat16* out) {
  DI_PDL_ENTRY();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= mp * k) return;
  const int64_t r = i / k;
  out[i] = r < m ? __float2bfloat16_rn(x[r * ldx + i % k]) : __float2bfloat16_rn(0.0f);
}

// The same, 8 elements a thread (two 16-byte loads, one 16-byte store): k a multiple of 8, ldx
// of 4, x and out 16-byte aligned. The same roundings.
__global__ void to_bf16_v8_k(const float* x, int64_t m, int64_t mp, int64_t k, int64_t ldx, __nv_bfloat16* out) {
  DI_PDL_ENTRY();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x, k8 = k / 8;
  if (i >= mp * k8) return;
  const int64_t r = i / k8, c = (i - r * k8) * 8;
  uint4 v = make_uint4(0u, 0u, 0u, 0u);  // bf16 +0 is all zero bits
  if (r < m) {
    const float4* src = reinterpret_cast<const float4*>(x + r * ldx + c);
    v = pack_bf16x8(src[0], src[1]);
  }
  *reinterpret_cast<uint4*>(out + r * k + c) = v;
}

// dst[0, n) = src[0, n), src in mapped pinned host memory: 16-byte chunks when both are aligned.
// Reads its source (the pinned staging ring) before the programmatic wait: the host wrote it
// before the launch, and the ring reuses a slot only after the stream has drained (upload), so
// the PCIe round trip overlaps the kernel before it; the device writes wait as every kernel's do.
__global__ void host_copy_k(void* dst, const void* src, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if ((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) % 16 == 0) {
    const int64_t tail = n / 16 * 16 + i;
    const uint4 v = i < n / 16 ? reinterpret_cast<const uint4*>(src)[i] : make_uint4(0u, 0u, 0u, 0u);
    const uint8_t b = i < n % 16 ? static_cast<const uint8_t*>(src)[tail] : uint8_t{0};
    DI_PDL_ENTRY();
    if (i < n / 16) reinterpret_cast<uint4*>(dst)[i] = v;
    if (i < n % 16) static_cast<uint8_t*>(dst)[tail] = b;
  } else {
    DI_PDL_ENTRY();
    for (int64_t j = i; j < n; j += static_cast<int64_t>(gridDim.x) * blockDim.x)
      static_cast<uint8_t*>(dst)[j] = static_cast<const uint8_t*>(src)[j];
  }
}

// An upload small enough to travel inside the launch: its bytes are the kernel's parameter
// (__grid_constant__: read where it lies), so the kernel reads no host memory while it runs.
template <int N>
struct InlineBytes {
  alignas(16) unsigned char b[N];
};
template <int N>
__global__ void inline_copy_k(void* dst, const __grid_constant__ InlineBytes<N> src, int64_t n) {
  const int64_t i = threadIdx.x, tail = n / 16 * 16 + i;
  const uint4 v = i < n / 16 ? reinterpret_cast<const uint4*>(src.b)[i] : make_uint4(0u, 0u, 0u, 0u);
  const uint8_t b = i < n % 16 ? src.b[tail] : uint8_t{0};
  DI_PDL_ENTRY();
  if (i < n / 16) reinterpret_cast<uint4*>(dst)[i] = v;
  if (i < n % 16) static_cast<uint8_t*>(dst)[tail] = b;
}

template <int N>
void inline_copy_n(void* dst, const void* src, int64_t n, cudaStream_t s) {
  InlineBytes<N> p{};
  std::memcpy(p.b, src, static_cast<size_t>(n));
  const unsigned threads = static_cast<unsigned>(std::max<int64_t>(32, ceil_div(ceil_div(n, 16), 32) * 32));
  launch_k(inline_copy_k<N>, 1, threads, 0, s, dst, p, n);
  DI_CUDA_LAUNCHED();
}

// Several uploads in one launch's parameters (item k's bytes at b + off, to dst), then copies
// within device memory (items with a src).
struct ScatterParams {
  struct Item {
    void* dst;
    const void* src;  // null: the bytes at b + off
    int32_t off, bytes;
  };
  int32_t n;
  Item it[kInlineScatterItems];
  alignas(16) unsigned char b[kInlineScatterBytes];
};
__global__ void inline_scatter_k(const __grid_constant__ ScatterParams p) {
  DI_PDL_ENTRY();
  for (int k = 0; k < p.n; ++k) {
    const ScatterParams::Item& it = p.it[k];
    const unsigned char* src = it.src ? static_cast<const unsigned char*>(it.src) : p.b + it.off;
    int full = it.bytes / 16;
    if (it.src && ((reinterpret_cast<uintptr_t>(it.src) | reinterpret_cast<uintptr_t>(it.dst)) & 15u) != 0) full = 0;
    for (int i = threadIdx.x; i < full; i += blockDim.x)
      reinterpret_cast<uint4*>(it.dst)[i] = reinterpret_cast<const uint4*>(src)[i];
    for (int i = full * 16 + threadIdx.x; i < it.bytes; i += blockDim.x) static_cast<unsigned char*>(it.dst)[i] = src[i];
  }
}

__global__ void dequant_bf16_k(WeightView w, int64_t row0, int64_t n, __nv_bfloat16* out) {
  DI_PDL_ENTRY();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n * w.cols) return;
  out[i] = __float2bfloat16_rn(d_weight_at(w, row0 + i / w.cols, i % w.cols));
}

__device__ uint64_t d_splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// core::normal01 on the device: the same uniforms, Box-Muller in double.
__global__ void fill_random_k(RandomFillArgs a) {
  DI_PDL_ENTRY();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= a.n) return;
  const uint64_t s = d_splitmix64(a.seed), c = static_cast<uint64_t>(i);
  double u1 = static_cast<double>(d_splitmix64(s ^ (2 * c)) >> 11) * (1.0 / 9007199254740992.0);
  const double u2 = static_cast<double>(d_splitmix64(s ^ (2 * c + 1)) >> 11) * (1.0 / 9007199254740992.0);
  if (u1 < 1e-300) u1 = 1e-300;
  const float z = static_cast<float>(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
  const float v = a.mean == 0.0f ? __fmul_rn(a.std, z) : __fadd_rn(a.mean, __fmul_rn(a.std, z));
  if (a.format == WeightFormat::kF32) static_cast<float*>(a.out)[i] = v;
  else static_cast<__nv_bfloat16*>(a.out)[i] = __float2bfloat16_rn(v);
}

}  // namespace

void to_bf16(const float* x, int64_t m, int64_t mp, int64_t k, int64_t ldx, void* out, cudaStream_t s) {
  if (mp * k == 0) return;
  auto* o = static_cast<__nv_bfloat16*>(out);
  if (k % 8 == 0 && ldx % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0)
    launch_k(to_bf16_v8_k, grid(mp * k / 8), kThreads, 0, s, x, m, mp, k, ldx, o);
  else
    launch_k(to_bf16_k, grid(mp * k), kThreads, 0, s, x, m, mp, k, ldx, o);
  DI_CUDA_LAUNCHED();
}

void host_copy(void* dst, const void* src, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  launch_k(host_copy_k, grid(std::max<int64_t>(n / 16, 1)), kThreads, 0, s, dst, src, n);
  DI_CUDA_LAUNCHED();
}

bool inline_copy(void* dst, const void* src, int64_t n, cudaStream_t s) {
  static const bool on = env_switch_on("DEEPINFER_CUDA_INLINE_UPLOAD");
  if (!on || n <= 0 || n > kInlineCopyMax || reinterpret_cast<uintptr_t>(dst) % 16 != 0) return false;
  if (n <= 256) inline_copy_n<256>(dst, src, n, s);
  else if (n <= 1024) inline_copy_n<1024>(dst, src, n, s);
  else inline_copy_n<kInlineCopyMax>(dst, src, n, s);
  return true;
}

bool inline_scatter(const UploadItem* items, int64_t n, cudaStream_t s) {
  static const bool on = env_switch_on("DEEPINFER_CUDA_INLINE_UPLOAD");
  if (!on || n <= 0 || n > kInlineScatterItems) return false;
  int64_t host = 0, device = 0, largest = 0;
  for (int64_t k = 0; k < n; ++k) {
    const UploadItem& u = items[k];
    if (u.bytes < 0 || (!u.from_device && reinterpret_cast<uintptr_t>(u.dst) % 16 != 0)) return false;
    (u.from_device ? device : host) += (u.bytes + 15) / 16 * 16;
    largest = std::max(largest, u.bytes);
  }
  if (host > kInlineScatterBytes || device > kInlineScatterDeviceBytes) return false;
  ScatterParams p{};
  int32_t off = 0, m = 0;
  for (int pass = 0; pass < 2; ++pass)  // the uploads, then the copies
    for (int64_t k = 0; k < n; ++k) {
      const UploadItem& u = items[k];
      if (u.from_device != (pass == 1) || u.bytes == 0) continue;
      p.it[m++] = {u.dst, u.from_device ? u.src : nullptr, off, static_cast<int32_t>(u.bytes)};
      if (u.from_device) continue;
      std::memcpy(p.b + off, u.src, static_cast<size_t>(u.bytes));
      off += static_cast<int32_t>((u.bytes + 15) / 16 * 16);
    }
  if (m == 0) return true;
  p.n = m;
  const unsigned threads = static_cast<unsigned>(std::min<int64_t>(256, std::max<int64_t>(32, ceil_div(ceil_div(largest, 16), 32) * 32)));
  launch_k(inline_scatter_k, 1, threads, 0, s, p);
  DI_CUDA_LAUNCHED();
  return true;
}

void dequant_bf16(const WeightView& w, int64_t row0, int64_t n, void* out, cudaStream_t s) {
  if (n * w.cols == 0) return;
  launch_k(dequant_bf16_k, grid(n * w.cols), kThreads, 0, s, w, row0, n, static_cast<__nv_bfloat16*>(out));
  DI_CUDA_LAUNCHED();
}

void fill_random(const RandomFillArgs& a, cudaStream_t s) {
  if (a.n == 0) return;
  if (a.format != WeightFormat::kF32 && a.format != WeightFormat::kBF16) {
    std::fprintf(stderr, "deepinfer: fill_random stores float32 or bf16\n");
    std::abort();
  }
  launch_k(fill_random_k, grid(a.n), kThreads, 0, s, a);
  DI_CUDA_LAUNCHED();
}

}  // namespace deepinfer::kernels::cuda
