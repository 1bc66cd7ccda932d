// bench_device's verify curve (--verify-curve): the batch of one verify step and the speed-up
// that measured step times give at a mean acceptance length.
//
// A verify step lays every sequence out as the engine lays out a speculative decode
// (runner::ModelRunner): one chunk of its anchor and k draft tokens, every row's logits kept and
// every row's token drawn on the backend (greedy), so that only the ids come back; k = 0 is a
// plain decode chunk (one row, its token drawn).
//
// The speed-up is computed, not measured: with random weights no draft is ever right, so the
// tokens a round emits come from a model of acceptance, each draft kept with probability a when
// the ones before it were (a round with k drafts then emits 1 + a + ... + a^k tokens on average),
// with a fitted so that a round of `k_ref` drafts emits a given mean acceptance length.
// Threading: pure functions; a VerifyBatch is used by one forward at a time.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "model/state.h"
#include "runner/batch_runner.h"

namespace deepinfer::bench {

// One verify step of S sequences. The chunks point into the vectors (kept by a move).
struct VerifyBatch {
  int64_t k = 0;
  std::vector<int64_t> tokens;             // [S, 1 + k]: each sequence's anchor, then its drafts
  std::vector<int32_t> drawn;              // [S, 1 + k]: each row's greedy draw (after the forward)
  std::vector<kernels::DrawParams> draws;  // [S, 1 + k]: greedy
  std::vector<runner::Chunk> chunks;       // [S]
};

// The step's batch over `states`: row j of sequence q's chunk is tok(q, j) (j = 0 its anchor).
template <class Tok>
VerifyBatch verify_batch(std::vector<model::SequenceState>& states, int64_t k, Tok tok) {
  if (k < 0) throw std::invalid_argument("verify_batch: k = " + std::to_string(k) + " drafts (must be >= 0)");
  VerifyBatch v;
  v.k = k;
  const int64_t S = static_cast<int64_t>(states.size()), n = 1 + k;
  v.tokens.resize(static_cast<size_t>(S * n));
  v.drawn.assign(static_cast<size_t>(S * n), kernels::kNoToken);
  v.draws.assign(static_cast<size_t>(S * n), kernels::DrawParams{});
  for (int64_t q = 0; q < S; ++q) {
    const size_t r0 = static_cast<size_t>(q * n);
    for (int64_t j = 0; j < n; ++j) v.tokens[r0 + static_cast<size_t>(j)] = tok(q, j);
    runner::Chunk c{.tokens = v.tokens.data() + r0, .n = n, .state = &states[static_cast<size_t>(q)],
                    .all_logits = k > 0, .token = v.drawn.data() + r0};
    if (k > 0) c.draws = v.draws.data() + r0;
    v.chunks.push_back(c);
  }
  return v;
}

// Mean tokens a round of k drafts emits when each draft is kept with probability a given that
// the drafts before it were: the accepted drafts plus the target's own token, 1 + a + ... + a^k.
inline double expected_tokens(double a, int64_t k) {
  double t = 0, p = 1;
  for (int64_t i = 0; i <= k; ++i, p *= a) t += p;
  return t;
}

// The per-draft acceptance a in [0, 1] at which rounds of k_ref drafts emit `tau` tokens on
// average (1 <= tau <= k_ref + 1), by bisection (expected_tokens is increasing in a).
inline double acceptance_rate(double tau, int64_t k_ref) {
  if (k_ref < 1 || !(tau >= 1.0 && tau <= static_cast<double>(k_ref + 1)))
    throw std::invalid_argument("acceptance length " + std::to_string(tau) + " is outside [1, " + std::to_string(k_ref + 1) +
                                "] (the anchor's token plus at most " + std::to_string(k_ref) + " drafts)");
  double lo = 0, hi = 1;
  for (int i = 0; i < 100; ++i) {
    const double mid = 0.5 * (lo + hi);
    (expected_tokens(mid, k_ref) < tau ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

// Speed-up of speculative decoding over plain decoding, per sequence: `tokens` a round over the
// round's time (a verify step, plus the draft round when it has drafts) against one token per
// plain step.
inline double computed_speedup(double tokens, double verify_s, double draft_s, double plain_s) {
  return tokens * plain_s / (verify_s + draft_s);
}

}  // namespace deepinfer::bench
