// The draw on the backend: rows of logits in backend memory -> token ids (and logprobs).
//
// Purpose: for rows with nothing to apply before the draw (no penalties, masks or pending
// min_tokens), the backend draws each row's token by kernels::DrawParams (greedy, or
// temperature, top-k, top-p, min-p with the host's uniform) so only the ids, and the logprobs
// asked for, come back to the host instead of whole logits rows.
// Invariants: rows without params of their own draw greedily; the draw is the backend's
// sample_rows, whose rule is the sampler's (see kernels::DrawParams).
// Threading: as the backend.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/backend.h"

namespace deepinfer::sample {

struct DeviceDraws {
  std::vector<int32_t> ids;         // [rows]
  // With any row's params.logprobs >= 0: [rows] the drawn token's logprob, [rows, max_logprobs]
  // the best ids and their logprobs (past a row's count: -1, 0); empty otherwise.
  std::vector<float> logprob;
  std::vector<int32_t> top_ids;
  std::vector<float> top_logprobs;
  int64_t max_logprobs = 0;
};

// x: [rows, cols] fp32 backend memory; params: [rows] host.
DeviceDraws draw_on_backend(kernels::Backend& be, const float* x, int64_t rows, int64_t cols,
                            const std::vector<kernels::DrawParams>& params);

}  // namespace deepinfer::sample
