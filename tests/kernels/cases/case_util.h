// Helpers the families' case tables share.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/op_cases.h"

namespace deepinfer::op_cases {

using namespace deepinfer::kernels;

inline std::string str(int64_t v) { return std::to_string(v); }
inline size_t sz(int64_t v) { return static_cast<size_t>(v); }

// A host weight matrix (values, then scales) copied into the run's backend as one block.
inline WeightView upload_weight(Run& r, const WeightView& w) {
  const int64_t bytes = weight_bytes(w), sc = weight_scale_bytes(w);
  std::vector<uint8_t> blob(static_cast<const uint8_t*>(w.data), static_cast<const uint8_t*>(w.data) + (bytes - sc));
  if (sc) blob.insert(blob.end(), w.scale, w.scale + sc);
  auto* p = r.in(blob);
  WeightView d = w;
  d.data = p;
  d.scale = sc ? p + (bytes - sc) : nullptr;
  return d;
}

// K distinct experts per token, in no particular order.
inline std::vector<int32_t> random_routing(int64_t n, int64_t K, int64_t E, uint32_t seed) {
  std::mt19937 g(seed);
  std::vector<int32_t> ids(sz(n * K)), experts(sz(E));
  std::iota(experts.begin(), experts.end(), 0);
  for (int64_t t = 0; t < n; ++t) {
    std::shuffle(experts.begin(), experts.end(), g);
    std::copy(experts.begin(), experts.begin() + K, ids.begin() + t * K);
  }
  return ids;
}

// Expert offsets of a random routing of `tokens` tokens (the CPU's moe_permute).
inline std::vector<int32_t> offsets_of(int64_t tokens, int64_t K, int64_t E, uint32_t seed) {
  const auto ids = random_routing(tokens, K, E, seed);
  const std::vector<float> w(ids.size(), 1.0f);
  auto cpu = make_cpu_backend(1);
  std::vector<int32_t> off(sz(E + 1)), tok(ids.size()), slot(ids.size());
  std::vector<float> pw(ids.size());
  cpu->moe_permute({.ids = ids.data(), .weights = w.data(), .offsets = off.data(), .perm_token = tok.data(),
                    .perm_weight = pw.data(), .slot_row = slot.data(), .n = tokens, .k = K, .experts = E});
  return off;
}

// The indexer parity case's inputs (S queries at positions 40 + 11 i over T keys, H heads x dim),
// shared with the selection case that runs on its scores.
struct IndexerInputs {
  std::vector<int64_t> pos;
  std::vector<float> q, k, w;
};
inline IndexerInputs indexer_inputs(int64_t S, int64_t T, int64_t H, int64_t dim) {
  IndexerInputs in{std::vector<int64_t>(sz(S)), randn(sz(S * H * dim), 23), randn(sz(T * dim), 24), randn(sz(S * H), 25)};
  for (int64_t i = 0; i < S; ++i) in.pos[sz(i)] = 40 + 11 * i;
  return in;
}

inline const char* format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::kF32: return "f32";
    case WeightFormat::kBF16: return "bf16";
    case WeightFormat::kFP8Block32: return "fp8block32";
    case WeightFormat::kFP8Row32: return "fp8row32";
    case WeightFormat::kMXFP4: return "mxfp4";
  }
  return "?";
}

}  // namespace deepinfer::op_cases
