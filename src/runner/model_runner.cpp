#include "runner/model_runner.h"

namespace deepinfer::runner {

StepOutput ModelRunner::run(const sched::StepPlan& plan) {
  StepOutput out;
  const int64_t V = model_.config().vocab_size;
  for (size_t i = 0; i < plan.chunks.size(); ++i)
    if (plan.chunks[i].sample) out.sampled.push_back(i);
  out.logits.resize(out.sampled.size() * static_cast<size_t>(V));
  std::vector<model::DeepseekV41::SeqChunk> chunks;
  chunks.reserve(plan.chunks.size());
  size_t k = 0;
  for (const auto& c : plan.chunks) {
    model::DeepseekV41::SeqChunk ch;
    ch.tokens = c.seq->tokens.data() + c.start;
    ch.n = c.n;
    ch.state = &cache_.acquire(c.seq->id);
    ch.replay_from = c.replay_from;
    ch.all_logits = false;
    ch.logits = c.sample ? out.logits.data() + static_cast<int64_t>(k++) * V : nullptr;
    chunks.push_back(ch);
  }
  if (!chunks.empty()) model_.forward(std::span<model::DeepseekV41::SeqChunk>(chunks));
  for (const auto& c : plan.chunks) c.seq->num_computed += c.n;
  return out;
}

}  // namespace deepinfer::runner
