// DsparkDrafter: the model's own drafter (DSpark, spec/deepseek-v41-system.md section 4) behind
// spec::Drafter.
//
// Purpose: one DeepseekV41::draft call per step for every queried sequence: each sequence's
// block [anchor = its last token, noise x (B - 1)] runs through the draft stages over the
// stages' rings in its model::SequenceState (which every forward of a model made with
// ModelOptions.dspark fills), and the Markov head draws the block's tokens left to right. The
// first min(k, B) drawn tokens are the draft; each carries sigmoid(confidence logit) as its
// confidence (spec::Draft::confidence).
// Draft sampling:
//   - kGreedy: every token the argmax of its biased logits. Deterministic, so a greedy or
//     seeded request's output is exactly that of decoding without speculation.
//   - kProbabilistic: a sampled request's tokens are drawn from its biased logits with its own
//     temperature, top-k, top-p and min-p, each with the uniform
//     draw_uniform(splitmix64(seed ^ kDraftSeedSalt), output position, completion): reproducible
//     for a seed, independent of the target's draws. The distributions they were drawn from
//     (sample::Sampler::distribution of the same filters) go back as Draft::probs for the
//     rejection rule. Greedy requests (temperature 0) get greedy drafts. A token drawn where the
//     host's distribution has no mass (a backend draw that rounds otherwise at a filter's edge)
//     ends the draft before it.
// Invariants: reads the states, changes none of them; holds no state of its own (the stages'
// rings are the sequence state's, rolled back by cache::StateCache::rollback), so verified()
// and release() have nothing to do. A draft depends only on its sequence (its state, tokens,
// seed and params): batch-invariant.
// Threading: engine thread only.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "sample/sampler.h"
#include "spec/drafter.h"

namespace deepinfer::model {
class DeepseekV41;
}

namespace deepinfer::spec {

enum class DraftSampling { kGreedy, kProbabilistic };

// "greedy" or "probabilistic"; an Error naming `field` otherwise.
DraftSampling parse_draft_sampling(const std::string& s, const std::string& field);

// Mixed into the request's seed for the draft's own draws.
inline constexpr uint64_t kDraftSeedSalt = 0xd5a4c0ffee5eedull;

class DsparkDrafter : public Drafter {
 public:
  // The model must be made with ModelOptions.dspark (an Error otherwise).
  DsparkDrafter(model::DeepseekV41& model, DraftSampling sampling);
  void propose(std::span<const DraftQuery> queries, std::span<Draft> out) override;
  DraftSampling sampling() const { return sampling_; }

 private:
  model::DeepseekV41& model_;
  DraftSampling sampling_;
  sample::Sampler sampler_;  // the probabilistic drafts' distributions
};

}  // namespace deepinfer::spec
