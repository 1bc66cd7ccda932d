// Shared helpers of the CUDA backend: error checks, device copies of the dtype rules the
// CPU reference uses (e4m3 / e2m1 rounding, power-of-two scales), warp reductions.
// Every CUDA call and launch is checked; a failure aborts with file:line (an engine
// invariant, not user input).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "kernels/backend.h"
#include "kernels/cuda/backend_settings.h"

#define DI_CUDA_CHECK(expr)                                                                                  \
  do {                                                                                                       \
    cudaError_t err_ = (expr);                                                                               \
    if (err_ != cudaSuccess) {                                                                               \
      std::fprintf(stderr, "deepinfer: CUDA error at %s:%d: %s: %s\n", __FILE__, __LINE__, #expr,             \
                   cudaGetErrorString(err_));                                                                \
      std::abort();                                                                                          \
    }                                                                                                        \
  } while (0)

#define DI_CUDA_LAUNCHED() DI_CUDA_CHECK(cudaGetLastError())

namespace deepinfer::kernels::cuda {

// Programmatic dependent launch (sm_90). Every kernel of the backend starts with
// DI_PDL_ENTRY(): griddepcontrol.wait, which returns once the kernels before it on the stream
// have finished and their memory is visible (at once for a kernel launched without the
// attribute), then launch_dependents, which lets the next kernel's blocks be scheduled while
// this one runs (they wait in their own DI_PDL_ENTRY). No memory is touched before the wait,
// so the order of every read and write is the plain stream order; what overlaps is a launch's
// setup and block dispatch with its predecessor's last blocks. Exceptions: the dense bf16
// products (gemm_bf16_k) and the mHC mixes of few rows (hc_project_k, staged) start loading
// their weights before the wait. That needs the weights
// settled before any product runs: they are written only while a model loads (uploads, which
// up to 64 KB are kernels too, and random fills), and loading ends with a synchronize
// (model/weights.cpp). And host_copy_k reads its source (the pinned staging ring, written by
// the host before the launch and reused only after the stream drains) before the wait.
// launch_k launches with the attribute unless the backend's Settings.pdl is off.
#define DI_PDL_WAIT() asm volatile("griddepcontrol.wait;\n" ::: "memory")
#define DI_PDL_TRIGGER() asm volatile("griddepcontrol.launch_dependents;\n" :::)
#define DI_PDL_ENTRY() \
  do {                 \
    DI_PDL_WAIT();     \
    DI_PDL_TRIGGER();  \
  } while (0)

// A backend's stream with the backend's settings (backend_settings.h): what every op function
// and launch helper receives, so each launch follows the settings of the backend it runs for.
struct Stream {
  cudaStream_t id = nullptr;
  const Settings* settings = nullptr;  // the backend's (never null)
  operator cudaStream_t() const { return id; }
};

// Sets kern's function attribute `attr` on this device to `value` unless a value at least as
// large was set before (a launch whose needs grow with its rows may come first with few; the
// backend runs on one thread).
void func_attr_at_least(const void* kern, cudaFuncAttribute attr, int value);
// Lets kern use `bytes` of dynamic shared memory (the opt-in above 48 KiB).
template <class... KArgs>
void opt_in_smem(void (*kern)(KArgs...), size_t bytes) {
  func_attr_at_least(reinterpret_cast<const void*>(kern), cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
}

// kern<<<grid, block, smem, s>>>(args...) as a programmatic dependent launch (kern must begin
// with DI_PDL_ENTRY()), its blocks in clusters of *cluster when given; every launch of the
// backend goes through here.
template <class... KArgs, class... Args>
void launch_k_with(void (*kern)(KArgs...), dim3 grid, dim3 block, size_t smem, Stream s, const dim3* cluster,
                   Args&&... args) {
  cudaLaunchAttribute attr[2];
  unsigned n = 0;
  if (s.settings->pdl) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cluster) {
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n].val.clusterDim.x = cluster->x;
    attr[n].val.clusterDim.y = cluster->y;
    attr[n++].val.clusterDim.z = cluster->z;
  }
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cfg.attrs = attr;
  cfg.numAttrs = n;
  DI_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kern, std::forward<Args>(args)...));
}
template <class... KArgs, class... Args>
void launch_k(void (*kern)(KArgs...), dim3 grid, dim3 block, size_t smem, Stream s, Args&&... args) {
  launch_k_with(kern, grid, block, smem, s, nullptr, std::forward<Args>(args)...);
}
// The same, the blocks in clusters of `cluster` (sm_90: co-scheduled on one GPC, each block's
// shared memory open to the others'); sizes above 8 need the kernel's non-portable opt-in.
template <class... KArgs, class... Args>
void launch_k_cluster(void (*kern)(KArgs...), dim3 grid, dim3 block, size_t smem, Stream s, dim3 cluster,
                      Args&&... args) {
  launch_k_with(kern, grid, block, smem, s, &cluster, std::forward<Args>(args)...);
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// One interleaved pair (e, o) rotated by (c, s): rounded products and sums, never contracted (the
// CPU's arithmetic; rope_k, norm_rope_quant_k and the attention's on-the-fly RoPE share it).
__device__ __forceinline__ void rope_pair(float& e, float& o, float c, float s) {
  const float e0 = e, o0 = o;
  e = __fsub_rn(__fmul_rn(e0, c), __fmul_rn(o0, s));
  o = __fadd_rn(__fmul_rn(e0, s), __fmul_rn(o0, c));
}

__device__ inline float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ inline float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Block-wide sum for blockDim.x a multiple of 32 (<= 1024); every thread gets the result.
__device__ inline float block_sum(float v) {
  __shared__ float part[32];
  v = warp_sum(v);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads();
  if (lane == 0) part[warp] = v;
  __syncthreads();
  float t = (threadIdx.x < blockDim.x / 32) ? part[threadIdx.x] : 0.0f;
  if (warp == 0) t = warp_sum(t);
  if (threadIdx.x == 0) part[0] = t;
  __syncthreads();
  return part[0];
}

// Block-wide sum in a fixed order (blockDim.x a multiple of 32): a warp's values by the xor
// tree, then the warps' partials (`part`: shared, one per warp) in warp order, accumulated as
// Acc; every thread gets the result.
template <class T, class Acc = T>
__device__ inline Acc block_sum_ordered(T v, T* part) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  if (lane == 0) part[warp] = v;
  __syncthreads();
  Acc t = 0;
  for (int w = 0; w < nw; ++w) t += part[w];
  return t;
}
// Block-wide sum of ints through `part` (shared, one int per warp).
__device__ inline int64_t block_sum_i(int v, int* part) { return block_sum_ordered<int, int64_t>(v, part); }

__device__ inline float d_e4m3_to_f32(uint8_t v) {
  const int sign = v >> 7, e = (v >> 3) & 0xF, m = v & 7;
  float mag;
  if (e == 15 && m == 7) mag = __int_as_float(0x7FC00000);
  else if (e == 0) mag = ldexpf(static_cast<float>(m), -9);
  else mag = ldexpf(static_cast<float>(m | 8), e - 10);
  return sign ? -mag : mag;
}

__device__ inline uint8_t d_f32_to_e4m3(float x) {
  const uint8_t sign = signbit(x) ? 0x80 : 0;
  const float a = fabsf(x);
  if (isnan(a) || a >= 480.0f) return sign | 0x7F;
  int e;
  frexpf(a, &e);
  const int step = (a < 0.015625f) ? -9 : (e - 1) - 3;
  const float v = ldexpf(rintf(ldexpf(a, -step)), step);
  if (v > 448.0f) return sign | 0x7F;
  if (v == 0.0f) return sign;
  int ve;
  frexpf(v, &ve);
  const int E = ve - 1;
  if (E < -6) return sign | static_cast<uint8_t>(ldexpf(v, 9));
  return sign | static_cast<uint8_t>((E + 7) << 3) | static_cast<uint8_t>(ldexpf(v, 3 - E) - 8.0f);
}

__device__ inline float d_e2m1_to_f32(uint8_t c) {
  const float t[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float v = t[c & 7];
  return ((c & 8) && (c & 7)) ? -v : v;  // code 8 (negative zero) is +0, as in the CPU table
}

__device__ inline uint8_t d_f32_to_e2m1(float q) {
  const float th[7] = {__int_as_float(0x3E800001), 0.75f, __int_as_float(0x3FA00001), 1.75f,
                       __int_as_float(0x40200001), 3.5f,  __int_as_float(0x40A00001)};
  const float m = fabsf(q);
  uint8_t c = 0;
  for (int i = 0; i < 7; ++i) c += (m >= th[i]) ? 1 : 0;
  return c | (signbit(q) ? 8 : 0);
}

__device__ inline float d_pow2_ceil(float t) {
  const uint32_t b = __float_as_uint(t);
  const int k = static_cast<int>((b >> 23) & 0xFF) - 127 + ((b & 0x7FFFFF) != 0 ? 1 : 0);
  return ldexpf(1.0f, k);
}

__device__ inline float d_e8m0_to_f32(uint8_t v) { return v == 255 ? __int_as_float(0x7FC00000) : ldexpf(1.0f, v - 127); }

// Element (r, j) of a stored weight matrix as float32 (exact).
__device__ inline float d_weight_at(const WeightView& w, int64_t r, int64_t j) {
  const int64_t k = w.cols, sc_cols = (k + 31) / 32;
  switch (w.format) {
    case WeightFormat::kF32: return static_cast<const float*>(w.data)[r * k + j];
    case WeightFormat::kBF16:
      return __uint_as_float(static_cast<uint32_t>(static_cast<const uint16_t*>(w.data)[r * k + j]) << 16);
    case WeightFormat::kFP8Block32:
      return d_e4m3_to_f32(static_cast<const uint8_t*>(w.data)[r * k + j]) * d_e8m0_to_f32(w.scale[(r / 32) * sc_cols + j / 32]);
    case WeightFormat::kFP8Row32:
      return d_e4m3_to_f32(static_cast<const uint8_t*>(w.data)[r * k + j]) * d_e8m0_to_f32(w.scale[r * sc_cols + j / 32]);
    case WeightFormat::kMXFP4: {
      const uint8_t byte = static_cast<const uint8_t*>(w.data)[r * ((k + 1) / 2) + j / 2];
      return d_e2m1_to_f32((j % 2 == 0) ? (byte & 0xF) : (byte >> 4)) * d_e8m0_to_f32(w.scale[r * sc_cols + j / 32]);
    }
  }
  return 0.0f;
}

}  // namespace deepinfer::kernels::cuda
