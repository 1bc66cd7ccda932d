// A device experiment, not part of the engine: do Hopper's warpgroup products (wgmma, m64n8k16,
// A from registers, B from shared memory) give the same float32 bits as the mma.sync m16n8k16
// chain the bf16 product kernel uses (linear_bf16.cuh), for the same operands in the same k order? If
// they do, a wgmma/TMA product for prefill can keep batch invariance against the decode tiling;
// if not, the decode tiling would have to move to wgmma too.
//
// One warpgroup (128 threads) computes a 64 x 8 tile over K = 16 (one step) and K = 512 (32
// chained steps) both ways. The shared-memory descriptor's two offsets are tried both ways round
// at K = 16 (which one strides along k for a k-major B without swizzle), each checked against a
// float64 reference first, so a wrong layout shows as a wrong product, not as a bit difference.
// Then the product kernel's own layout (linear_bf16.cuh): 64 x 256, both operands in the 128-byte
// swizzle, at K = 64 and 512. Output: per variant and K, the largest relative error against the
// reference and how many outputs are bitwise the mma.sync chain's. Exit status 0 when the
// variants compute the product; the bit verdict is in the output.
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cuda/mma.cuh"

using deepinfer::kernels::cuda::mma_bf16;
using deepinfer::kernels::cuda::sw128_at;
using deepinfer::kernels::cuda::wgmma_commit;
using deepinfer::kernels::cuda::wgmma_desc_sw128;
using deepinfer::kernels::cuda::wgmma_fence;
using deepinfer::kernels::cuda::wgmma_hold;
using deepinfer::kernels::cuda::wgmma_m64k16_ss;
using deepinfer::kernels::cuda::wgmma_wait;

namespace {

constexpr int kM = 64, kN = 8, kMaxK = 512;

#define CHECK(x)                                                                             \
  do {                                                                                       \
    cudaError_t e_ = (x);                                                                    \
    if (e_ != cudaSuccess) {                                                                 \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(2);                                                                          \
    }                                                                                        \
  } while (0)

// Two bf16 of row-major storage at p (p even): the low half the lower index.
__device__ uint32_t pair(const __nv_bfloat16* p) { return *reinterpret_cast<const uint32_t*>(p); }

// mma.sync: warp w rows 16w..16w+15, the fragments straight from global memory.
// a: [kM][K] row-major, b: [kN][K] (k contiguous), y: [kM][kN].
__global__ void mma_sync_k(const __nv_bfloat16* a, const __nv_bfloat16* b, int K, float* y) {
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int k0 = 0; k0 < K; k0 += 16) {
    const __nv_bfloat16* r0 = a + (16 * w + g) * K + k0;
    const __nv_bfloat16* r1 = r0 + 8 * K;
    const uint32_t af[4] = {pair(r0 + 2 * t), pair(r1 + 2 * t), pair(r0 + 2 * t + 8), pair(r1 + 2 * t + 8)};
    const __nv_bfloat16* bn = b + g * K + k0;
    mma_bf16(c, af, pair(bn + 2 * t), pair(bn + 2 * t + 8));
  }
  float* o = y + (16 * w + g) * kN + 2 * t;
  o[0] = c[0];
  o[1] = c[1];
  o[8 * kN] = c[2];
  o[8 * kN + 1] = c[3];
}

// The shared-memory matrix descriptor: start, leading and stride byte offsets (16-byte units),
// no swizzle.
__device__ uint64_t desc(const void* smem, uint32_t lbo, uint32_t sbo) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  return static_cast<uint64_t>((s >> 4) & 0x3FFF) | (static_cast<uint64_t>((lbo >> 4) & 0x3FFF) << 16) |
         (static_cast<uint64_t>((sbo >> 4) & 0x3FFF) << 32);
}

// wgmma: B staged as 8 x 8 core matrices (8 rows of n, 16 bytes of k each, 128 bytes), core
// matrix kc (k 8kc..8kc+7) at byte 128 kc; a step's two at 256 s and 256 s + 128. k_in_lbo:
// the 128-byte k stride in the leading offset (else in the stride offset).
__global__ void wgmma_k(const __nv_bfloat16* a, const __nv_bfloat16* b, int K, int k_in_lbo, float* y) {
  __shared__ __align__(128) __nv_bfloat16 sb[kN * kMaxK];
  for (int i = threadIdx.x; i < kN * K; i += blockDim.x) {
    const int n = i / K, k = i % K, kc = k / 8;
    sb[kc * 64 + n * 8 + k % 8] = b[n * K + k];
  }
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  float d0 = 0.0f, d1 = 0.0f, d2 = 0.0f, d3 = 0.0f;
  const uint32_t lbo = k_in_lbo ? 128u : 1024u, sbo = k_in_lbo ? 1024u : 128u;
  for (int k0 = 0; k0 < K; k0 += 16) {
    const __nv_bfloat16* r0 = a + (16 * w + g) * K + k0;
    const __nv_bfloat16* r1 = r0 + 8 * K;
    const uint32_t a0 = pair(r0 + 2 * t), a1 = pair(r1 + 2 * t), a2 = pair(r0 + 2 * t + 8), a3 = pair(r1 + 2 * t + 8);
    const uint64_t db = desc(sb + (k0 / 8) * 64, lbo, sbo);
    const int scale_d = k0 > 0 ? 1 : 0;
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, p, 1, 1, 0;\n}\n"
        : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(db), "r"(scale_d));
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  }
  float* o = y + (16 * w + g) * kN + 2 * t;
  o[0] = d0;
  o[1] = d1;
  o[8 * kN] = d2;
  o[8 * kN + 1] = d3;
}

// The product kernel's layout (linear_bf16.cuh, WG): 64 x 256 over K (a multiple of 64, at most kMaxK)
// by wgmma_m64k16_ss<256>, both operands staged a 64-wide k slice at a time in the 128-byte
// swizzle (sw128_at, wgmma_desc_sw128 from mma.cuh), and the mma.sync chain for the same tile
// (warp w rows 16 w.., 32 column pieces of 8). y: [64][256] each.
constexpr int kN2 = 256, kK2 = 64;
__global__ void wide_k(const __nv_bfloat16* a, const __nv_bfloat16* b, int K, float* y_wg, float* y_sync) {
  __shared__ __align__(1024) __nv_bfloat16 sa[kM * kK2], sb[kN2 * kK2];
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  float d[128] = {}, c[32][4] = {};
  for (int k0 = 0; k0 < K; k0 += kK2) {
    __syncthreads();
    for (int i = threadIdx.x; i < kM * kK2; i += blockDim.x) {
      const int r = i / kK2, k = i % kK2;
      sa[sw128_at(r, k / 8) + k % 8] = a[r * K + k0 + k];
    }
    for (int i = threadIdx.x; i < kN2 * kK2; i += blockDim.x) {
      const int n = i / kK2, k = i % kK2;
      sb[sw128_at(n, k / 8) + k % 8] = b[n * K + k0 + k];
    }
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
    wgmma_hold(d);
    wgmma_fence();
    for (int kk = 0; kk < kK2; kk += 16) wgmma_m64k16_ss<kN2>(d, wgmma_desc_sw128(sa + kk), wgmma_desc_sw128(sb + kk));
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_hold(d);
    for (int kk = 0; kk < kK2; kk += 16) {
      const __nv_bfloat16* r0 = a + (16 * w + g) * K + k0 + kk;
      const __nv_bfloat16* r1 = r0 + 8 * K;
      const uint32_t af[4] = {pair(r0 + 2 * t), pair(r1 + 2 * t), pair(r0 + 2 * t + 8), pair(r1 + 2 * t + 8)};
      for (int j = 0; j < 32; ++j) {
        const __nv_bfloat16* bn = b + (8 * j + g) * K + k0 + kk;
        mma_bf16(c[j], af, pair(bn + 2 * t), pair(bn + 2 * t + 8));
      }
    }
  }
  for (int j = 0; j < 32; ++j)
    for (int v = 0; v < 4; ++v) {
      const int row = 16 * w + g + (v >= 2 ? 8 : 0), col = 8 * j + 2 * t + (v & 1);
      y_wg[row * kN2 + col] = d[4 * j + v];
      y_sync[row * kN2 + col] = c[j][v];
    }
}

float bf16_round(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

}  // namespace

int main() {
  std::mt19937 gen(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> ex(-12, 12);
  // Values over a wide range of exponents, so that the order and width of the additions show.
  std::vector<__nv_bfloat16> ha(kM * kMaxK), hb(kN * kMaxK);
  std::vector<float> fa(ha.size()), fb(hb.size());
  for (size_t i = 0; i < ha.size(); ++i) ha[i] = __float2bfloat16_rn(fa[i] = bf16_round(std::ldexp(nd(gen), ex(gen))));
  for (size_t i = 0; i < hb.size(); ++i) hb[i] = __float2bfloat16_rn(fb[i] = bf16_round(std::ldexp(nd(gen), ex(gen))));
  __nv_bfloat16 *da = nullptr, *db = nullptr;
  float* dy = nullptr;
  CHECK(cudaMalloc(&da, ha.size() * 2));
  CHECK(cudaMalloc(&db, hb.size() * 2));
  CHECK(cudaMalloc(&dy, kM * kN * 4));
  bool computed = false;
  for (int K : {16, kMaxK}) {
    // Operands for this K: the first K columns, packed.
    std::vector<__nv_bfloat16> pa(kM * K), pb(kN * K);
    for (int r = 0; r < kM; ++r) std::memcpy(&pa[r * K], &ha[r * kMaxK], K * 2);
    for (int n = 0; n < kN; ++n) std::memcpy(&pb[n * K], &hb[n * kMaxK], K * 2);
    CHECK(cudaMemcpy(da, pa.data(), pa.size() * 2, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(db, pb.data(), pb.size() * 2, cudaMemcpyHostToDevice));
    std::vector<double> ref(kM * kN, 0.0);
    double mx = 0.0;
    for (int r = 0; r < kM; ++r)
      for (int n = 0; n < kN; ++n) {
        for (int k = 0; k < K; ++k) ref[r * kN + n] += static_cast<double>(fa[r * kMaxK + k]) * fb[n * kMaxK + k];
        mx = std::max(mx, std::fabs(ref[r * kN + n]));
      }
    auto err = [&](const std::vector<float>& y) {
      double e = 0.0;
      for (int i = 0; i < kM * kN; ++i) e = std::max(e, std::fabs(y[i] - ref[i]));
      return e / mx;
    };
    std::vector<float> ysync(kM * kN), yw(kM * kN);
    mma_sync_k<<<1, 128>>>(da, db, K, dy);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(ysync.data(), dy, ysync.size() * 4, cudaMemcpyDeviceToHost));
    std::printf("K %3d  mma.sync chain: max error %.2e (of the largest output)\n", K, err(ysync));
    // (The stride-offset reading is tried at K = 16 only: at larger K it reads past the tile.)
    for (int v : {1, 0}) {
      if (v == 0 && K > 16) continue;
      CHECK(cudaMemset(dy, 0xFF, kM * kN * 4));
      wgmma_k<<<1, 128>>>(da, db, K, v, dy);
      CHECK(cudaGetLastError());
      CHECK(cudaDeviceSynchronize());
      CHECK(cudaMemcpy(yw.data(), dy, yw.size() * 4, cudaMemcpyDeviceToHost));
      int same = 0;
      for (int i = 0; i < kM * kN; ++i) same += std::memcmp(&yw[i], &ysync[i], 4) == 0;
      const double e = err(yw);
      const bool ok = e < 1e-3;
      computed = computed || ok;
      std::printf("K %3d  wgmma, k stride in the %s offset: max error %.2e (%s), bitwise the mma.sync chain's: %d of %d\n", K,
                  v ? "leading" : "stride", e, ok ? "the product" : "not the product: wrong layout", same, kM * kN);
    }
  }
  // The product kernel's own layout and wrappers, 256 columns, K = 64 and 512.
  bool wide_ok = true;
  for (int K : {kK2, kMaxK}) {
    std::vector<__nv_bfloat16> pa(kM * K), pb(kN2 * K);
    for (int r = 0; r < kM; ++r) std::memcpy(&pa[r * K], &ha[r * kMaxK], K * 2);
    std::vector<float> fb2(kN2 * K);
    std::normal_distribution<float> nd2(0.0f, 1.0f);
    for (int i = 0; i < kN2 * K; ++i) pb[i] = __float2bfloat16_rn(fb2[i] = bf16_round(std::ldexp(nd2(gen), ex(gen))));
    __nv_bfloat16 *da2 = nullptr, *db2 = nullptr;
    float *dw = nullptr, *ds = nullptr;
    CHECK(cudaMalloc(&da2, pa.size() * 2));
    CHECK(cudaMalloc(&db2, pb.size() * 2));
    CHECK(cudaMalloc(&dw, kM * kN2 * 4));
    CHECK(cudaMalloc(&ds, kM * kN2 * 4));
    CHECK(cudaMemcpy(da2, pa.data(), pa.size() * 2, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(db2, pb.data(), pb.size() * 2, cudaMemcpyHostToDevice));
    wide_k<<<1, 128>>>(da2, db2, K, dw, ds);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    std::vector<float> yw(kM * kN2), ys(kM * kN2);
    CHECK(cudaMemcpy(yw.data(), dw, yw.size() * 4, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(ys.data(), ds, ys.size() * 4, cudaMemcpyDeviceToHost));
    double mx = 0.0, ew = 0.0, es = 0.0;
    std::vector<double> ref(kM * kN2, 0.0);
    for (int r = 0; r < kM; ++r)
      for (int n = 0; n < kN2; ++n) {
        for (int k = 0; k < K; ++k) ref[r * kN2 + n] += static_cast<double>(fa[r * kMaxK + k]) * fb2[n * K + k];
        mx = std::max(mx, std::fabs(ref[r * kN2 + n]));
      }
    int same = 0;
    for (int i = 0; i < kM * kN2; ++i) {
      ew = std::max(ew, std::fabs(yw[i] - ref[i]));
      es = std::max(es, std::fabs(ys[i] - ref[i]));
      same += std::memcmp(&yw[i], &ys[i], 4) == 0;
    }
    const bool ok = ew / mx < 1e-3;
    wide_ok = wide_ok && ok;
    std::printf("K %3d  64 x 256, the product kernel's layout (128-byte swizzle): wgmma max error %.2e (%s), "
                "mma.sync %.2e; bitwise equal: %d of %d\n",
                K, ew / mx,
                ok ? "the product" : "not the product", es / mx, same, kM * kN2);
    CHECK(cudaFree(da2));
    CHECK(cudaFree(db2));
    CHECK(cudaFree(dw));
    CHECK(cudaFree(ds));
  }
  return computed && wide_ok ? 0 : 1;
}
