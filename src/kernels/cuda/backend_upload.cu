// CUDA backend: the upload kernels. host_copy reads pinned host memory from a kernel (so it joins the
// programmatic launch chain); inline_copy / inline_scatter carry small uploads in the launch's
// parameters, and inline_scatter the copies within device memory that follow them (upload_batch).
#include <algorithm>
#include <cstring>
#include <cstdlib>

#include "kernels/cuda/cuda_ops.h"

namespace deepinfer::kernels::cuda {

namespace {

constexpr int kThreads = 256;
unsigned grid(int64_t n) { return static_cast<unsigned>(ceil_div(n, kThreads)); }

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
void inline_copy_n(void* dst, const void* src, int64_t n, Stream s) {
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

}  // namespace

void host_copy(void* dst, const void* src, int64_t n, Stream s) {
  if (n == 0) return;
  launch_k(host_copy_k, grid(std::max<int64_t>(n / 16, 1)), kThreads, 0, s, dst, src, n);
  DI_CUDA_LAUNCHED();
}

bool inline_copy(void* dst, const void* src, int64_t n, Stream s) {
  if (!s.settings->inline_upload || n <= 0 || n > kInlineCopyMax || reinterpret_cast<uintptr_t>(dst) % 16 != 0) return false;
  if (n <= 256) inline_copy_n<256>(dst, src, n, s);
  else if (n <= 1024) inline_copy_n<1024>(dst, src, n, s);
  else inline_copy_n<kInlineCopyMax>(dst, src, n, s);
  return true;
}

bool inline_scatter(const UploadItem* items, int64_t n, Stream s) {
  if (!s.settings->inline_upload || n <= 0 || n > kInlineScatterItems) return false;
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

}  // namespace deepinfer::kernels::cuda
