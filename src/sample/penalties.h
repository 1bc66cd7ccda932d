// Steps (1) min_tokens and (2) penalties of the sampler (see sampler.h), applied in place.
//
// Purpose: the exact float32 arithmetic of vLLM's min-tokens processor and apply_penalties,
// touching only the tokens that occur in the prompt / output / stop lists, so the cost is
// O(n_prompt + n_output + n_stop) on top of the row copy, whatever the vocabulary size.
// Invariants: PenaltyCounts' table is all zero between calls (entries are reset sparsely).
// Threading: a PenaltyCounts belongs to one thread at a time.
#pragma once

#include <cstdint>
#include <vector>

#include "sample/sampler.h"

namespace deepinfer::sample {

class PenaltyCounts {
 public:
  // Per token: output count in the low 31 bits, "occurs in the prompt" in the top bit.
  std::vector<uint32_t> table;  // [vocab] u32, zero between calls
  std::vector<int32_t> touched;  // ids with a non-zero entry during a call
  void ensure(int64_t vocab) {
    if (static_cast<int64_t>(table.size()) < vocab) table.resize(static_cast<size_t>(vocab), 0u);
  }
};

// x [vocab] fp64 holds the row's float values (NaN already -inf); on return it holds the
// float32 results of steps (1)-(2) (NaN again mapped to -inf).
void apply_min_tokens_and_penalties(const SampleRequest& r, double* x, PenaltyCounts& counts);

}  // namespace deepinfer::sample
