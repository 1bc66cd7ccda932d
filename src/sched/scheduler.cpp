#include "sched/scheduler.h"

#include <algorithm>

#include "core/error.h"

namespace deepinfer::sched {

void Scheduler::add(Sequence* seq) {
  seq->status = SeqStatus::kWaiting;
  waiting_.push_back(seq);
}

int64_t Scheduler::replay_from(const Sequence& s, int64_t start, int64_t n) const {
  if (cfg_.exact_prefill || !cfg_.replay_supported) return 0;
  // Rows before the prompt's tail skip the decoder layers; every later row (the tail and all
  // generated tokens) runs them. The rule depends only on positions, so a recompute after
  // preemption, in any chunking, builds the same state.
  const int64_t tail_start = std::max<int64_t>(0, s.prompt_len - cfg_.replay_tail);
  return std::clamp<int64_t>(tail_start - start, 0, n);
}

void Scheduler::preempt(Sequence* seq, StepPlan& plan) {
  cache_.release(seq->id);
  ++plan.n_preempted;
  plan.preempted.push_back(seq);
  seq->num_computed = 0;
  seq->status = SeqStatus::kWaiting;
  ++seq->preemptions;
  ++preemptions_;
  running_.erase(std::remove(running_.begin(), running_.end(), seq), running_.end());
  // Back to the front of the queue, keeping arrival order among the preempted.
  auto it = std::find_if(waiting_.begin(), waiting_.end(), [&](const Sequence* w) { return w->id > seq->id; });
  waiting_.insert(it, seq);
}

StepPlan Scheduler::schedule() {
  StepPlan plan;
  int64_t budget = cfg_.max_num_batched_tokens;
  std::vector<Sequence*> scheduled;
  auto plan_chunk = [&](Sequence* s) -> bool {
    const int64_t remaining = static_cast<int64_t>(s->tokens.size()) - s->num_computed;
    const int64_t n = std::min(remaining, budget);
    if (n <= 0) return false;
    // A decode with a draft verifies what of it fits the step's tokens and the memory budget
    // (without preempting anyone for it).
    int64_t n_draft = remaining == 1 ? std::min(static_cast<int64_t>(s->draft.size()), budget - 1) : 0;
    while (n_draft > 0 && !cache_.fits(s->id, s->num_computed + 1 + n_draft)) --n_draft;
    // Memory: preempt the newest running sequences (not yet in this step) until it fits.
    while (!cache_.fits(s->id, s->num_computed + n)) {
      Sequence* victim = nullptr;
      for (auto it = running_.rbegin(); it != running_.rend(); ++it)
        if (*it != s && std::find(scheduled.begin(), scheduled.end(), *it) == scheduled.end() && (*it)->id > s->id) {
          victim = *it;
          break;
        }
      if (!victim) return false;
      preempt(victim, plan);
    }
    cache_.acquire(s->id);
    cache_.reserve(s->id, s->num_computed + n + n_draft);
    ScheduledChunk c;
    c.seq = s;
    c.start = s->num_computed;
    c.n = n;
    c.replay_from = replay_from(*s, c.start, n);
    c.sample = c.start + n == static_cast<int64_t>(s->tokens.size());
    c.n_draft = n_draft;
    plan.chunks.push_back(c);
    plan.n_tokens += n + n_draft;
    budget -= n + n_draft;
    scheduled.push_back(s);
    return true;
  };
  // Running sequences first, oldest first.
  std::vector<Sequence*> run_order = running_;
  for (Sequence* s : run_order) {
    if (budget <= 0) break;
    if (s->status != SeqStatus::kRunning) continue;  // preempted above
    if (!plan_chunk(s)) {
      // Not even this one fits alone: preempt it (it will be recomputed when memory frees).
      if (!cache_.fits(s->id, s->num_computed + 1) && running_.size() > 1) preempt(s, plan);
    }
  }
  // Then waiting sequences, oldest first.
  while (budget > 0 && !waiting_.empty() && static_cast<int64_t>(running_.size()) < cfg_.max_num_seqs) {
    Sequence* s = waiting_.front();
    if (!plan_chunk(s)) break;
    waiting_.pop_front();
    s->status = SeqStatus::kRunning;
    running_.push_back(s);
    std::sort(running_.begin(), running_.end(), [](const Sequence* a, const Sequence* b) { return a->id < b->id; });
  }
  if (plan.chunks.empty() && has_work() && (!running_.empty() || !waiting_.empty())) {
    // Nothing fits even with every other sequence preempted: run the oldest alone, over
    // budget, rather than stall (the budget is a target, not a hard limit). The oldest is a
    // running sequence when one is left (it keeps its state), else the first waiting one.
    Sequence* s = nullptr;
    if (!running_.empty()) {
      s = running_.front();  // sorted by id: the oldest
      const std::vector<Sequence*> others(running_.begin() + 1, running_.end());
      for (Sequence* r : others) preempt(r, plan);
    } else {
      s = waiting_.front();
      waiting_.pop_front();
      s->status = SeqStatus::kRunning;
      running_.push_back(s);
    }
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(s->tokens.size()) - s->num_computed, cfg_.max_num_batched_tokens);
    if (n <= 0) return plan;
    cache_.acquire(s->id);
    cache_.reserve(s->id, s->num_computed + n);
    plan.chunks.push_back({s, s->num_computed, n, replay_from(*s, s->num_computed, n),
                           s->num_computed + n == static_cast<int64_t>(s->tokens.size())});
    plan.n_tokens = n;
  }
  return plan;
}

void Scheduler::finish(Sequence* seq) {
  seq->status = SeqStatus::kFinished;
  cache_.release(seq->id);
  running_.erase(std::remove(running_.begin(), running_.end(), seq), running_.end());
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), seq), waiting_.end());
}

}  // namespace deepinfer::sched
