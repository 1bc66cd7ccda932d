// StateCache: the per-sequence decoding state of every running sequence, and its memory.
//
// Purpose: bookkeeping only — which sequence holds which model::SequenceState, how many
// bytes each will hold after the step being planned, and whether a budget allows it. The
// scheduler asks `fits` before it schedules a chunk and preempts (frees) sequences when the
// budget runs out; a freed sequence is later recomputed from its tokens.
// Invariants: reserved() is the sum of the per-sequence reservations; a sequence's
// reservation covers every token whose state it holds.
// Threading: used by the engine thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>

#include "loader/config.h"
#include "model/state.h"

namespace deepinfer::cache {

class StateCache {
 public:
  // budget_bytes <= 0: unlimited.
  // States are allocated in `backend`'s memory; each may roll back up to rollback_rows tokens.
  // draft_rings: the model fills the DSpark stages' rings (ModelOptions.dspark), which the
  // states' bytes then include.
  StateCache(const loader::ModelConfig& config, kernels::Backend& backend, int64_t budget_bytes, int64_t rollback_rows = 0,
             bool draft_rings = false);

  // Bytes of state a sequence holds with n_tokens computed, as stored
  // full windows, compressed KV and indexer keys per token, Engram history).
  int64_t bytes_for(int64_t n_tokens) const;
  int64_t budget() const { return budget_; }
  int64_t reserved() const { return reserved_; }
  // Would growing sequence `id` (or a new one) to n_tokens stay within the budget?
  bool fits(int64_t id, int64_t n_tokens) const;

  model::SequenceState& acquire(int64_t id);  // creates on first use
  void reserve(int64_t id, int64_t n_tokens);  // records the reservation for n_tokens
  void release(int64_t id);                    // frees the state and its reservation
  // Removes the last `rows` tokens of the last forward from sequence id's state; the reservation
  // then covers what is left.
  void rollback(int64_t id, int64_t rows);
  bool holds(int64_t id) const { return states_.count(id) != 0; }
  size_t size() const { return states_.size(); }

 private:
  const loader::ModelConfig& config_;
  kernels::Backend& backend_;
  int64_t budget_;
  int64_t rollback_rows_;
  bool draft_rings_;
  int64_t reserved_ = 0;
  std::unordered_map<int64_t, std::unique_ptr<model::SequenceState>> states_;
  std::unordered_map<int64_t, int64_t> reservation_;
};

}  // namespace deepinfer::cache
