// The engine's state budget: how many bytes of per-sequence state the scheduler may hold.
//
// Purpose: the state cache (cache::StateCache) grows sequences until this budget and then
// preempts; everything else a run allocates (a step's activations and scratch, graph pools)
// must fit beside it, or a device runs out of memory in the middle of a step. On a device
// backend the budget is a fraction of the memory free after a warm-up forward of the largest
// step the scheduler makes (max_num_batched_tokens rows of one sequence, every layer on every
// row): the backend's stream-ordered pool keeps the memory that forward used, so the fraction
// is taken of what is left beside a step's working set. Device backends take
// model::kDeviceMemoryFraction when neither a byte budget nor a fraction is given.
// Invariants: a byte budget wins over a fraction; a host backend is unlimited by default and
// runs no warm-up; the warm-up's state is freed before the free memory is read.
// Threading: engine thread; runs a forward on the runner's backend.
#pragma once

#include <cstdint>
#include <string>

#include "runner/batch_runner.h"

namespace deepinfer::engine {

struct StateBudgetOptions {
  int64_t bytes = 0;           // an explicit budget (0: none)
  double fraction = 0;         // of the memory free after the warm-up (0: the backend's default)
  int64_t warmup_tokens = 0;   // rows of the warm-up forward (the step's token budget)
};

struct StateBudget {
  int64_t bytes = 0;           // 0: unlimited
  std::string how;             // "state budget 29.8 GB (0.9 of 33.1 GB free after a warm-up forward of 2048 tokens)"
};

StateBudget plan_state_budget(runner::BatchRunner& runner, const StateBudgetOptions& o);

}  // namespace deepinfer::engine
