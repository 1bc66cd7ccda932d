// Scheduler: which sequences run in the next step, and how many of their tokens.
//
// Purpose: continuous batching under a token budget per step (chunked prefill: a long
// prompt is fed over several steps; decodes take one token each), a cap on running
// sequences, and a memory budget enforced through the StateCache: when a chunk would not
// fit, the newest running sequence is preempted (its state freed; it is recomputed later
// from its tokens, giving the same state). Prompt rows before each prompt's tail skip the
// decoder layers (CED bounded replay) unless exact prefill is asked for. A decoding sequence
// with a draft (speculative decoding) runs its last token and as many of the draft's tokens as
// the step's token budget and the memory budget allow, as one chunk.
// Invariants: a step never exceeds the token budget; running sequences are served before
// waiting ones, oldest first; the plan is a plain struct the runner lays out.
// Threading: engine thread only.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "cache/state_cache.h"
#include "sched/sequence.h"

namespace deepinfer::sched {

struct SchedulerConfig {
  int64_t max_num_batched_tokens = 2048;  // tokens per step
  int64_t max_num_seqs = 64;              // running sequences
  bool exact_prefill = false;             // false: CED bounded replay of prompt tails
  int64_t replay_tail = 0;                // rows of each prompt's tail that run every layer (the window)
  bool replay_supported = false;          // the model has a layer after its last KV source
};

struct ScheduledChunk {
  Sequence* seq = nullptr;
  int64_t start = 0, n = 0;   // tokens [start, start + n) of seq->tokens
  int64_t replay_from = 0;    // rows [0, replay_from) skip the decoder layers
  bool sample = false;        // the chunk ends at the sequence's last token: sample after it
  // Speculative decoding: rows [n, n + n_draft) are seq->draft[0, n_draft), verified after the
  // forward (only on a decode chunk: n == 1, sample).
  int64_t n_draft = 0;
};

struct StepPlan {
  std::vector<ScheduledChunk> chunks;
  int64_t n_tokens = 0;       // rows, drafts included
  int64_t n_preempted = 0;
  std::vector<Sequence*> preempted;  // this step's preempted sequences (state freed)
};

class Scheduler {
 public:
  Scheduler(SchedulerConfig cfg, cache::StateCache& cache) : cfg_(cfg), cache_(cache) {}

  void add(Sequence* seq);          // queue a new sequence (FIFO)
  StepPlan schedule();
  void finish(Sequence* seq);       // finished (or failed): frees its state
  bool has_work() const { return !waiting_.empty() || !running_.empty(); }
  size_t num_running() const { return running_.size(); }
  const std::vector<Sequence*>& running() const { return running_; }  // oldest first
  size_t num_waiting() const { return waiting_.size(); }
  int64_t total_preemptions() const { return preemptions_; }

 private:
  void preempt(Sequence* seq, StepPlan& plan);
  int64_t replay_from(const Sequence& s, int64_t start, int64_t n) const;

  SchedulerConfig cfg_;
  cache::StateCache& cache_;
  std::deque<Sequence*> waiting_;   // oldest first (preempted ones go back to the front)
  std::vector<Sequence*> running_;  // oldest first
  int64_t preemptions_ = 0;
};

}  // namespace deepinfer::sched
