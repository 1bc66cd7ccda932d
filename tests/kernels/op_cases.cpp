// The op case table's plumbing: a run's buffers, the comparison rules, the random inputs.
#include "kernels/op_cases.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include "kernels/compare.h"

namespace deepinfer::op_cases {

Run::~Run() {
  for (void* p : owned_) be.release(p);
}

void* Run::alloc(int64_t bytes) {
  void* p = be.alloc(std::max<int64_t>(bytes, 16));
  owned_.push_back(p);
  return p;
}

float* Run::random_f32(int64_t n, uint64_t seed, float std, float mean) {
  auto* p = static_cast<float*>(alloc(n * 4));
  be.fill_random({.out = p, .format = kernels::WeightFormat::kF32, .n = n, .seed = seed, .mean = mean, .std = std});
  return p;
}

uint16_t* Run::random_bf16(int64_t n, uint64_t seed, float std, float mean) {
  auto* p = static_cast<uint16_t*>(alloc(n * 2));
  be.fill_random({.out = p, .format = kernels::WeightFormat::kBF16, .n = n, .seed = seed, .mean = mean, .std = std});
  return p;
}

Host Run::download() const {
  Host h;
  be.synchronize();
  for (const Output& o : outputs) {
    h.emplace_back(static_cast<size_t>(o.bytes));
    if (o.bytes) be.download(h.back().data(), o.p, o.bytes);
  }
  return h;
}

std::vector<float> randn(size_t n, uint32_t seed, float scale) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (auto& x : v) x = scale * d(g);
  return v;
}

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed, int lo, int hi) {
  std::mt19937 g(seed);
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<uint8_t> v(n);
  for (auto& x : v) x = static_cast<uint8_t>(d(g));
  return v;
}

std::string bits_differ(const float* a, const float* b, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    uint32_t x, y;
    std::memcpy(&x, a + i, 4);
    std::memcpy(&y, b + i, 4);
    if (x != y) {
      char buf[128];
      std::snprintf(buf, sizeof buf, "element %zu: %.9g (0x%08X) vs %.9g (0x%08X)", i, static_cast<double>(a[i]), x,
                    static_cast<double>(b[i]), y);
      return buf;
    }
  }
  return "";
}

using kernel_tests::finite_rel_err;
using kernel_tests::rel_err;

std::string compare(const Output& o, const std::vector<uint8_t>& ref, const std::vector<uint8_t>& got) {
  if (ref.size() != got.size()) return "sizes " + std::to_string(ref.size()) + " vs " + std::to_string(got.size());
  if (o.rule == Rule::kBits) {
    size_t diffs = 0, first = 0;
    for (size_t i = 0; i < ref.size(); ++i)
      if (ref[i] != got[i] && diffs++ == 0) first = i;
    if (!diffs) return "";
    char buf[160];
    std::snprintf(buf, sizeof buf, "%zu bytes differ, the first at byte %zu: 0x%02X vs 0x%02X", diffs, first, ref[first], got[first]);
    std::string s = buf;
    if (ref.size() % 4 == 0) {  // the first differing 4-byte word, as a float
      const auto a = as<float>(ref), b = as<float>(got);
      s += " (" + bits_differ(a.data() + first / 4, b.data() + first / 4, 1) + " of the floats)";
    }
    return s;
  }
  const auto a = as<float>(ref), b = as<float>(got);
  const double e = o.rule == Rule::kRelErr ? rel_err(a, b) : finite_rel_err(a, b);
  if (e < o.tol) return "";
  char buf[96];
  std::snprintf(buf, sizeof buf, "relative error %.3g, not below %.3g", e, o.tol);
  return buf;
}

const std::vector<OpCase>& all_cases() {
  static const std::vector<OpCase> table = [] {
    std::vector<OpCase> t;
    add_linear(t);
    add_norm(t);
    add_quant(t);
    add_elementwise(t);
    add_mhc(t);
    add_attention(t);
    add_indexer(t);
    add_select(t);
    add_moe(t);
    add_gather(t);
    return t;
  }();
  return table;
}

}  // namespace deepinfer::op_cases
