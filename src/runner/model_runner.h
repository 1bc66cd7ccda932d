// ModelRunner: lays a StepPlan out as one batched forward and returns the rows to sample.
//
// Purpose: the seam between scheduling and the model — for every scheduled chunk it points
// the model at the sequence's tokens and state (from the StateCache), runs them as one
// BatchRunner::forward, and advances each sequence's computed count. Only the chunks that end
// at a sequence's last token give output rows: their last row, or with a draft (speculative
// decoding) the anchor's row and every draft's, as logits or as tokens drawn on the backend.
// Invariants: the plan's chunks are disjoint sequences; output rows follow plan order; a
// chunk's draft rows are computed (the state holds them) but not counted in num_computed until
// the engine accepts them.
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
  // Sampled chunk i's output rows are [first[i], first[i + 1]): its last row, or its anchor's
  // and its n_draft drafts' rows (row j gives the token that follows draft j, the anchor's the
  // one that follows the anchor).
  std::vector<size_t> first;
  // Per output row: its logits at row logits_row[r] >= 0 of `logits`, or (logits_row[r] -1)
  // the token the backend drew, kernels::kNoToken when the row had a NaN or nothing finite.
  std::vector<int32_t> token;
  std::vector<int64_t> logits_row;
  std::vector<float> logits;    // [rows with logits, vocab] fp32
  // Per output row drawn on the backend with logprobs (draw.logprobs = n >= 0): the token's
  // logprob, and the best n ids with their logprobs at [top_at[r], top_at[r + 1]) of top_ids
  // and top_logprobs (empty for the other rows).
  std::vector<float> logprob;
  std::vector<size_t> top_at;
  std::vector<int32_t> top_ids;
  std::vector<float> top_logprobs;
};

class ModelRunner {
 public:
  ModelRunner(BatchRunner& batches, cache::StateCache& cache) : batches_(batches), cache_(cache) {}
  // draw_on_backend(seq, j): how the backend draws the token after seq's row j (0: the last
  // token, j > 0: its j-th draft) from the raw logits (the sampler's rule for a row with no
  // penalties or mask), or nullopt for the row's logits: then only the token (and the logprobs
  // asked for) come back from the backend. Row 0's answer decides for the chunk's every row.
  using DrawOnBackend = std::function<std::optional<kernels::DrawParams>(const sched::Sequence&, int64_t)>;
  StepOutput run(const sched::StepPlan& plan, const DrawOnBackend& draw_on_backend = nullptr);
  int64_t vocab_size() const { return batches_.model().config().vocab_size; }

 private:
  BatchRunner& batches_;
  cache::StateCache& cache_;
};

}  // namespace deepinfer::runner
