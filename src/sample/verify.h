// Draft verification (speculative decoding): which drafted tokens the target keeps, and the
// token that follows them.
//
// Purpose: a sequence ran its anchor and k drafts d_0..d_{k-1} through the target; row j's
// logits give the distribution p_j of the token after d_{j-1} (row 0: after the anchor), with
// the request's penalties, mask, min_tokens and filters applied as for plain decoding of that
// position (the caller builds row j's SampleRequest: step = its output position, output_ids
// with d_0..d_{j-1}).
//   - Deterministic drafts (greedy, or any fixed proposal): the target draws row j's token
//     exactly as plain decoding would (the sampler or the backend, the uniform keyed by
//     (seed, step, stream)); d_j is kept while it equals that draw, and the first draw that
//     differs (or row k's, when all are kept) follows. For a greedy target this is "accept
//     while the draft is the argmax"; for a sampled target it accepts d_j with probability
//     p_j(d_j) and otherwise draws from p_j without d_j, the rejection rule for a one-hot
//     draft. Either way the output is the target's, token for token, seed for seed.
//   - Probabilistic drafts (d_j drawn from q_j): d_j is kept when u_j * q_j(d_j) < p_j(d_j),
//     i.e. with probability min(1, p/q), u_j = accept_uniform(seed, step, stream); at the first
//     rejection the token is drawn from the residual max(0, p_j - q_j) (normalised) by inverse
//     CDF with the row's plain uniform; when every draft is kept, row k's plain draw follows
//     (the bonus token). The output is distributed as the target's (Leviathan et al. 2023,
//     Chen et al. 2023), and a seeded request is reproducible.
// Invariants: verification reads only its sequence's rows: batch-invariant. Reductions in
// ascending id order, fp64.
// Threading: the Sampler passed in is used from one thread at a time.
#pragma once

#include <cstdint>
#include <span>

#include "sample/sampler.h"

namespace deepinfer::sample {

// Deterministic drafts: the number of leading drafts equal to the target's draws, where
// drawn[j] is the token row j drew (drawn.size() == draft.size() + 1).
int64_t accepted_prefix(std::span<const int64_t> draft, std::span<const int32_t> drawn);

struct Verdict {
  int64_t accepted = 0;  // drafts kept: d_0 .. d_{accepted-1}
  int32_t token = 0;     // the target's token after them
};

// Probabilistic drafts: rows [k + 1] (row j's request), draft [k], q [k, vocab] fp32 (row j: the
// distribution d_j was drawn from).
Verdict verify_probabilistic(Sampler& sampler, std::span<const SampleRequest> rows, std::span<const int64_t> draft,
                             std::span<const float> q);

}  // namespace deepinfer::sample
