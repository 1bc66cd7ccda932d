#include "model/state.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/error.h"

namespace deepinfer::model {

PackedRows::PackedRows(kernels::Backend& be, kernels::FakeQuant kind, int64_t dim, int64_t block)
    : be_(&be), kind_(kind), dim_(dim), block_(block), packed_(block > 0 && dim % block == 0),
      codes_(be), scales_(be), f32_(be) {
  code_bytes_ = kind == kernels::FakeQuant::kFp8Pow2 ? dim : dim / 2;
  scale_bytes_ = packed_ ? dim / block : 0;
}

void PackedRows::reserve(int64_t extra) {
  if (start_ + n_ + extra <= cap_) return;
  // Grow (or just compact the dropped front rows away) into fresh buffers.
  const int64_t cap = std::max(cap_, 2 * (n_ + extra));
  if (packed_) {
    kernels::Buf<uint8_t> c(*be_, cap * code_bytes_), sc(*be_, cap * scale_bytes_);
    if (n_) {
      be_->copy(c.data(), codes_.data() + start_ * code_bytes_, n_ * code_bytes_);
      be_->copy(sc.data(), scales_.data() + start_ * scale_bytes_, n_ * scale_bytes_);
    }
    codes_ = std::move(c);
    scales_ = std::move(sc);
  } else {
    kernels::Buf<float> f(*be_, cap * dim_);
    if (n_) be_->copy(f.data(), f32_.data() + start_ * dim_, n_ * dim_ * static_cast<int64_t>(sizeof(float)));
    f32_ = std::move(f);
  }
  start_ = 0;
  cap_ = cap;
}

uint8_t* PackedRows::code_slot(int64_t rows) {
  if (!packed_) return nullptr;
  reserve(rows);
  return codes_.data() + (start_ + n_) * code_bytes_;
}

uint8_t* PackedRows::scale_slot(int64_t rows) {
  if (!packed_) return nullptr;
  reserve(rows);
  return scales_.data() + (start_ + n_) * scale_bytes_;
}

void PackedRows::append(const float* values, int64_t rows) {
  if (rows <= 0) return;
  if (packed_) {
    DI_CHECK(start_ + n_ + rows <= cap_, "packed rows appended without their codes");
  } else {
    reserve(rows);
    be_->copy(f32_.data() + (start_ + n_) * dim_, values, rows * dim_ * static_cast<int64_t>(sizeof(float)));
  }
  n_ += rows;
}

void PackedRows::drop_front(int64_t rows) {
  if (rows <= 0) return;
  DI_CHECK(rows <= n_, "drop_front past the end");
  start_ += rows;
  n_ -= rows;
}

void PackedRows::drop_back(int64_t rows) {
  DI_CHECK(rows >= 0 && rows <= n_, "drop_back past the front");
  n_ -= rows;
}

void PackedRows::restore_front(int64_t rows) {
  DI_CHECK(rows >= 0 && rows <= start_, "restore_front: those rows were compacted away");
  start_ -= rows;
  n_ += rows;
}

int64_t PackedRows::bytes() const {
  return packed_ ? n_ * (code_bytes_ + scale_bytes_) : n_ * dim_ * static_cast<int64_t>(sizeof(float));
}

SequenceState::SequenceState(const loader::ModelConfig& c, kernels::Backend& be)
    : windows_(static_cast<size_t>(c.num_hidden_layers)), config_(&c), be_(&be), sources_(static_cast<size_t>(c.num_hidden_layers)) {
  draft_rings_.resize(static_cast<size_t>(c.num_nextn_predict_layers));
  reset();
}

int64_t SequenceState::bytes() const {
  int64_t b = 0;
  for (const auto& w : windows_) b += w.kv.bytes() + static_cast<int64_t>(w.pos.size() * sizeof(int64_t));
  for (const auto& w : draft_rings_) b += w.kv.bytes() + static_cast<int64_t>(w.pos.size() * sizeof(int64_t));
  for (const auto& s : sources_) b += (s.buf_kv.size() + s.buf_gate.size()) * 4 + s.comp.bytes() + s.index_k.bytes();
  b += static_cast<int64_t>(engram_history_.size() * sizeof(int32_t));
  return b;
}

void SequenceState::set_rollback_rows(int64_t rows) {
  DI_CHECK(rows >= 0, "rollback_rows must be >= 0");
  DI_CHECK(length_ == 0, "rollback_rows is set before the first forward");
  rollback_rows_ = rows;
}

void SequenceState::rollback(int64_t rows) {
  DI_CHECK(rows >= 0 && rows <= rollback_rows_ && rows <= length_,
           "rollback of " + std::to_string(rows) + " rows (at most " + std::to_string(rollback_rows_) + ")");
  if (rows == 0) return;
  const auto& c = *config_;
  length_ -= rows;
  // A ring's rows dropped at its front by the last forward are still in place behind it: its
  // rows are then contiguous positions ending where that forward ended. Without the last
  // `rows`, it keeps the last window - 1 of them.
  // (The draft stages' rings the same way; they keep `window` rows, the layers' window - 1.)
  auto roll_back_ring = [&](WindowRing& w, int64_t cap) {
    if (w.pos.empty()) return;  // a layer that no row has run yet (bounded replay)
    DI_CHECK(w.pos.back() == length_ + rows - 1, "rollback of a window ring that the last forward did not end");
    const int64_t have = w.kv.dropped_front() + w.kv.size() - rows;
    DI_CHECK(have >= 0, "rollback past a window ring's rows");
    const int64_t keep = std::min<int64_t>(cap, have);
    w.kv.restore_front(w.kv.dropped_front());
    w.kv.drop_back(rows);
    w.kv.drop_front(have - keep);
    w.pos.resize(static_cast<size_t>(keep));
    for (int64_t i = 0; i < keep; ++i) w.pos[static_cast<size_t>(i)] = length_ - keep + i;
  };
  for (auto& w : windows_) roll_back_ring(w, c.sliding_window - 1);
  for (auto& w : draft_rings_) roll_back_ring(w, c.sliding_window);
  for (size_t l = 0; l < sources_.size(); ++l) {
    if (!c.is_kv_source(static_cast<int64_t>(l))) continue;
    SourceState& s = sources_[l];
    const int64_t r = c.ratio(static_cast<int64_t>(l));
    if (r <= 0) continue;
    // Groups that a removed token completed go; the open group is rebuilt from the raw rows
    // kept before it.
    int64_t groups = rows;
    if (r > 1) {
      const int64_t held = s.buf_spare + s.buf_rows;
      groups = rows <= s.buf_rows ? 0 : (rows - s.buf_rows + r - 1) / r;
      const int64_t open = s.buf_rows - rows + groups * r;
      DI_CHECK(held - rows >= open, "rollback past the compressor's kept rows");
      s.buf_rows = open;
      s.buf_spare = held - rows - open;
      s.buf_kv.resize((held - rows) * c.head_dim, true);
      s.buf_gate.resize((held - rows) * c.head_dim, true);
    }
    DI_CHECK(groups <= s.n_comp, "rollback past the compressed entries");
    s.comp.drop_back(groups);
    s.n_comp -= groups;
    if (s.n_index > 0) {
      s.index_k.drop_back(groups);
      s.n_index -= groups;
    }
  }
  if (static_cast<int64_t>(engram_history_.size()) > length_) engram_history_.resize(static_cast<size_t>(length_));
}

void SequenceState::reset() {
  length_ = 0;
  const auto& c = *config_;
  kernels::Backend& be = *be_;
  for (auto& w : windows_) w = WindowRing{PackedRows(be, kernels::FakeQuant::kFp8Pow2, c.head_dim, 32), {}};
  for (auto& w : draft_rings_) w = WindowRing{PackedRows(be, kernels::FakeQuant::kFp8Pow2, c.head_dim, 32), {}};
  for (size_t l = 0; l < sources_.size(); ++l) {
    SourceState& s = sources_[l];
    s = SourceState{};
    if (!c.is_kv_source(static_cast<int64_t>(l))) continue;
    s.buf_kv.bind(be);
    s.buf_gate.bind(be);
    s.comp = PackedRows(be, kernels::FakeQuant::kFp4E4m3, c.head_dim, 16);
    s.index_k = PackedRows(be, kernels::FakeQuant::kFp4Pow2, c.index_head_dim, 32);
  }
  engram_history_.clear();
}

}  // namespace deepinfer::model
