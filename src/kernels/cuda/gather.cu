// CUDA: gathers and small row ops — weight rows by id (embedding), row gather, in-place
// scale, the MoE combine in the reference's accumulation order, the dequantisation of
// fake-quant codes/scales, batched copies and seeded random fills. Every result is bitwise
// equal to the CPU reference.
// The decodes and their bitwise notes: packed.cuh. Sums are __fadd_rn in the reference's order.
#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/hc_expand.cuh"
#include "kernels/cuda/packed.cuh"

namespace deepinfer::kernels::cuda {

namespace {

constexpr int kThreads = 256;
unsigned grid(int64_t n) { return static_cast<unsigned>(ceil_div(n, kThreads)); }

// Element (r, j) of w as float32, exactly as dequant_row.
__device__ inline float weight_at(const WeightView& w, int64_t r, int64_t j) {
  const int64_t k = w.cols, sc_cols = (k + 31) / 32;
  switch (w.format) {
    case WeightFormat::kF32: return __uint_as_float(static_cast<const uint32_t*>(w.data)[r * k + j]);
    case WeightFormat::kBF16: return __uint_as_float(static_cast<uint32_t>(static_cast<const uint16_t*>(w.data)[r * k + j]) << 16);
    case WeightFormat::kFP8Block32:
      return x86_mul(e4m3_exact(static_cast<const uint8_t*>(w.data)[r * k + j]), e8m0_exact(w.scale[(r / 32) * sc_cols + j / 32]));
    case WeightFormat::kFP8Row32:
      return x86_mul(e4m3_exact(static_cast<const uint8_t*>(w.data)[r * k + j]), e8m0_exact(w.scale[r * sc_cols + j / 32]));
    case WeightFormat::kMXFP4: {
      const uint8_t byte = static_cast<const uint8_t*>(w.data)[r * ((k + 1) / 2) + j / 2];
      return x86_mul(e2m1_exact((j % 2 == 0) ? (byte & 0xFu) : static_cast<uint32_t>(byte >> 4)), e8m0_exact(w.scale[r * sc_cols + j / 32]));
    }
  }
  return 0.0f;
}

// One thread per (row, column); the value is written into each of the `copies` slots.
__global__ void gather_weight_rows_k(WeightView w, const int64_t* ids, float* out, int64_t rows, int64_t copies, int64_t ldo) {
  DI_PDL_ENTRY();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t k = w.cols;
  if (i >= rows * k) return;
  const int64_t r = i / k, j = i % k;
  const float v = weight_at(w, ids[r], j);
  float* o = out + r * ldo + j;
  for (int64_t c = 0; c < copies; ++c) o[c * k] = v;
}

__global__ void scale_k(float* x, int64_t n, float s) {
  DI_PDL_ENTRY();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) x[i] = x86_mul(x[i], s);
}

// Bit copies (float loads/stores keep every bit, but say so).
__global__ void gather_rows_k(const uint32_t* src, const int32_t* idx, uint32_t* dst, int64_t rows, int64_t width) {
  DI_PDL_ENTRY();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= rows * width) return;
  const int64_t r = i / width, c = i % width;
  dst[i] = src[static_cast<int64_t>(idx[r]) * width + c];
}

// A block per (token, kCombineChunk channels): the token's K slot ids and rows staged in
// shared memory, thread 0 orders the slots by (expert id, slot), then every thread sums its
// channels in that order from 0.0f, then + shared.
// EXPAND (moe_combine_expand): each y element then expanded into the streams, as hc_expand_k
// would (HC: as hc_expand_at).
constexpr int kCombineChunk = 256;
template <bool EXPAND, int HC>
__global__ void moe_combine_k(MoeCombineArgs a, HcExpandArgs e) {
  DI_PDL_ENTRY();
  extern __shared__ int sm[];
  const int64_t t = blockIdx.x, K = a.k, D = a.dim;
  int *ids = sm, *order = sm + K, *row = sm + 2 * K;
  for (int64_t k = threadIdx.x; k < K; k += blockDim.x) ids[k] = a.ids[t * K + k];
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int64_t k = 0; k < K; ++k) {  // insertion sort, stable: equal ids keep slot order
      const int id = ids[k];
      int64_t p = k;
      while (p > 0 && ids[order[p - 1]] > id) {
        order[p] = order[p - 1];
        --p;
      }
      order[p] = static_cast<int>(k);
    }
  }
  __syncthreads();
  for (int64_t k = threadIdx.x; k < K; k += blockDim.x) row[k] = a.slot_row[t * K + order[k]];
  __syncthreads();
  const int64_t d1 = std::min<int64_t>(D, (blockIdx.y + 1) * static_cast<int64_t>(kCombineChunk));
  for (int64_t d = blockIdx.y * static_cast<int64_t>(kCombineChunk) + threadIdx.x; d < d1; d += blockDim.x) {
    float acc = 0.0f;
    for (int64_t k = 0; k < K; ++k) acc = __fadd_rn(acc, a.expert_out[static_cast<int64_t>(row[k]) * D + d]);
    if (a.shared) acc = __fadd_rn(acc, a.shared[t * D + d]);
    a.y[t * D + d] = acc;
    if constexpr (EXPAND) hc_expand_at<HC>(e, t, d, acc);
  }
}

// One thread per value.
__global__ void dequant_packed_k(int kind, const uint8_t* codes, const uint8_t* scales, float* out, int64_t n, int64_t block) {
  DI_PDL_ENTRY();
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e < n) dequant_packed_at(kind, codes, scales, out, e, block);
}

// Values 8 e8 .. 8 e8 + 7 (one block: the block a multiple of 8), each dequant_packed_at's: the
// codes in one load (8 FP8 bytes, or 8 FP4 nibbles in 4 bytes, low nibble first), one scale,
// one division, two 16-byte stores. codes 8-byte (FP8) or 4-byte (FP4) aligned, out 16-byte.
__device__ inline void dequant_packed_at8(int kind, const uint8_t* codes, const uint8_t* scales, float* out, int64_t e8,
                                          int64_t block) {
  const int64_t e = e8 * 8;
  float v[8];
  if (kind == static_cast<int>(FakeQuant::kFp8Pow2)) {
    fp8_pow2_at8(codes, scales, e8, block, v);
  } else {
    const uint8_t sc = scales[e / block];
    const float s = kind == static_cast<int>(FakeQuant::kFp4E4m3) ? e4m3_exact(sc) : e8m0_exact(sc);
    const uint32_t c = *reinterpret_cast<const uint32_t*>(codes + e / 2);  // b * block / 2 + (e - b * block) / 2
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = x86_mul(e2m1_exact((c >> (4 * j)) & 0xFu), s);
  }
  float4* o = reinterpret_cast<float4*>(out + e);
  o[0] = make_float4(v[0], v[1], v[2], v[3]);
  o[1] = make_float4(v[4], v[5], v[6], v[7]);
}

// blockIdx.y: the range; x: its values (8 a thread when the block and the addresses allow).
__global__ void dequant_packed_batch_k(DequantPackedBatchArgs a, int64_t first) {
  DI_PDL_ENTRY();
  const PackedDesc d = a.descs[first + blockIdx.y];
  const int64_t n = d.rows * (a.dim / a.block) * a.block, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int kind = static_cast<int>(a.kind);
  const uintptr_t code_align = kind == static_cast<int>(FakeQuant::kFp8Pow2) ? 8 : 4;
  if (a.block % 8 == 0 && reinterpret_cast<uintptr_t>(d.codes) % code_align == 0 && reinterpret_cast<uintptr_t>(d.out) % 16 == 0) {
    for (int64_t e8 = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e8 < n / 8; e8 += stride)
      dequant_packed_at8(kind, d.codes, d.scales, d.out, e8, a.block);
    return;
  }
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n; e += stride)
    dequant_packed_at(kind, d.codes, d.scales, d.out, e, a.block);
}

// blockIdx.y: the copy; 16-byte words when every address and the size allow, else bytes.
__global__ void copy_batch_k(CopyBatchArgs a, int64_t first) {
  DI_PDL_ENTRY();
  const CopyDesc d = a.descs[first + blockIdx.y];
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x, i0 = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (((reinterpret_cast<uintptr_t>(d.dst) | reinterpret_cast<uintptr_t>(d.src) | static_cast<uintptr_t>(d.bytes)) & 15u) == 0) {
    const uint4* src = static_cast<const uint4*>(d.src);
    uint4* dst = static_cast<uint4*>(d.dst);
    for (int64_t i = i0; i < d.bytes / 16; i += stride) dst[i] = src[i];
  } else {
    const uint8_t* src = static_cast<const uint8_t*>(d.src);
    uint8_t* dst = static_cast<uint8_t*>(d.dst);
    for (int64_t i = i0; i < d.bytes; i += stride) dst[i] = src[i];
  }
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
  const uint64_t s = d_splitmix64(a.seed), c = static_cast<uint64_t>(a.first + i);
  double u1 = static_cast<double>(d_splitmix64(s ^ (2 * c)) >> 11) * (1.0 / 9007199254740992.0);
  const double u2 = static_cast<double>(d_splitmix64(s ^ (2 * c + 1)) >> 11) * (1.0 / 9007199254740992.0);
  if (u1 < 1e-300) u1 = 1e-300;
  const float z = static_cast<float>(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
  const float v = a.mean == 0.0f ? __fmul_rn(a.std, z) : __fadd_rn(a.mean, __fmul_rn(a.std, z));
  if (a.format == WeightFormat::kF32) static_cast<float*>(a.out)[i] = v;
  else static_cast<__nv_bfloat16*>(a.out)[i] = __float2bfloat16_rn(v);
}

}  // namespace

void gather_weight_rows(const GatherWeightRowsArgs& a, Stream s) {
  const int64_t n = a.rows * a.w.cols;
  if (n == 0 || a.copies <= 0) return;
  const int64_t ldo = a.ldo ? a.ldo : a.copies * a.w.cols;
  launch_k(gather_weight_rows_k, grid(n), kThreads, 0, s, a.w, a.ids, a.out, a.rows, a.copies, ldo);
  DI_CUDA_LAUNCHED();
}

void scale(const ScaleArgs& a, Stream s) {
  if (a.n <= 0) return;
  launch_k(scale_k, grid(a.n), kThreads, 0, s, a.x, a.n, a.s);
  DI_CUDA_LAUNCHED();
}

void gather_rows(const GatherRowsArgs& a, Stream s) {
  const int64_t n = a.rows * a.width;
  if (n <= 0) return;
  launch_k(gather_rows_k, grid(n), kThreads, 0, s, reinterpret_cast<const uint32_t*>(a.src), a.idx, reinterpret_cast<uint32_t*>(a.dst),
                                             a.rows, a.width);
  DI_CUDA_LAUNCHED();
}

namespace {
template <bool EXPAND, int HC>
void launch_combine(const MoeCombineArgs& a, const HcExpandArgs& e, Stream s) {
  if (a.n <= 0 || a.dim <= 0) return;
  const dim3 grid(static_cast<unsigned>(a.n), static_cast<unsigned>(ceil_div(a.dim, kCombineChunk)));
  launch_k(moe_combine_k<EXPAND, HC>, grid, kThreads, static_cast<size_t>(3 * std::max<int64_t>(a.k, 1)) * sizeof(int), s, a, e);
  DI_CUDA_LAUNCHED();
}
}  // namespace
void moe_combine(const MoeCombineArgs& a, Stream s) { launch_combine<false, 0>(a, HcExpandArgs{}, s); }
void moe_combine_expand(const MoeCombineArgs& a, const HcExpandArgs& e, Stream s) {
  if (e.hc > kMaxStreams || !Backend::combine_expand_paired(a, e)) {
    std::fprintf(stderr, "deepinfer: moe_combine_expand: the expand does not take the combine's output (or > %d streams)\n",
                 kMaxStreams);
    std::abort();
  }
  if (e.hc == 4) launch_combine<true, 4>(a, e, s);
  else launch_combine<true, 0>(a, e, s);
}

void dequant_packed_batch(const DequantPackedBatchArgs& a, Stream s) {
  if (a.n <= 0 || a.block <= 0 || a.max_rows <= 0) return;
  const int64_t per = ceil_div(a.max_rows * a.dim, a.block % 8 == 0 ? 8 : 1);  // threads a range needs
  const unsigned bx = static_cast<unsigned>(std::min<int64_t>(ceil_div(per, kThreads), 1024));
  for (int64_t first = 0; first < a.n; first += 65535) {
    const unsigned by = static_cast<unsigned>(std::min<int64_t>(a.n - first, 65535));
    launch_k(dequant_packed_batch_k, dim3(bx, by), kThreads, 0, s, a, first);
    DI_CUDA_LAUNCHED();
  }
}

void copy_batch(const CopyBatchArgs& a, Stream s) {
  if (a.n <= 0 || a.max_bytes <= 0) return;
  const unsigned bx = static_cast<unsigned>(std::min<int64_t>(ceil_div(a.max_bytes, kThreads * 16), 1024));
  for (int64_t first = 0; first < a.n; first += 65535) {
    const unsigned by = static_cast<unsigned>(std::min<int64_t>(a.n - first, 65535));
    launch_k(copy_batch_k, dim3(bx, by), kThreads, 0, s, a, first);
    DI_CUDA_LAUNCHED();
  }
}

void dequant_packed(const DequantPackedArgs& a, Stream s) {
  if (a.block <= 0) return;
  const int64_t n = a.rows * (a.dim / a.block) * a.block;
  if (n <= 0) return;
  launch_k(dequant_packed_k, grid(n), kThreads, 0, s, static_cast<int>(a.kind), a.codes, a.scales, a.out, n, a.block);
  DI_CUDA_LAUNCHED();
}

void fill_random(const RandomFillArgs& a, Stream s) {
  if (a.n == 0) return;
  if (a.format != WeightFormat::kF32 && a.format != WeightFormat::kBF16) {
    std::fprintf(stderr, "deepinfer: fill_random stores float32 or bf16\n");
    std::abort();
  }
  launch_k(fill_random_k, grid(a.n), kThreads, 0, s, a);
  DI_CUDA_LAUNCHED();
}

}  // namespace deepinfer::kernels::cuda
