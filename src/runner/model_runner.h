// ModelRunner: lays a StepPlan out as one batched forward and returns the rows to sample.
//
// Purpose: the seam between scheduling and the model — for every scheduled chunk it points
// the model at the sequence's tokens and state (from the StateCache), runs them as one
// BatchRunner::forward, and advances each sequence's computed count. Only the chunks that end
// at a sequence's last token get logits (their last row) or a token drawn on the backend.
// Invariants: the plan's chunks are disjoint sequences; logits rows follow plan order.
// Threading: engine thread only; the backend parallelises inside ops.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "cache/state_cache.h"
#include "runner/batch_runner.h"
#include "sched/scheduler.h"

namespace deepinfer::runner {

struct StepOutput {
  std::vector<size_t> sampled;  // indices into plan.chunks that reach their sequence's end
  // Per sampled row: its logits at row logits_row[i] >= 0 of `logits`, or (logits_row[i] -1)
  // the token the backend drew, kernels::kNoToken when the row had a NaN or nothing finite.
  std::vector<int32_t> token;
  std::vector<int64_t> logits_row;
  std::vector<float> logits;    // [rows with logits, vocab] fp32
  // Per sampled row drawn on the backend with logprobs (draw.logprobs = n >= 0): the token's
  // logprob, and the best n ids with their logprobs (empty for the other rows).
  std::vector<float> logprob;
  std::vector<std::vector<int32_t>> top_ids;
  std::vector<std::vector<float>> top_logprobs;
};

class ModelRunner {
 public:
  ModelRunner(BatchRunner& batches, cache::StateCache& cache) : batches_(batches), cache_(cache) {}
  // draw_on_backend(seq): how the backend draws seq's next token from its raw logits (the
  // sampler's rule for a row with no penalties or mask), or nullopt for the row's logits: then
  // only the token (and the logprobs asked for) come back from the backend.
  using DrawOnBackend = std::function<std::optional<kernels::DrawParams>(const sched::Sequence&)>;
  StepOutput run(const sched::StepPlan& plan, const DrawOnBackend& draw_on_backend = nullptr);
  int64_t vocab_size() const { return batches_.model().config().vocab_size; }

 private:
  BatchRunner& batches_;
  cache::StateCache& cache_;
};

}  // namespace deepinfer::runner
