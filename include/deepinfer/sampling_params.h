// Public API: how to sample one request (vLLM's SamplingParams, same names and meanings).
//
// Invariants: validate() must accept a SamplingParams before the engine runs it; the engine
// reports a rejected one as that request's error and runs the rest of the batch.
// Threading: plain value type.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace deepinfer {

// Structured output: the completion is constrained, token by token, to a JSON Schema, a
// regular expression, an EBNF grammar (syntax: README, "Structured outputs"), or any JSON
// object. Generation ends when the grammar is complete (finish reason "stop").
struct StructuredOutput {
  enum class Kind { kJsonSchema, kRegex, kGrammar, kJsonObject };
  Kind kind = Kind::kJsonSchema;
  std::string source;          // the schema (JSON text), the regex or the grammar; "" for kJsonObject
  bool any_whitespace = true;  // JSON kinds: white space between tokens (else exactly ", " and ": ")
  bool strict_keywords = false;  // kJsonSchema: reject keywords outside JSON Schema (else ignored)
};

struct SamplingParams {
  int n = 1;                        // completions per prompt
  int max_tokens = 16;              // generated tokens at most (per completion)
  int min_tokens = 0;               // EOS and stop token ids are blocked until this many
  float temperature = 1.0f;         // 0 = greedy
  int top_k = 0;                    // <= 0: off (vLLM's -1 is accepted as off too)
  float top_p = 1.0f;               // (0, 1]
  float min_p = 0.0f;               // [0, 1]
  float repetition_penalty = 1.0f;  // > 0; 1 = off (prompt and output tokens)
  float presence_penalty = 0.0f;    // [-2, 2] (output tokens)
  float frequency_penalty = 0.0f;   // [-2, 2] (output tokens)
  std::vector<std::string> stop;    // stop strings (not included in the text)
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  std::optional<uint64_t> seed;     // per-request seed; unset = the engine's seed
  std::optional<int> logprobs;      // top-n logprobs per generated token (0 = the chosen one only)
  bool skip_special_tokens = true;
  std::optional<StructuredOutput> structured_output;  // unset: unconstrained
};

// "" when valid, else a message naming the field and the expected range. vocab_size bounds
// stop_token_ids; <= 0 skips that check.
std::string validate(const SamplingParams& p, int64_t vocab_size = 0);

}  // namespace deepinfer
