#include "sample/penalties.h"

#include <cmath>
#include <limits>

#include "core/error.h"

namespace deepinfer::sample {

namespace {

constexpr uint32_t kInPrompt = 0x80000000u;
constexpr uint32_t kCountMask = 0x7FFFFFFFu;

inline void check_id(int32_t t, int64_t vocab, const char* what) {
  DI_CHECK(t >= 0 && t < vocab, std::string(what) + " id " + std::to_string(t) + " outside [0, " +
                                    std::to_string(vocab) + ")");
}

}  // namespace

void apply_min_tokens_and_penalties(const SampleRequest& r, double* x, PenaltyCounts& counts) {
  const SamplingParams& p = *r.params;
  const int64_t vocab = static_cast<int64_t>(r.logits.size());
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();

  // (1) min_tokens: vLLM's MinTokensLogitsProcessor runs before the penalties.
  if (p.min_tokens > 0 && r.output_ids.size() < static_cast<size_t>(p.min_tokens)) {
    for (int32_t t : r.eos_ids) {
      if (t >= 0 && t < vocab) x[t] = kNegInf;  // an id outside the row can never be drawn
    }
    for (int32_t t : p.stop_token_ids) {
      check_id(t, vocab, "stop_token_ids");
      x[t] = kNegInf;
    }
  }

  // (2) penalties, float32 as in vLLM (logits are float32 there; -ffp-contract=off keeps the
  // separate multiply and subtract).
  const bool rep = p.repetition_penalty != 1.0f;
  const bool freq = p.frequency_penalty != 0.0f;
  const bool pres = p.presence_penalty != 0.0f;
  if (!rep && !freq && !pres) return;
  counts.ensure(vocab);
  uint32_t* table = counts.table.data();
  auto& touched = counts.touched;
  touched.clear();
  for (int32_t t : r.output_ids) {
    check_id(t, vocab, "output");
    if (table[t] == 0) touched.push_back(t);
    if ((table[t] & kCountMask) != kCountMask) ++table[t];
  }
  if (rep) {
    for (int32_t t : r.prompt_ids) {
      check_id(t, vocab, "prompt");
      if (table[t] == 0) touched.push_back(t);
      table[t] |= kInPrompt;
    }
  }
  // Each touched token is updated independently, so the visiting order cannot matter.
  const float rp = p.repetition_penalty, fp = p.frequency_penalty, pp = p.presence_penalty;
  for (int32_t t : touched) {
    const uint32_t count = table[t] & kCountMask;
    table[t] = 0;
    float v = static_cast<float>(x[t]);  // exact: x holds a float value or -inf
    if (rep) v = v > 0.0f ? v / rp : v * rp;  // prompt OR output occurrence
    if (freq) v = v - fp * static_cast<float>(count);
    if (pres && count > 0) v = v - pp;
    x[t] = std::isnan(v) ? kNegInf : static_cast<double>(v);
  }
  touched.clear();
}

}  // namespace deepinfer::sample
