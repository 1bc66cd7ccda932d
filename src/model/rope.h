// Rotary tables of the two ropes ("main": plain, "compress": larger base + optional YaRN).
//
// Purpose: inverse frequencies exactly as the reference derives them in float32, and the
// cos/sin rows for a list of absolute positions (angle = fp32(position) * inv_freq).
// Threading: immutable after construction.
#pragma once

#include <cstdint>
#include <vector>

#include "loader/config.h"

namespace deepinfer::model {

// rope_dim/2 inverse frequencies (fp32) of one rope parameter set.
std::vector<float> rope_inv_freq(const loader::RopeParams& p, int64_t rope_dim, int64_t max_position_embeddings);

struct RopeTable {
  std::vector<float> inv_freq;  // [rope_dim/2]
  // cos/sin rows for each position: [n, rope_dim/2] each.
  void compute(const int64_t* positions, int64_t n, std::vector<float>* cos, std::vector<float>* sin) const;
};

}  // namespace deepinfer::model
