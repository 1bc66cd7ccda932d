#include "runner/model_runner.h"

#include <algorithm>

namespace deepinfer::runner {

StepOutput ModelRunner::run(const sched::StepPlan& plan, const DrawOnBackend& draw_on_backend) {
  StepOutput out;
  const int64_t V = vocab_size();
  int64_t n_logits = 0;
  std::vector<kernels::DrawParams> draws;
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    if (!plan.chunks[i].sample) continue;
    out.sampled.push_back(i);
    const std::optional<kernels::DrawParams> d = draw_on_backend ? draw_on_backend(*plan.chunks[i].seq) : std::nullopt;
    out.token.push_back(kernels::kNoToken);
    out.logits_row.push_back(d ? -1 : n_logits++);
    draws.push_back(d.value_or(kernels::DrawParams{}));
  }
  out.logits.resize(static_cast<size_t>(n_logits * V));
  out.logprob.assign(out.sampled.size(), 0.0f);
  out.top_ids.resize(out.sampled.size());
  out.top_logprobs.resize(out.sampled.size());
  for (size_t k = 0; k < out.sampled.size(); ++k) {
    const auto n = static_cast<size_t>(std::max(draws[k].logprobs, 0));
    out.top_ids[k].assign(n, -1);
    out.top_logprobs[k].assign(n, 0.0f);
  }
  std::vector<Chunk> chunks;
  chunks.reserve(plan.chunks.size());
  size_t k = 0;
  for (const auto& c : plan.chunks) {
    Chunk ch;
    ch.tokens = c.seq->tokens.data() + c.start;
    ch.n = c.n;
    ch.state = &cache_.acquire(c.seq->id);
    ch.replay_from = c.replay_from;
    ch.all_logits = false;
    if (c.sample) {
      if (out.logits_row[k] >= 0) ch.logits = out.logits.data() + out.logits_row[k] * V;
      else {
        ch.token = &out.token[k];
        ch.draw = draws[k];
        ch.logprob = &out.logprob[k];
        ch.top_ids = out.top_ids[k].data();
        ch.top_logprobs = out.top_logprobs[k].data();
      }
      ++k;
    }
    chunks.push_back(ch);
  }
  if (!chunks.empty()) batches_.forward(std::span<Chunk>(chunks));
  for (const auto& c : plan.chunks) c.seq->num_computed += c.n;
  return out;
}

}  // namespace deepinfer::runner
