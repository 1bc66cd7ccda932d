// CUDA kernel lab: achieved GB/s and TFLOP/s of the CUDA backend's ops at V4.1-Flash shapes,
// next to the limits measured on the H200 machines (4.26 TB/s copy bandwidth; the fp32 SIMT
// rate is ~67 TFLOP/s by the datasheet, bf16 tensor cores ~790 TFLOP/s measured). First
// versions of the kernels: the numbers are the baseline later work is measured against.
// Built with DEEPINFER_CUDA=ON; run on the device machine.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <vector>

#include "kernels/backend.h"

using namespace deepinfer::kernels;

namespace {
template <typename T>
T* dalloc(size_t n, T fill) {
  T* p = nullptr;
  cudaMalloc(&p, n * sizeof(T));
  std::vector<T> h(n, fill);
  cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice);
  return p;
}
double time_ms(Backend& be, const std::function<void()>& f, int reps = 20) {
  f();
  be.synchronize();
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaEventRecord(a);
  for (int i = 0; i < reps; ++i) f();
  be.synchronize();
  cudaEventRecord(b);
  cudaEventSynchronize(b);
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  return ms / static_cast<float>(reps);
}
constexpr double kBw = 4.26e12, kFp32 = 67e12;
}  // namespace

int main() {
  auto be = make_cuda_backend(0);
  std::printf("limits: copy bandwidth %.2f TB/s, fp32 SIMT %.0f TFLOP/s (datasheet)\n", kBw / 1e12, kFp32 / 1e12);
  // Matmul at the wq_b shape [32768, 1280], decode (m = 8) and prefill (m = 4096), f32 and FP8 weights.
  const int64_t N = 32768, K = 1280;
  float* wf = dalloc<float>(static_cast<size_t>(N * K), 0.01f);
  uint8_t* w8 = dalloc<uint8_t>(static_cast<size_t>(N * K), 0x38);
  uint8_t* s8 = dalloc<uint8_t>(static_cast<size_t>((N / 32) * (K / 32)), 127);
  for (int64_t m : {8, 4096}) {
    float* x = dalloc<float>(static_cast<size_t>(m * K), 1.0f);
    float* y = dalloc<float>(static_cast<size_t>(m * N), 0.0f);
    for (int fp8 = 0; fp8 < 2; ++fp8) {
      WeightView w = fp8 ? WeightView{WeightFormat::kFP8Block32, w8, s8, N, K} : WeightView::f32(wf, N, K);
      const double ms = time_ms(*be, [&] { be->matmul({.x = x, .w = w, .y = y, .m = m, .n = N, .k = K}); });
      const double bytes = static_cast<double>(weight_bytes(w) + (m * K + m * N) * 4);
      const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(N) * static_cast<double>(K);
      std::printf("matmul %s m=%lld [%lld x %lld]: %.3f ms, %.0f GB/s (%.0f%% of bandwidth), %.1f TFLOP/s (%.0f%% of fp32)\n",
                  fp8 ? "fp8 " : "f32 ", static_cast<long long>(m), static_cast<long long>(N), static_cast<long long>(K), ms,
                  bytes / ms / 1e6, 100 * bytes / ms * 1e3 / kBw, flops / ms / 1e9, 100 * flops / ms * 1e3 / kFp32);
    }
    cudaFree(x);
    cudaFree(y);
  }
  // RMSNorm [4096, 5120].
  {
    const int64_t R = 4096, D = 5120;
    float* x = dalloc<float>(static_cast<size_t>(R * D), 1.0f);
    float* w = dalloc<float>(static_cast<size_t>(D), 1.0f);
    float* y = dalloc<float>(static_cast<size_t>(R * D), 0.0f);
    const double ms = time_ms(*be, [&] { be->rms_norm({.x = x, .w = w, .y = y, .rows = R, .dim = D}); });
    const double bytes = static_cast<double>(2 * R * D * 4);
    std::printf("rms_norm [%lld x %lld]: %.3f ms, %.0f GB/s (%.0f%% of bandwidth)\n", static_cast<long long>(R),
                static_cast<long long>(D), ms, bytes / ms / 1e6, 100 * bytes / ms * 1e3 / kBw);
  }
  // Attention: 64 heads x 512, 128-entry window + 512 selected compressed entries.
  for (int64_t S : {8, 256}) {
    const int64_t H = 64, hd = 512, tw = 128 + S, tc = 4096;
    float* q = dalloc<float>(static_cast<size_t>(S * H * hd), 0.01f);
    float* win = dalloc<float>(static_cast<size_t>(tw * hd), 0.01f);
    float* comp = dalloc<float>(static_cast<size_t>(tc * hd), 0.01f);
    float* sink = dalloc<float>(static_cast<size_t>(H), 0.0f);
    float* out = dalloc<float>(static_cast<size_t>(S * H * hd), 0.0f);
    std::vector<int64_t> hp(static_cast<size_t>(tw)), hq(static_cast<size_t>(S));
    for (int64_t i = 0; i < tw; ++i) hp[static_cast<size_t>(i)] = i;
    for (int64_t i = 0; i < S; ++i) hq[static_cast<size_t>(i)] = tw - S + i;
    std::vector<uint8_t> hs(static_cast<size_t>(S * tc), 0);
    for (int64_t s = 0; s < S; ++s)
      for (int64_t j = 0; j < 512; ++j) hs[static_cast<size_t>(s * tc + j * 8)] = 1;
    int64_t *wp, *qp;
    uint8_t* sel;
    cudaMalloc(&wp, hp.size() * 8);
    cudaMalloc(&qp, hq.size() * 8);
    cudaMalloc(&sel, hs.size());
    cudaMemcpy(wp, hp.data(), hp.size() * 8, cudaMemcpyHostToDevice);
    cudaMemcpy(qp, hq.data(), hq.size() * 8, cudaMemcpyHostToDevice);
    cudaMemcpy(sel, hs.data(), hs.size(), cudaMemcpyHostToDevice);
    const double ms = time_ms(*be, [&] {
      be->attention({.q = q, .q_pos = qp, .win = win, .win_pos = wp, .comp = comp, .comp_sel = sel, .sink = sink, .out = out, .s = S,
                     .heads = H, .head_dim = hd, .t_win = tw, .t_comp = tc, .window = 128, .scale = 0.044f});
    }, 5);
    const double flops = 4.0 * static_cast<double>(S * H * (128 + 512) * hd);
    const double bytes = static_cast<double>(S * (128 + 512) * hd * 4 + 2 * S * H * hd * 4);
    std::printf("attention S=%lld (64 x 512, 128 window + 512 selected): %.3f ms, %.2f TFLOP/s (%.0f%% of fp32), %.0f GB/s\n",
                static_cast<long long>(S), ms, flops / ms / 1e9, 100 * flops / ms * 1e3 / kFp32, bytes / ms / 1e6);
  }
  return 0;
}
