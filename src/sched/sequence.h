// Sequence: one completion being generated, as the scheduler and engine track it.
//
// Purpose: the tokens (prompt then generated), how many of them the model state already
// holds, and the request it belongs to. A request with n > 1 has n sequences.
// Invariants: 0 <= num_computed <= tokens.size(); prompt_len <= tokens.size(); drafts are
// never part of tokens.
// Threading: engine thread only.
#pragma once

#include <cstdint>
#include <vector>

namespace deepinfer::sched {

enum class SeqStatus { kWaiting, kRunning, kFinished };

struct Sequence {
  int64_t id = 0;                 // unique, in arrival order (older = smaller)
  size_t request = 0;             // index of its request in the engine's list
  int completion = 0;             // index among the request's n completions
  std::vector<int64_t> tokens;    // prompt + generated
  int64_t prompt_len = 0;
  int64_t num_computed = 0;       // tokens whose state the cache holds
  SeqStatus status = SeqStatus::kWaiting;
  int64_t preemptions = 0;
  // Speculative decoding: tokens proposed to follow `tokens` (verified in the next step when the
  // sequence decodes; the engine clears them after each step).
  std::vector<int64_t> draft;
  int64_t generated() const { return static_cast<int64_t>(tokens.size()) - prompt_len; }
};

}  // namespace deepinfer::sched
