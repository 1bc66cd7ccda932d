// Per-sequence decoding state of DeepSeek-V4.1 (what the reference keeps in its cache).
//
// Purpose: everything a sequence carries from one forward call to the next, so a prompt
// fed in any chunking gives the same logits:
//   - every layer: the sliding-window ring of the last window-1 K=V latents (post-RoPE,
//     post-FP8), oldest first, with their absolute positions;
//   - every KV source: the compressor's partial-group buffers (ratio > 1), the compressed
//     KV entries (post-RoPE, post-FP4) and, when it owns indexer keys, those keys;
//   - Engram's history of compressed token ids by absolute position;
//   - every DSpark draft stage: the ring of the last window main-stream keys (post-RoPE,
//     post-FP8) its draft block attends over, with their positions (filled by forwards of a
//     model made with ModelOptions.dspark; empty otherwise);
//   - the number of tokens processed.
// The engine's cache manager (cache::StateCache) owns these objects.
// Rollback (speculative decoding): rollback(rows) removes the last `rows` tokens of the last
// forward, leaving the state that forward would have left without them, at a cost of O(rows)
// rows per layer: window rings restore the rows that forward dropped at their front (dropped
// rows stay in place until the next forward's growth compacts them), compressed KV and indexer
// keys drop their last groups, and each compressor keeps the raw rows of its last
// rollback_rows() + ratio - 1 tokens (not only its open group) so that an open group can be
// rebuilt from them.
// Invariants: window entries are contiguous positions ending at length()-1; a source's
// compressed entry g covers tokens [g*ratio, (g+1)*ratio).
// Threading: one sequence is advanced by one thread at a time.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/backend.h"
#include "kernels/buffer.h"
#include "loader/config.h"

namespace deepinfer::model {

// Rows of vectors the model has already rounded to a low-precision grid, stored in that
// grid's format (exact) in the backend's memory: FP8 e4m3 with a power-of-two scale per
// `block` channels (window KV), FP4 e2m1 pairs with an e4m3 scale per block (compressed KV)
// or a power-of-two one (indexer keys). Where the dimension does not divide into blocks
// (tiny test configs, which the reference leaves unrounded) the rows are stored as float32.
// Rows dropped at the front stay allocated until the next growth compacts them away.
class PackedRows {
 public:
  PackedRows() = default;
  PackedRows(kernels::Backend& be, kernels::FakeQuant kind, int64_t dim, int64_t block);

  int64_t size() const { return n_; }
  int64_t dim() const { return dim_; }
  bool packed() const { return packed_; }
  // Buffers (backend memory) for `rows` new rows: the fake-quant op writes codes and scales
  // into them (FakeQuantArgs.codes / .scales); null when stored as float.
  uint8_t* code_slot(int64_t rows);
  uint8_t* scale_slot(int64_t rows);
  // Appends `rows` rows: their rounded values (backend memory; used when stored as float)
  // and, when packed, the codes/scales already written into the slots.
  void append(const float* values, int64_t rows);
  void drop_front(int64_t rows);
  // Rollback: drop the last rows; bring back rows dropped at the front since the last growth
  // (at most dropped_front()).
  void drop_back(int64_t rows);
  int64_t dropped_front() const { return start_; }
  void restore_front(int64_t rows);
  // Where row `row` is stored (backend memory): its codes and scales when packed, else its
  // float values; for batched reads (kernels::dequant_packed_batch, copy_batch).
  const uint8_t* codes_at(int64_t row) const { return codes_.data() + (start_ + row) * code_bytes_; }
  const uint8_t* scales_at(int64_t row) const { return scales_.data() + (start_ + row) * scale_bytes_; }
  const float* values_at(int64_t row) const { return f32_.data() + (start_ + row) * dim_; }
  kernels::FakeQuant kind() const { return kind_; }
  int64_t block() const { return block_; }
  int64_t code_bytes() const { return code_bytes_; }    // per row, when packed
  int64_t scale_bytes() const { return scale_bytes_; }  // per row, when packed
  // Bytes the live rows take.
  int64_t bytes() const;

 private:
  void reserve(int64_t extra_rows);  // room for n_ + extra rows after the live ones

  kernels::Backend* be_ = nullptr;
  kernels::FakeQuant kind_ = kernels::FakeQuant::kFp8Pow2;
  int64_t dim_ = 0, block_ = 1, n_ = 0, start_ = 0, cap_ = 0;  // rows: live, dropped in front, allocated
  bool packed_ = false;
  int64_t code_bytes_ = 0, scale_bytes_ = 0;  // per row
  kernels::Buf<uint8_t> codes_, scales_;      // [cap, code_bytes], [cap, scale_bytes]
  kernels::Buf<float> f32_;                   // [cap, dim] when not packed
};

struct WindowRing {
  PackedRows kv;             // [n, head_dim] FP8 (post-RoPE), oldest first
  std::vector<int64_t> pos;  // [n] absolute positions (host)
};

struct SourceState {
  // [buf_spare + buf_rows, head_dim] fp32: the raw rows of the last buf_spare tokens before
  // the open group (kept for a rollback; 0 when the state never rolls back), then the open
  // group's buf_rows tokens.
  kernels::Buf<float> buf_kv, buf_gate;
  int64_t buf_rows = 0, buf_spare = 0;
  PackedRows comp;                      // [n_comp, head_dim] FP4 (e4m3 scale / 16) compressed KV
  int64_t n_comp = 0;                   // groups emitted (the reference's entry_count)
  PackedRows index_k;                   // [n_index, index_head_dim] FP4 (ue8m0 / 32) indexer keys
  int64_t n_index = 0;
};

// Move-only: its caches live in the backend's memory.
class SequenceState {
 public:
  SequenceState(const loader::ModelConfig& c, kernels::Backend& be);

  int64_t length() const { return length_; }
  void advance(int64_t n) { length_ += n; }
  // The most tokens one rollback may remove (0 by default: compressors keep only their open
  // group). Set before the first forward.
  int64_t rollback_rows() const { return rollback_rows_; }
  void set_rollback_rows(int64_t rows);
  // Removes the last `rows` (<= rollback_rows(), <= the rows of the last forward) tokens' state,
  // right after that forward: as if they had never been fed. O(rows) per layer.
  void rollback(int64_t rows);
  WindowRing& window(int64_t layer) { return windows_[static_cast<size_t>(layer)]; }
  SourceState& source(int64_t layer) { return sources_[static_cast<size_t>(layer)]; }
  // DSpark stage `stage`'s ring: at most sliding_window entries, oldest first.
  WindowRing& draft_ring(int64_t stage) { return draft_rings_[static_cast<size_t>(stage)]; }
  // Engram: compressed token id by absolute position (-1 = no live token there).
  std::vector<int32_t>& engram_history() { return engram_history_; }
  // Bytes held now (packed formats where the model rounds, float32 elsewhere).
  int64_t bytes() const;
  void reset();

 private:
  int64_t length_ = 0, rollback_rows_ = 0;
  std::vector<WindowRing> windows_;
  const loader::ModelConfig* config_ = nullptr;
  kernels::Backend* be_ = nullptr;
  std::vector<SourceState> sources_;  // indexed by layer; used only for KV sources
  std::vector<int32_t> engram_history_;
  std::vector<WindowRing> draft_rings_;  // [num_nextn_predict_layers]
};

}  // namespace deepinfer::model
