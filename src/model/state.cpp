#include "model/state.h"

namespace deepinfer::model {

SequenceState::SequenceState(const loader::ModelConfig& c)
    : windows_(static_cast<size_t>(c.num_hidden_layers)), sources_(static_cast<size_t>(c.num_hidden_layers)) {}

int64_t SequenceState::bytes() const {
  int64_t b = 0;
  for (const auto& w : windows_) b += static_cast<int64_t>(w.kv.size() * sizeof(float) + w.pos.size() * sizeof(int64_t));
  for (const auto& s : sources_)
    b += static_cast<int64_t>((s.buf_kv.size() + s.buf_gate.size() + s.comp.size() + s.index_k.size()) * sizeof(float));
  b += static_cast<int64_t>(engram_history_.size() * sizeof(int32_t));
  return b;
}

void SequenceState::reset() {
  length_ = 0;
  for (auto& w : windows_) w = WindowRing{};
  for (auto& s : sources_) s = SourceState{};
  engram_history_.clear();
}

}  // namespace deepinfer::model
