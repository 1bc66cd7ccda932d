// Sampler: one row of logits per request -> the next token (vLLM v1's sampler, on the CPU).
//
// Purpose: for each row, in this order (mirrors vLLM v1 `Sampler.forward` / `sample`):
//   (0) logprobs, when params.logprobs is set: log-softmax of the RAW row (vLLM's default
//       "raw_logprobs"), the chosen token's value and the top-n (best first, ties: lower id);
//   (0') structured output: when allowed_bitmask is set, every token whose bit is clear gets
//       -inf first (vLLM applies the grammar bitmask to the logits before the sampler, so the
//       raw logprobs of (0) are those of the masked row);
//   (1) min_tokens: while output_ids.size() < min_tokens, every id in eos_ids and
//       params.stop_token_ids gets -inf (eos_ids are blocked whatever ignore_eos says, as vLLM
//       does for the model's EOS; the caller chooses which ids to pass);
//   (2) penalties in float32, exactly vLLM's apply_penalties: repetition over tokens in the
//       prompt OR the output (logit > 0: divided by it, else multiplied), then
//       logit -= frequency_penalty * count_in_output, then logit -= presence_penalty if the
//       token occurs in the output;
//   (3) temperature < 1e-5: greedy, argmax of (2) with ties to the lowest id; the rest is
//       skipped. Otherwise x = logit / temperature (fp64);
//   (4) filters on the tempered distribution p = softmax(x), in vLLM v1's order:
//       min-p drops p < min_p * max(p); top-k (0 < k < vocab) keeps x >= the k-th largest x
//       (tokens tied with the k-th are all kept, as vLLM's threshold mask does); top-p
//       renormalises what is left, ranks it by probability (ties: lower id first) and keeps
//       each token while the mass ranked before it is < top_p * total (the token that crosses
//       top_p is kept; top_p >= 1 is off);
//   (5) draw: u = draw_uniform(seed, step, stream) (Philox4x32-10, sample/rng.h); inverse CDF
//       over the kept tokens in ascending id order: the first token whose running weight
//       exceeds u * total.
// NaN logits are treated as -inf. A row with no finite candidate left returns token 0 (the
// argmax tie rule over an all -inf row).
// Invariants: every reduction runs in a fixed order (ascending id, fp64), so a row's result
// depends only on (logits, params, seed, step, stream, prompt_ids, output_ids, eos_ids):
// bitwise identical alone or in any batch, with any number of threads. params must have
// passed validate(); token ids must lie in [0, vocab) (checked: internal invariant).
// Cost per row: O(vocab) passes (one exp per token when sampling, plus one for logprobs),
// O(n_prompt + n_output) for penalties (sparse counts, no per-call vocab-sized allocation),
// and top-k / top-p rank only as far as needed (nth_element, then sort of that prefix).
// Threading: a Sampler owns reusable scratch (a few vocab-sized arrays per worker, allocated
// once); one thread at a time calls it. sample_batch spreads rows over a core::ThreadPool.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "core/logits.h"
#include "deepinfer/outputs.h"
#include "deepinfer/sampling_params.h"

namespace deepinfer::core {
class ThreadPool;
}

namespace deepinfer::sample {

// Below this temperature a row is greedy (vLLM's _SAMPLING_EPS).
inline constexpr float kGreedyTemperature = 1e-5f;

struct SampleRequest {
  std::span<const float> logits;         // [vocab] fp32, the model's raw logits for this row
  const SamplingParams* params = nullptr;
  uint64_t seed = 0;                     // per-request seed (the engine's when params.seed is unset)
  uint64_t step = 0;                     // index of the token being drawn (its output position)
  uint64_t stream = 0;                   // independent stream, e.g. the completion index when n > 1
  std::span<const int32_t> prompt_ids;   // [n_prompt] int32, for the repetition penalty
  std::span<const int32_t> output_ids;   // [n_output] int32, tokens generated so far
  std::span<const int32_t> eos_ids;      // [n_eos] int32, blocked during min_tokens
  // Optional structured-output mask [words] u32: token i is allowed iff bit i % 32 of word
  // i / 32 is set; ids at or past 32 * words are not allowed. Empty: no mask.
  std::span<const uint32_t> allowed_bitmask;
};

struct SampleResult {
  int32_t token = 0;
  std::optional<TokenLogprob> logprob;   // set when params.logprobs is set
};

class Sampler {
 public:
  Sampler();
  ~Sampler();
  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;

  // One row, steps (0)-(5).
  SampleResult sample(const SampleRequest& r);
  // reqs [n_rows], out [n_rows]: out[i] = sample(reqs[i]); rows are split over `pool`
  // (nullptr: this thread), each worker with its own scratch.
  void sample_batch(std::span<const SampleRequest> reqs, std::span<SampleResult> out,
                    core::ThreadPool* pool = nullptr);

  // Steps (1)-(2) only: out [vocab] fp32 = the penalised, min_tokens-masked logits.
  void processed_logits(const SampleRequest& r, std::span<float> out);
  // Steps (1)-(4): out [vocab] fp64 = the distribution step (5) draws from (zero outside the
  // kept set; one-hot for a greedy row). For tests and draft verification.
  void distribution(const SampleRequest& r, std::span<double> out);
  // Step (0) for a given token (a verified draft): its logprob and the top-n of r's row, or
  // nullopt when params.logprobs is unset.
  std::optional<TokenLogprob> logprob(const SampleRequest& r, int32_t token);

  struct Workspace;

 private:
  std::vector<std::unique_ptr<Workspace>> ws_;  // one per concurrent worker
};

// Convenience: reqs [n_rows], out [n_rows], through a temporary Sampler (allocates its scratch;
// an engine should keep a Sampler).
void sample_batch(std::span<const SampleRequest> reqs, std::span<SampleResult> out,
                  core::ThreadPool* pool = nullptr);

// Log-softmax of a raw row (core::log_softmax: fp64, sums in ascending id order, NaN as -inf).
using core::log_softmax;

}  // namespace deepinfer::sample
