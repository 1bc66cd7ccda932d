// Drafter: what speculative decoding asks of a draft model.
//
// Purpose: before a step, the engine asks the drafter for up to k tokens that may follow each
// decoding sequence; the target then runs the sequence's last token (the anchor) and the drafts
// as one chunk of the step's batch, and the sampler verifies them (sample/verify.h): greedy and
// deterministic drafts are accepted while they equal the target's own draw at their position,
// probabilistic drafts by the rejection rule against the distributions they were drawn from.
// Rejected rows are rolled back (cache::StateCache::rollback, which covers DSpark's rings in the
// sequence state), and the drafter is told how many of its tokens were kept, so a drafter with
// state of its own can roll back too.
// Invariants: a draft depends only on the sequence (its tokens, seed, position), never on the
// batch, so outputs stay batch-invariant; a deterministic draft leaves a seeded request's tokens
// exactly those of decoding without speculation.
// Threading: called from the engine thread only.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "deepinfer/sampling_params.h"

namespace deepinfer::model {
class SequenceState;
}

namespace deepinfer::spec {

// The most draft tokens a sequence verifies in one step (DSpark's block of 5).
inline constexpr int64_t kMaxDraftTokens = 5;

// One decoding sequence, as the drafter sees it.
struct DraftQuery {
  int64_t seq_id = 0;                 // the engine's sequence id (stable while it runs)
  size_t request = 0;                 // its request's index in the run
  int completion = 0;                 // its index among the request's n completions
  uint64_t seed = 0;                  // the request's sampling seed
  std::span<const int64_t> tokens;    // prompt then generated tokens; the last is the anchor
  int64_t prompt_len = 0;
  int64_t k = 0;                      // drafts wanted, 1..kMaxDraftTokens
  const SamplingParams* params = nullptr;  // the request's sampling parameters
  // The sequence's model state: the target has computed every token but the anchor (length()
  // == tokens.size() - 1). A drafter reads it and must leave it unchanged.
  model::SequenceState* state = nullptr;
};

struct Draft {
  std::vector<int64_t> tokens;        // at most k draft tokens (fewer, or none, is fine)
  // Probabilistic drafts: [tokens.size(), vocab] fp32, the distribution each token was drawn
  // from (each row sums to 1; its token has probability > 0). Empty: deterministic drafts (greedy
  // or otherwise fixed), accepted only where the target draws the same token.
  std::vector<float> probs;
  // Optional, [tokens.size()]: the drafter's estimate of the probability that token j is kept
  // given that the tokens before it are (DSpark's confidence head, in (0, 1)). Empty: none; the
  // engine's adaptive verification then keeps the whole draft.
  std::vector<float> confidence;
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  // out[i] = the draft for queries[i].
  virtual void propose(std::span<const DraftQuery> queries, std::span<Draft> out) = 0;
  // Sequence seq_id's last draft of `drafted` tokens was verified: its first `accepted` were
  // kept (the target's own token follows them).
  virtual void verified(int64_t seq_id, int64_t drafted, int64_t accepted) {
    (void)seq_id, (void)drafted, (void)accepted;
  }
  // Sequence seq_id ended, failed or was preempted: whatever the drafter keeps for it can go.
  virtual void release(int64_t seq_id) { (void)seq_id; }
};

}  // namespace deepinfer::spec
