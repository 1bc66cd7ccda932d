// validate(SamplingParams): the ranges vLLM's SamplingParams._verify_args accepts.
#include <cmath>
#include <sstream>
#include <string>

#include "deepinfer/sampling_params.h"

namespace deepinfer {

namespace {

template <typename T>
std::string bad(const char* field, T value, const char* expected) {
  std::ostringstream os;
  os << "SamplingParams." << field << " = " << value << " is invalid: expected " << expected;
  return os.str();
}

}  // namespace

std::string validate(const SamplingParams& p, int64_t vocab_size) {
  // Comparisons are written so that NaN fails them.
  if (!(p.n >= 1 && p.n <= 1024)) return bad("n", p.n, "1 <= n <= 1024");
  if (!(p.max_tokens >= 1)) return bad("max_tokens", p.max_tokens, "max_tokens >= 1");
  if (!(p.min_tokens >= 0 && p.min_tokens <= p.max_tokens))
    return bad("min_tokens", p.min_tokens, "0 <= min_tokens <= max_tokens");
  if (!(std::isfinite(p.temperature) && p.temperature >= 0.0f))
    return bad("temperature", p.temperature, "a finite value >= 0 (0 = greedy)");
  if (!(p.top_k >= -1)) return bad("top_k", p.top_k, "top_k >= -1 (0 or -1 = off)");
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) return bad("top_p", p.top_p, "0 < top_p <= 1");
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) return bad("min_p", p.min_p, "0 <= min_p <= 1");
  if (!(std::isfinite(p.repetition_penalty) && p.repetition_penalty > 0.0f))
    return bad("repetition_penalty", p.repetition_penalty, "a finite value > 0 (1 = off)");
  if (!(p.presence_penalty >= -2.0f && p.presence_penalty <= 2.0f))
    return bad("presence_penalty", p.presence_penalty, "-2 <= presence_penalty <= 2");
  if (!(p.frequency_penalty >= -2.0f && p.frequency_penalty <= 2.0f))
    return bad("frequency_penalty", p.frequency_penalty, "-2 <= frequency_penalty <= 2");
  for (size_t i = 0; i < p.stop.size(); ++i)
    if (p.stop[i].empty()) return "SamplingParams.stop[" + std::to_string(i) + "] is empty: expected a non-empty string";
  for (size_t i = 0; i < p.stop_token_ids.size(); ++i) {
    const int32_t t = p.stop_token_ids[i];
    if (t < 0 || (vocab_size > 0 && t >= vocab_size)) {
      const std::string field = "stop_token_ids[" + std::to_string(i) + "]";
      const std::string range =
          vocab_size > 0 ? "a token id in [0, " + std::to_string(vocab_size) + ")" : std::string("a token id >= 0");
      return bad(field.c_str(), t, range.c_str());
    }
  }
  if (p.logprobs && !(*p.logprobs >= 0 && *p.logprobs <= 20))
    return bad("logprobs", *p.logprobs, "0 <= logprobs <= 20 when set");
  if (const auto& so = p.structured_output) {
    // The source itself is compiled (and its errors reported) by the engine.
    const bool needs_source = so->kind != StructuredOutput::Kind::kJsonObject;
    if (needs_source && so->source.empty())
      return "SamplingParams.structured_output.source is empty: expected a JSON schema, a regex or a grammar";
    if (!needs_source && !so->source.empty())
      return "SamplingParams.structured_output.source must be empty for kind json_object";
    if (so->source.size() > (size_t{1} << 20))
      return bad("structured_output.source size", so->source.size(), "at most 1 MiB");
  }
  return "";  // seed: any value
}

}  // namespace deepinfer
