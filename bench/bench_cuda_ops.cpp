// CUDA kernel lab: achieved GB/s and TFLOP/s of the CUDA backend's ops, next to the limits
// measured on the H200 machines (4.26 TB/s copy bandwidth; the fp32 SIMT rate is ~67 TFLOP/s by
// the datasheet, bf16 tensor cores ~790 TFLOP/s measured). The ops and shapes are the op case
// table's (tests/kernels/op_cases.h: the parity test's cases and the lab's V4.1-Flash shapes),
// each timed on a batch-invariant backend of its precision, bytes and FLOPs from the case's
// formulas; then the measurements that are not one op (the grouped experts against a matmul
// per expert, sampling).
//   bench_cuda_ops [--lab] [--family F] [--case NAME] [--list]
// --lab: only the lab's shapes (cases named lab_*); --family / --case: only those (the case's
// name within its family, or family/name); --list: the cases, not timed.
// Built with DEEPINFER_CUDA=ON; run on the device machine.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/op_cases.h"

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

namespace {

namespace oc = deepinfer::op_cases;

// Every case the filters let through, timed on the CUDA backend of its precision.
void cases(bool lab_only, const std::string& family, const std::string& name, bool list) {
  std::map<Precision, std::unique_ptr<Backend>> backends;
  double decode_ms = 0, decode_bytes = 0, fp8_ms = 0, fp8_bytes = 0;
  int decode_n = 0, fp8_n = 0;
  for (const oc::OpCase& c : oc::all_cases()) {
    const bool lab = (c.use & oc::kLab) != 0;
    if ((lab_only && !lab) || (!family.empty() && c.family != family) ||
        (!name.empty() && c.name != name && c.family + "/" + c.name != name))
      continue;
    const Precision p = lab ? c.lab_precision : c.precisions.front();
    const char* pname = p == Precision::kBF16 ? "bf16" : "f32";
    if (list) {
      std::printf("%-12s %-50s %-4s %s\n", c.family.c_str(), c.name.c_str(), pname, c.shape.c_str());
      continue;
    }
    auto& be = backends[p];
    if (!be) be = make_cuda_backend(0, p, true);
    oc::Run r(*be);
    c.build(r);
    be->synchronize();
    // About 0.2 s of repetitions after a first call, 3 to 50.
    const double once = time_ms(*be, r.op, 1);
    const int reps = static_cast<int>(std::clamp(200.0 / std::max(once, 1e-3), 3.0, 50.0));
    const double ms = time_ms(*be, r.op, reps);
    std::printf("%-12s %-44s %-4s %10.1f us", c.family.c_str(), c.name.c_str(), pname, ms * 1e3);
    if (c.bytes > 0) std::printf("  %6.0f GB/s (%3.0f%% of bandwidth)", c.bytes / ms / 1e6, 100 * c.bytes / ms * 1e3 / kBw);
    if (c.flops > 0)
      std::printf("  %7.2f TFLOP/s (%3.0f%% of %s)", c.flops / ms / 1e9, 100 * c.flops / ms * 1e3 / (p == Precision::kBF16 ? kBf16 : kFp32),
                  p == Precision::kBF16 ? "bf16" : "fp32");
    std::printf("  | %s\n", c.shape.c_str());
    if (c.name.rfind("lab_decode_", 0) == 0 && c.name != "lab_decode_head" && c.name.find("experts") == std::string::npos) {
      decode_ms += ms;
      decode_bytes += c.bytes;
      ++decode_n;
    }
    if (c.name.rfind("lab_fp8_decode_m1_", 0) == 0) {
      fp8_ms += ms;
      fp8_bytes += c.bytes;
      ++fp8_n;
    }
  }
  if (fp8_n == 7)  // every FP8 dense product of a layer at one token
    std::printf("decode products, FP8 weights: a layer's dense products %.1f us, %.0f GB/s (%.0f%%)\n", fp8_ms * 1e3,
                fp8_bytes / fp8_ms / 1e6, 100 * fp8_bytes / fp8_ms * 1e3 / kBw);
  if (decode_n == 8)  // every dense product of a layer (not the head)
    std::printf("decode products: a layer's dense products %.1f us, %.0f GB/s (%.0f%%)\n", decode_ms * 1e3, decode_bytes / decode_ms / 1e6,
                100 * decode_bytes / decode_ms * 1e3 / kBw);
}

}  // namespace

int main(int argc, char** argv) {
  bool lab_only = false, list = false;
  std::string family, name;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--lab") lab_only = true;
    else if (a == "--list") list = true;
    else if (a == "--family" && i + 1 < argc) family = argv[++i];
    else if (a == "--case" && i + 1 < argc) name = argv[++i];
    else {
      std::fprintf(stderr, "usage: bench_cuda_ops [--lab] [--family F] [--case NAME] [--list]\n");
      return 2;
    }
  }
  std::printf("limits: copy bandwidth %.2f TB/s, fp32 SIMT %.0f TFLOP/s (datasheet), bf16 tensor cores %.0f TFLOP/s (measured)\n",
              kBw / 1e12, kFp32 / 1e12, kBf16 / 1e12);
  cases(lab_only, family, name, list);
  if (list || !name.empty()) return 0;
  // The measurements that are not one op's case.
  if (family.empty() || family == "linear") grouped_experts();
  if (family.empty() || family == "sample") sampling();
  return 0;
}
