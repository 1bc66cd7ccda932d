// CUDA kernel lab: achieved GB/s and TFLOP/s of the CUDA backend's ops at V4.1-Flash shapes,
// next to the limits measured on the H200 machines (4.26 TB/s copy bandwidth; the fp32 SIMT
// rate is ~67 TFLOP/s by the datasheet, bf16 tensor cores ~790 TFLOP/s measured).
// Built with DEEPINFER_CUDA=ON; run on the device machine.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <functional>
#include <string>
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
constexpr double kBw = 4.26e12, kFp32 = 67e12, kBf16 = 790e12;

// The routed experts' up projection (64 experts [2304, 5120] bf16, top-6, balanced routing) as
// one grouped op and as the former matmul per expert (counts known on the host), bf16 backend.
void grouped_experts() {
  for (bool invariant : {true, false}) {
    auto be = make_cuda_backend(0, Precision::kBF16, invariant);
    const int64_t E = 64, K = 6, n = 2304, k = 5120;
    std::vector<WeightView> w;
    for (int64_t e = 0; e < E; ++e)
      w.push_back({WeightFormat::kBF16, dalloc<uint16_t>(static_cast<size_t>(n * k), 0x3c00), nullptr, n, k});
    for (int64_t tokens : {1, 64, 256, 4096}) {
      const int64_t rows = tokens * K;
      std::vector<int32_t> off(static_cast<size_t>(E + 1), 0);
      for (int64_t i = 0; i < rows; ++i) ++off[static_cast<size_t>(i % E) + 1];  // pair i -> expert i mod E
      for (int64_t e = 0; e < E; ++e) off[static_cast<size_t>(e) + 1] += off[static_cast<size_t>(e)];
      int32_t* doff = dalloc<int32_t>(off.size(), 0);
      cudaMemcpy(doff, off.data(), off.size() * 4, cudaMemcpyHostToDevice);
      float* x = dalloc<float>(static_cast<size_t>(rows * k), 0.5f);
      float* y = dalloc<float>(static_cast<size_t>(rows * n), 0.0f);
      const double grouped = time_ms(*be, [&] {
        be->grouped_matmul({.x = x, .w = w.data(), .offsets = doff, .y = y, .rows = rows, .n = n, .k = k, .experts = E});
      });
      const double per_expert = time_ms(*be, [&] {
        for (int64_t e = 0; e < E; ++e) {
          const int64_t r0 = off[static_cast<size_t>(e)], m = off[static_cast<size_t>(e) + 1] - r0;
          if (m) be->matmul({.x = x + r0 * k, .w = w[static_cast<size_t>(e)], .y = y + r0 * n, .m = m, .n = n, .k = k});
        }
      });
      const int64_t active = std::min(rows, E);
      const double bytes = static_cast<double>(active * n * k * 2 + rows * (k + n) * 4);
      const double flops = 2.0 * static_cast<double>(rows) * static_cast<double>(n) * static_cast<double>(k);
      std::printf("experts up-proj%s %5lld tokens (%2lld experts x [%lld x %lld] bf16): grouped %7.3f ms, %5.0f GB/s (%3.0f%%), "
                  "%5.1f TFLOP/s (%3.0f%% of bf16) | matmul per expert %7.3f ms | %.2fx\n",
                  invariant ? " (invariant)" : "            ", static_cast<long long>(tokens), static_cast<long long>(active),
                  static_cast<long long>(n), static_cast<long long>(k), grouped, bytes / grouped / 1e6,
                  100 * bytes / grouped * 1e3 / kBw, flops / grouped / 1e9, 100 * flops / grouped * 1e3 / kBf16, per_expert,
                  per_expert / grouped);
      cudaFree(doff);
      cudaFree(x);
      cudaFree(y);
    }
    for (auto& v : w) cudaFree(const_cast<void*>(v.data));
  }
}

// The dense products of one decode step at one token (the bench shape's per-layer dims, bf16
// weights, batch-invariant backend), and one token's six experts: GB/s of weights streamed
// (each launch timed alone, with its activation conversion; inside a CUDA graph they run a
// few us shorter).
void decode_products() {
  auto be = make_cuda_backend(0, Precision::kBF16, true);
  struct P {
    const char* name;
    int64_t n, k, groups;
  };
  const P ps[] = {{"wq_a", 1280, 5120, 1},        {"wkv", 512, 5120, 1},        {"wq_b", 32768, 1280, 1},
                  {"wo_a (8 groups)", 1024, 4096, 8}, {"wo_b", 5120, 8192, 1},     {"router", 64, 5120, 1},
                  {"shared gate", 2304, 5120, 1}, {"shared down", 5120, 2304, 1}, {"head", 129280, 5120, 1}};
  float* x = dalloc<float>(size_t{8} * 8192, 0.5f);
  float* y = dalloc<float>(size_t{8} * 129280, 0.0f);
  {
    double total_ms = 0, total_bytes = 0;
    for (const P& p : ps) {
      const WeightView w{WeightFormat::kBF16, dalloc<uint16_t>(static_cast<size_t>(p.groups * p.n * p.k), 0x3c00), nullptr,
                         p.groups * p.n, p.k};
      const double ms = time_ms(*be, [&] {
        be->matmul({.x = x, .w = w, .y = y, .m = 1, .n = p.n, .k = p.k, .groups = p.groups, .x_group_stride = p.k,
                    .y_group_stride = p.n});
      }, 50);
      const double bytes = static_cast<double>(p.groups * p.n * p.k * 2);
      std::printf("decode product %-16s [%6lld x %5lld] x %lld: %7.1f us, %5.0f GB/s (%3.0f%%)\n", p.name,
                  static_cast<long long>(p.n), static_cast<long long>(p.k), static_cast<long long>(p.groups), ms * 1e3,
                  bytes / ms / 1e6, 100 * bytes / ms * 1e3 / kBw);
      if (std::string(p.name) != "head") {
        total_ms += ms;
        total_bytes += bytes;
      }
      cudaFree(const_cast<void*>(w.data));
    }
    std::printf("decode products: a layer's dense products %.1f us, %.0f GB/s (%.0f%%)\n", total_ms * 1e3,
                total_bytes / total_ms / 1e6, 100 * total_bytes / total_ms * 1e3 / kBw);
    // One token's six experts, up (2304 x 5120) and down (5120 x 2304).
    for (auto [n, k] : {std::pair<int64_t, int64_t>{2304, 5120}, {5120, 2304}}) {
      const int64_t E = 64, rows = 6;
      std::vector<WeightView> w;
      for (int64_t e = 0; e < E; ++e)
        w.push_back({WeightFormat::kBF16, e < rows ? dalloc<uint16_t>(static_cast<size_t>(n * k), 0x3c00) : w[0].data, nullptr, n, k});
      std::vector<int32_t> off(static_cast<size_t>(E + 1), static_cast<int32_t>(rows));
      for (int64_t e = 0; e <= rows; ++e) off[static_cast<size_t>(e)] = static_cast<int32_t>(e);
      int32_t* doff = dalloc<int32_t>(off.size(), 0);
      cudaMemcpy(doff, off.data(), off.size() * 4, cudaMemcpyHostToDevice);
      const double ms = time_ms(*be, [&] {
        be->grouped_matmul({.x = x, .w = w.data(), .offsets = doff, .y = y, .rows = rows, .n = n, .k = k, .experts = E});
      }, 50);
      const double bytes = static_cast<double>(rows * n * k * 2);
      std::printf("decode product experts x 6       [%6lld x %5lld]: %7.1f us, %5.0f GB/s (%3.0f%%)\n",
                  static_cast<long long>(n), static_cast<long long>(k), ms * 1e3, bytes / ms / 1e6, 100 * bytes / ms * 1e3 / kBw);
      for (int64_t e = 0; e < rows; ++e) cudaFree(const_cast<void*>(w[static_cast<size_t>(e)].data));
      cudaFree(doff);
    }
  }
  cudaFree(x);
  cudaFree(y);
}
}  // namespace

// Sampling on the GPU over the released vocabulary (129280 ids): greedy rows, and rows drawn
// with temperature 1 alone, with temperature 1, top-k 50, top-p 0.9 (peaked logits: top-p's shared-memory sort) and
// temperature 1, top-p 0.95 alone (flat logits: the bisection path). Bytes: the logits read once.
void sampling() {
  auto be = make_cuda_backend(0);
  const int64_t V = 129280;
  for (int64_t rows : {1, 64, 256}) {
    std::vector<float> h(static_cast<size_t>(rows * V));
    uint32_t st = 7;
    for (auto& v : h) {
      st = st * 1664525u + 1013904223u;
      v = static_cast<float>(st >> 8) / 16777216.0f * 8.0f;
    }
    float* x = nullptr;
    cudaMalloc(&x, h.size() * sizeof(float));
    cudaMemcpy(x, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice);
    int32_t* ids = dalloc<int32_t>(static_cast<size_t>(rows), 0);
    struct Case {
      const char* name;
      DrawParams p;
      float scale;
    };
    DrawParams top{.temperature = 1.0f, .top_k = 50, .top_p = 0.9f, .u = 0.5};
    DrawParams flat{.temperature = 1.0f, .top_p = 0.95f, .u = 0.5};
    DrawParams plain{.temperature = 1.0f, .u = 0.5};
    DrawParams with_lp{.temperature = 1.0f, .u = 0.5, .logprobs = 5};
    float* lp = dalloc<float>(static_cast<size_t>(rows * 6), 0.0f);
    int32_t* lp_ids = dalloc<int32_t>(static_cast<size_t>(rows * 5), 0);
    for (const Case& c : {Case{"greedy              ", DrawParams{}, 8.0f}, Case{"T1                  ", plain, 8.0f},
                          Case{"T1 top-k 50 top-p .9", top, 8.0f},
                          Case{"T1 top-p .95, flat  ", flat, 0.01f}, Case{"T1 + 5 logprobs     ", with_lp, 8.0f}}) {
      std::vector<float> hs(h);
      for (auto& v : hs) v *= c.scale / 8.0f;
      cudaMemcpy(x, hs.data(), hs.size() * sizeof(float), cudaMemcpyHostToDevice);
      DrawParams* dp = dalloc<DrawParams>(static_cast<size_t>(rows), c.p);
      const double ms = time_ms(*be, [&] {
        be->sample_rows({.x = x, .params = dp, .ids = ids, .rows = rows, .cols = V, .logprob = lp, .top_ids = lp_ids,
                         .top_logprobs = lp + rows, .max_logprobs = 5});
      }, 10);
      const double bytes = static_cast<double>(rows * V * 4);
      std::printf("sample_rows %s %4lld rows x %lld: %8.3f ms = %6.1f us per row, %5.0f GB/s (%4.1f%% of bandwidth for one read of the logits)\n",
                  c.name, static_cast<long long>(rows), static_cast<long long>(V), ms, ms * 1e3 / static_cast<double>(rows),
                  bytes / ms / 1e6, 100.0 * bytes / (ms * 1e-3) / kBw);
      cudaFree(dp);
    }
    cudaFree(x);
    cudaFree(ids);
    cudaFree(lp);
    cudaFree(lp_ids);
  }
}

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
  // Attention: 64 heads x 512, 128-entry window + 512 of 2048 compressed entries selected per
  // query (prefill: the window holds the chunk's entries after 128 cached ones): the float32
  // tiled kernel (a CTA per query and 32 heads, entry tiles in shared memory), then the bf16
  // tensor-core kernel.
  std::printf("attention: first-version figures recorded before: S=8 1.226 ms, S=256 6.671 ms (t_comp 4096)\n");
  auto be16 = make_cuda_backend(0, Precision::kBF16);
  for (int64_t S : {1, 8, 256, 4096}) {
    const int64_t H = 64, hd = 512, tw = 128 + S, tc = 2048;
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
      for (int64_t j = 0; j < 512; ++j) hs[static_cast<size_t>(s * tc + j * 4)] = 1;
    int64_t *wp, *qp;
    uint8_t* sel;
    cudaMalloc(&wp, hp.size() * 8);
    cudaMalloc(&qp, hq.size() * 8);
    cudaMalloc(&sel, hs.size());
    cudaMemcpy(wp, hp.data(), hp.size() * 8, cudaMemcpyHostToDevice);
    cudaMemcpy(qp, hq.data(), hq.size() * 8, cudaMemcpyHostToDevice);
    cudaMemcpy(sel, hs.data(), hs.size(), cudaMemcpyHostToDevice);
    auto run = [&] {
      be->attention({.q = q, .q_pos = qp, .win = win, .win_pos = wp, .comp = comp, .comp_sel = sel, .sink = sink, .out = out, .s = S,
                     .heads = H, .head_dim = hd, .t_win = tw, .t_comp = tc, .window = 128, .scale = 0.044f, .max_selected = 512});
    };
    const double flops = 4.0 * static_cast<double>(S * H * (128 + 512) * hd);
    const double bytes = static_cast<double>(S * (128 + 512) * hd * 4 + 2 * S * H * hd * 4);
    const double ms = time_ms(*be, run, S >= 256 ? 10 : 50);
    std::printf("attention S=%-4lld (64 x 512, 128 window + 512 selected): %8.3f ms, %6.2f TFLOP/s (%2.0f%% of fp32), %5.0f GB/s\n",
                static_cast<long long>(S), ms, flops / ms / 1e9, 100 * flops / ms * 1e3 / kFp32, bytes / ms / 1e6);
    // The bf16 backend's tensor-core kernel on the same arguments (both with the model's bound on
    // the selected entries, 512: two segments per query instead of five).
    const double mma_ms = time_ms(*be16, [&] {
      be16->attention({.q = q, .q_pos = qp, .win = win, .win_pos = wp, .comp = comp, .comp_sel = sel, .sink = sink, .out = out,
                       .s = S, .heads = H, .head_dim = hd, .t_win = tw, .t_comp = tc, .window = 128, .scale = 0.044f,
                       .max_selected = 512});
    }, S >= 256 ? 10 : 50);
    std::printf("attention S=%-4lld bf16 tensor cores:                      %8.3f ms, %6.2f TFLOP/s (%2.0f%% of bf16), %5.0f GB/s | %5.1fx "
                "the float32 kernel\n",
                static_cast<long long>(S), mma_ms, flops / mma_ms / 1e9, 100 * flops / mma_ms * 1e3 / kBf16, bytes / mma_ms / 1e6,
                ms / mma_ms);
    for (void* p : {static_cast<void*>(q), static_cast<void*>(win), static_cast<void*>(comp), static_cast<void*>(sink),
                    static_cast<void*>(out), static_cast<void*>(wp), static_cast<void*>(qp), static_cast<void*>(sel)})
      cudaFree(p);
  }
  // Indexer scores s=4096 x t=2048, 32 heads x 128: all visible (dense), then causal (ratio 2).
  {
    const int64_t S = 4096, T = 2048, H = 32, dim = 128;
    float* q = dalloc<float>(static_cast<size_t>(S * H * dim), 0.01f);
    float* k = dalloc<float>(static_cast<size_t>(T * dim), 0.01f);
    float* w = dalloc<float>(static_cast<size_t>(S * H), 0.5f);
    float* sc = dalloc<float>(static_cast<size_t>(S * T), 0.0f);
    int64_t* qp;
    cudaMalloc(&qp, static_cast<size_t>(S) * 8);
    for (int causal = 0; causal < 2; ++causal) {
      std::vector<int64_t> hq(static_cast<size_t>(S));
      for (int64_t i = 0; i < S; ++i) hq[static_cast<size_t>(i)] = causal ? i : T + i;
      cudaMemcpy(qp, hq.data(), hq.size() * 8, cudaMemcpyHostToDevice);
      const int64_t ratio = causal ? 2 : 1;
      auto run = [&] {
        be->indexer_scores({.q = q, .k = k, .w = w, .q_pos = qp, .scores = sc, .s = S, .heads = H, .dim = dim, .t = T, .ratio = ratio,
                            .score_scale = 0.088f});
      };
      const double flops = 2.0 * static_cast<double>(S) * static_cast<double>(T) * static_cast<double>(H * dim) * (causal ? 0.5 : 1.0);
      const double ms = time_ms(*be, run, 10);
      std::printf("indexer_scores s=%lld t=%lld (32 x 128) %s: %7.3f ms, %6.2f TFLOP/s (%2.0f%% of fp32)\n",
                  static_cast<long long>(S), static_cast<long long>(T), causal ? "causal " : "dense  ", ms, flops / ms / 1e9,
                  100 * flops / ms * 1e3 / kFp32);
    }
    for (void* p : {static_cast<void*>(q), static_cast<void*>(k), static_cast<void*>(w), static_cast<void*>(sc), static_cast<void*>(qp)})
      cudaFree(p);
  }
  // Selections on [4096 x 2048] scores: top-512 (with and without a restriction mask), and
  // candidate blocks (256 blocks of 8, keep 64).
  {
    const int64_t S = 4096, T = 2048;
    std::vector<float> hs(static_cast<size_t>(S * T));
    uint32_t x = 12345;
    for (auto& v : hs) {
      x = x * 1664525u + 1013904223u;
      v = static_cast<float>(x >> 8) * 0x1p-24f;
    }
    float* sc;
    cudaMalloc(&sc, hs.size() * 4);
    cudaMemcpy(sc, hs.data(), hs.size() * 4, cudaMemcpyHostToDevice);
    uint8_t* rs = dalloc<uint8_t>(static_cast<size_t>(S * T), 1);
    uint8_t* sel = dalloc<uint8_t>(static_cast<size_t>(S * T), 0);
    std::vector<int64_t> hq(static_cast<size_t>(S));
    for (int64_t i = 0; i < S; ++i) hq[static_cast<size_t>(i)] = 4 * T - 1;
    int64_t* qp;
    cudaMalloc(&qp, hq.size() * 8);
    cudaMemcpy(qp, hq.data(), hq.size() * 8, cudaMemcpyHostToDevice);
    for (int restrict = 0; restrict < 2; ++restrict) {
      auto run = [&] { be->topk_mask({.scores = sc, .restrict_to = restrict ? rs : nullptr, .selected = sel, .s = S, .t = T, .k = 512}); };
      const double bytes = static_cast<double>(S * T * (4 + 1 + restrict));
      const double ms = time_ms(*be, run, 10);
      std::printf("topk_mask [%lld x %lld] k=512 %s: %7.3f ms, %5.0f GB/s\n", static_cast<long long>(S),
                  static_cast<long long>(T), restrict ? "restricted" : "plain     ", ms, bytes / ms / 1e6);
    }
    {
      auto run = [&] {
        be->candidate_blocks({.scores = sc, .q_pos = qp, .keep = sel, .s = S, .t = T, .ratio = 4, .block_size = 8, .topk_blocks = 64});
      };
      const double bytes = static_cast<double>(S * T * (4 + 1));
      const double ms = time_ms(*be, run, 10);
      std::printf("candidate_blocks [%lld x %lld] 256 blocks of 8, keep 64: %7.3f ms, %5.0f GB/s\n",
                  static_cast<long long>(S), static_cast<long long>(T), ms, bytes / ms / 1e6);
    }
    for (void* p : {static_cast<void*>(sc), static_cast<void*>(rs), static_cast<void*>(sel), static_cast<void*>(qp)}) cudaFree(p);
  }
  decode_products();
  grouped_experts();
  sampling();
  return 0;
}
