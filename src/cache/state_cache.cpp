#include "cache/state_cache.h"

#include "core/error.h"
#include "model/info.h"

namespace deepinfer::cache {

StateCache::StateCache(const loader::ModelConfig& config, kernels::Backend& backend, int64_t budget_bytes,
                       int64_t rollback_rows, bool draft_rings)
    : config_(config), backend_(backend), budget_(budget_bytes), rollback_rows_(rollback_rows), draft_rings_(draft_rings) {}

int64_t StateCache::bytes_for(int64_t n_tokens) const {
  return model::sequence_state_bytes(config_, n_tokens, draft_rings_);
}

bool StateCache::fits(int64_t id, int64_t n_tokens) const {
  if (budget_ <= 0) return true;
  auto it = reservation_.find(id);
  const int64_t current = it == reservation_.end() ? 0 : it->second;
  return reserved_ - current + bytes_for(n_tokens) <= budget_;
}

model::SequenceState& StateCache::acquire(int64_t id) {
  auto it = states_.find(id);
  if (it == states_.end()) {
    it = states_.emplace(id, std::make_unique<model::SequenceState>(config_, backend_)).first;
    it->second->set_rollback_rows(rollback_rows_);
  }
  return *it->second;
}

void StateCache::reserve(int64_t id, int64_t n_tokens) {
  const int64_t b = bytes_for(n_tokens);
  int64_t& r = reservation_[id];
  reserved_ += b - r;
  r = b;
}

void StateCache::rollback(int64_t id, int64_t rows) {
  auto it = states_.find(id);
  DI_CHECK(it != states_.end(), "rollback of a sequence without state");
  it->second->rollback(rows);
  reserve(id, it->second->length());
}

void StateCache::release(int64_t id) {
  auto it = reservation_.find(id);
  if (it != reservation_.end()) {
    reserved_ -= it->second;
    reservation_.erase(it);
  }
  states_.erase(id);
}

}  // namespace deepinfer::cache
