#include "runner/model_runner.h"

#include <algorithm>

namespace deepinfer::runner {

StepOutput ModelRunner::run(const sched::StepPlan& plan, const DrawOnBackend& draw_on_backend) {
  StepOutput out;
  const int64_t V = vocab_size();
  int64_t n_logits = 0;
  std::vector<kernels::DrawParams> draws;  // per output row
  out.first.push_back(0);
  out.top_at.push_back(0);
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    const sched::ScheduledChunk& c = plan.chunks[i];
    if (!c.sample) continue;
    out.sampled.push_back(i);
    const bool on_backend = draw_on_backend && draw_on_backend(*c.seq, 0);
    for (int64_t j = 0; j <= c.n_draft; ++j) {
      const std::optional<kernels::DrawParams> d = on_backend ? draw_on_backend(*c.seq, j) : std::nullopt;
      out.token.push_back(kernels::kNoToken);
      out.logits_row.push_back(d ? -1 : n_logits++);
      draws.push_back(d.value_or(kernels::DrawParams{}));
      out.top_at.push_back(out.top_at.back() + static_cast<size_t>(std::max(draws.back().logprobs, 0)));
    }
    out.first.push_back(out.token.size());
  }
  out.logits.resize(static_cast<size_t>(n_logits * V));
  out.logprob.assign(out.token.size(), 0.0f);
  out.top_ids.assign(out.top_at.back(), -1);
  out.top_logprobs.assign(out.top_at.back(), 0.0f);
  std::vector<Chunk> chunks;
  chunks.reserve(plan.chunks.size());
  std::vector<std::vector<int64_t>> verify_rows;  // a chunk with a draft: its token then the draft
  verify_rows.reserve(plan.chunks.size());
  size_t k = 0;
  for (const auto& c : plan.chunks) {
    Chunk ch;
    ch.tokens = c.seq->tokens.data() + c.start;
    ch.n = c.n;
    if (c.n_draft > 0) {
      std::vector<int64_t>& rows = verify_rows.emplace_back(ch.tokens, ch.tokens + c.n);
      rows.insert(rows.end(), c.seq->draft.begin(), c.seq->draft.begin() + c.n_draft);
      ch.tokens = rows.data();
      ch.n += c.n_draft;
      ch.all_logits = true;
    }
    ch.state = &cache_.acquire(c.seq->id);
    ch.replay_from = c.replay_from;
    if (c.sample) {
      const size_t r = out.first[k++];
      if (out.logits_row[r] >= 0) {
        ch.logits = out.logits.data() + out.logits_row[r] * V;
      } else {
        ch.token = &out.token[r];
        ch.draw = draws[r];
        if (c.n_draft > 0) ch.draws = &draws[r];
        ch.logprob = &out.logprob[r];
        ch.top_ids = out.top_ids.data() + out.top_at[r];
        ch.top_logprobs = out.top_logprobs.data() + out.top_at[r];
      }
    }
    chunks.push_back(ch);
  }
  if (!chunks.empty()) batches_.forward(std::span<Chunk>(chunks));
  for (const auto& c : plan.chunks) c.seq->num_computed += c.n;
  return out;
}

}  // namespace deepinfer::runner
