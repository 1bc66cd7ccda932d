// Public API: what generate() returns per request (vLLM's RequestOutput / CompletionOutput).
// Threading: plain value types.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace deepinfer {

struct TokenLogprob {
  int32_t token_id = 0;
  float logprob = 0.0f;             // log-softmax of the model's raw logits
  std::vector<std::pair<int32_t, float>> top;  // requested top-n, best first
};

enum class FinishReason { kNone, kStop, kLength, kError };
const char* to_string(FinishReason r);

struct CompletionOutput {
  int index = 0;
  std::string text;
  std::vector<int32_t> token_ids;
  FinishReason finish_reason = FinishReason::kNone;
  std::string stop_reason;          // the stop string or token that ended it, if any
  std::vector<TokenLogprob> logprobs;  // when SamplingParams.logprobs is set
};

struct RequestMetrics {
  double arrival_s = 0, first_token_s = 0, finish_s = 0;  // seconds since the batch started
};

struct RequestOutput {
  std::string request_id;
  std::string prompt;               // text prompt, if one was given
  std::vector<int32_t> prompt_token_ids;
  std::vector<CompletionOutput> outputs;
  bool finished = false;
  std::string error;                // non-empty: this request failed (finish reason kError)
  RequestMetrics metrics;
};

}  // namespace deepinfer
