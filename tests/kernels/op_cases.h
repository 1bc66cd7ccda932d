// One table of kernels::Backend op cases, iterated by the CUDA parity test
// (test_cuda_cases.cpp: every case on the CPU reference and on CUDA, compared by the case's
// rule) and by the CUDA kernel lab (bench/bench_cuda_ops.cpp: every case timed, with GB/s and
// TFLOP/s from the case's formulas), as llama.cpp's test-backend-ops does.
//
// A case builds its inputs in one backend's memory (through Backend::alloc / upload, so the
// same builder serves every backend, from the same host random data) and says what op to run
// and which of the buffers are its outputs, each with its comparison rule. The cases live in
// tests/kernels/cases/<family>.cpp, one file per op family, with the stems of
// src/kernels/cpu/<family>.cpp and src/kernels/cuda/<family>.cu.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.h"

namespace deepinfer::op_cases {

using kernels::Backend;
using kernels::Precision;

// How an output of the device backend is compared with the CPU reference's.
enum class Rule : uint8_t {
  kBits,          // byte for byte (floats: bit for bit)
  kRelErr,        // floats: max |a - b| / max |a| <= tol (NaN where the other is not: a failure)
  kFiniteRelErr,  // floats: the same over finite entries; infinities and NaNs must match exactly
};

struct Output {
  std::string name;
  const void* p = nullptr;  // backend memory
  int64_t bytes = 0;
  Rule rule = Rule::kBits;
  double tol = 0;
};

// The host copies of a run's outputs, in the order they were declared.
using Host = std::vector<std::vector<uint8_t>>;
template <class T>
std::vector<T> as(const std::vector<uint8_t>& bytes);

// One case's buffers in one backend's memory, what to run, and what to compare.
class Run {
 public:
  explicit Run(Backend& b) : be(b) {}
  ~Run();
  Run(const Run&) = delete;
  Run& operator=(const Run&) = delete;

  Backend& be;
  std::function<void()> op;     // the op under test (the lab times this)
  std::function<void()> after;  // optional: more ops run after it for the checks, not timed
  std::vector<Output> outputs;
  // Host checks of this backend's results (each "" or what failed), applied on every backend.
  std::vector<std::function<std::string(const Host&)>> checks;

  void* alloc(int64_t bytes);  // released with the run
  template <class T>
  T* in(const std::vector<T>& h) {  // a host array copied into backend memory
    auto* p = static_cast<T*>(alloc(static_cast<int64_t>(h.size() * sizeof(T))));
    if (!h.empty()) be.upload(p, h.data(), static_cast<int64_t>(h.size() * sizeof(T)));
    return p;
  }
  // An output of n elements, filled with `fill` before the op (a value the op must overwrite).
  template <class T>
  T* out(const std::string& name, size_t n, Rule rule, double tol = 0, T fill = T{}) {
    T* p = in(std::vector<T>(n, fill));
    outputs.push_back({name, p, static_cast<int64_t>(n * sizeof(T)), rule, tol});
    return p;
  }
  // A buffer declared as an output after the fact (e.g. an input updated in place).
  template <class T>
  void output(const std::string& name, T* p, size_t n, Rule rule, double tol = 0) {
    outputs.push_back({name, p, static_cast<int64_t>(n * sizeof(T)), rule, tol});
  }
  // Seeded random values made on the backend (Backend::fill_random: the same on every backend;
  // for the lab's large inputs, where host random data would take long).
  float* random_f32(int64_t n, uint64_t seed, float std = 1.0f, float mean = 0.0f);
  uint16_t* random_bf16(int64_t n, uint64_t seed, float std = 1.0f, float mean = 0.0f);
  // Host memory that lives as long as the run (host arrays an op takes, e.g. WeightView lists).
  template <class T>
  T* keep(std::vector<T> h) {
    auto holder = std::make_shared<std::vector<T>>(std::move(h));
    kept_.push_back(holder);
    return holder->data();
  }
  Host download() const;

 private:
  std::vector<void*> owned_;
  std::vector<std::shared_ptr<void>> kept_;
};

// Where a case runs.
enum Use : uint8_t { kParity = 1, kLab = 2 };

struct OpCase {
  std::string family;  // the op family: src/kernels/cpu/<family>.cpp, cuda/<family>.cu
  std::string name;    // unique within the family
  std::string shape;   // for people: the dims
  std::function<void(Run&)> build;
  // Parity: compared on each of these precisions (a CPU and a CUDA backend of it).
  std::vector<Precision> precisions{Precision::kFloat32};
  uint8_t use = kParity;
  // The lab: the backend it times the case on (batch-invariant), and the bytes the op must move
  // and the FLOPs it must do (0: not meaningful).
  Precision lab_precision = Precision::kFloat32;
  double bytes = 0, flops = 0;
};

// Every case, by family (the order of cases/*.cpp).
const std::vector<OpCase>& all_cases();

// "" when the device's output passes the rule against the reference's, else what differs.
std::string compare(const Output& o, const std::vector<uint8_t>& ref, const std::vector<uint8_t>& got);

// Helpers for the builders.
std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f);
std::vector<uint8_t> random_bytes(size_t n, uint32_t seed, int lo = 0, int hi = 255);
std::string bits_differ(const float* a, const float* b, size_t n);  // "" or the first difference

// The families' tables (cases/<family>.cpp).
void add_linear(std::vector<OpCase>& t);
void add_norm(std::vector<OpCase>& t);
void add_quant(std::vector<OpCase>& t);
void add_elementwise(std::vector<OpCase>& t);
void add_mhc(std::vector<OpCase>& t);
void add_attention(std::vector<OpCase>& t);
void add_indexer(std::vector<OpCase>& t);
void add_select(std::vector<OpCase>& t);
void add_moe(std::vector<OpCase>& t);
void add_gather(std::vector<OpCase>& t);

// The shapes the old per-op parity tests ran at: the fixture's dims and the released model's.
struct Dims {
  const char* name;
  int64_t rows, D, H, hd, qlora, idx_heads, idx_dim, inter, experts, topk;
};
inline constexpr Dims kFixture{"fixture", 7, 64, 4, 32, 48, 8, 32, 32, 8, 2};
inline constexpr Dims kReleased{"released", 8, 5120, 64, 512, 1280, 32, 128, 2304, 384, 6};
inline constexpr Dims kBothDims[] = {kFixture, kReleased};

template <class T>
std::vector<T> as(const std::vector<uint8_t>& bytes) {
  std::vector<T> v(bytes.size() / sizeof(T));
  if (!v.empty()) __builtin_memcpy(v.data(), bytes.data(), v.size() * sizeof(T));
  return v;
}

}  // namespace deepinfer::op_cases
