// Per-sequence decoding state of DeepSeek-V4.1 (what the reference keeps in its cache).
//
// Purpose: everything a sequence carries from one forward call to the next, so a prompt
// fed in any chunking gives the same logits:
//   - every layer: the sliding-window ring of the last window-1 K=V latents (post-RoPE,
//     post-FP8), oldest first, with their absolute positions;
//   - every KV source: the compressor's partial-group buffers (ratio > 1), the compressed
//     KV entries (post-RoPE, post-FP4) and, when it owns indexer keys, those keys;
//   - Engram's history of compressed token ids by absolute position;
//   - the number of tokens processed.
// The engine's cache manager will own these objects (allocation, budget, rollback).
// Invariants: window entries are contiguous positions ending at length()-1; a source's
// compressed entry g covers tokens [g*ratio, (g+1)*ratio).
// Threading: one sequence is advanced by one thread at a time.
#pragma once

#include <cstdint>
#include <vector>

#include "loader/config.h"

namespace deepinfer::model {

struct WindowRing {
  std::vector<float> kv;     // [n, head_dim] fp32, oldest first
  std::vector<int64_t> pos;  // [n] absolute positions
};

struct SourceState {
  std::vector<float> buf_kv, buf_gate;  // [buf_rows, head_dim] fp32: tokens of the open group
  int64_t buf_rows = 0;
  std::vector<float> comp;              // [n_comp, head_dim] fp32 compressed KV
  int64_t n_comp = 0;                   // groups emitted (the reference's entry_count)
  std::vector<float> index_k;           // [n_index, index_head_dim] fp32 indexer keys
  int64_t n_index = 0;
};

class SequenceState {
 public:
  explicit SequenceState(const loader::ModelConfig& c);

  int64_t length() const { return length_; }
  void advance(int64_t n) { length_ += n; }
  WindowRing& window(int64_t layer) { return windows_[static_cast<size_t>(layer)]; }
  SourceState& source(int64_t layer) { return sources_[static_cast<size_t>(layer)]; }
  // Engram: compressed token id by absolute position (-1 = no live token there).
  std::vector<int32_t>& engram_history() { return engram_history_; }
  // Bytes held now (float32 storage).
  int64_t bytes() const;
  void reset();

 private:
  int64_t length_ = 0;
  std::vector<WindowRing> windows_;
  std::vector<SourceState> sources_;  // indexed by layer; used only for KV sources
  std::vector<int32_t> engram_history_;
};

}  // namespace deepinfer::model
