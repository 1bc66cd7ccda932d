#include "model/state.h"

#include <cstring>

#include "core/error.h"

namespace deepinfer::model {

PackedRows::PackedRows(kernels::FakeQuant kind, int64_t dim, int64_t block)
    : kind_(kind), dim_(dim), block_(block), packed_(block > 0 && dim % block == 0) {
  code_bytes_ = kind == kernels::FakeQuant::kFp8Pow2 ? dim : dim / 2;
  scale_bytes_ = packed_ ? dim / block : 0;
}

uint8_t* PackedRows::code_slot(int64_t rows) {
  if (!packed_) return nullptr;
  codes_.resize(static_cast<size_t>((n_ + rows) * code_bytes_));
  return codes_.data() + n_ * code_bytes_;
}

uint8_t* PackedRows::scale_slot(int64_t rows) {
  if (!packed_) return nullptr;
  scales_.resize(static_cast<size_t>((n_ + rows) * scale_bytes_));
  return scales_.data() + n_ * scale_bytes_;
}

void PackedRows::append(const float* values, int64_t rows) {
  if (packed_) {
    DI_CHECK(static_cast<int64_t>(codes_.size()) >= (n_ + rows) * code_bytes_, "packed rows appended without their codes");
  } else {
    f32_.insert(f32_.end(), values, values + rows * dim_);
  }
  n_ += rows;
  if (packed_) {
    codes_.resize(static_cast<size_t>(n_ * code_bytes_));
    scales_.resize(static_cast<size_t>(n_ * scale_bytes_));
  }
}

void PackedRows::drop_front(int64_t rows) {
  if (rows <= 0) return;
  DI_CHECK(rows <= n_, "drop_front past the end");
  if (packed_) {
    codes_.erase(codes_.begin(), codes_.begin() + rows * code_bytes_);
    scales_.erase(scales_.begin(), scales_.begin() + rows * scale_bytes_);
  } else {
    f32_.erase(f32_.begin(), f32_.begin() + rows * dim_);
  }
  n_ -= rows;
}

void PackedRows::read(int64_t row0, int64_t rows, float* out) const {
  if (rows <= 0) return;
  DI_CHECK(row0 >= 0 && row0 + rows <= n_, "read past the stored rows");
  if (!packed_) {
    std::memcpy(out, f32_.data() + row0 * dim_, static_cast<size_t>(rows * dim_) * sizeof(float));
    return;
  }
  kernels::dequant_fake_quant(kind_, codes_.data() + row0 * code_bytes_, scales_.data() + row0 * scale_bytes_, rows, dim_,
                              block_, out);
}

int64_t PackedRows::bytes() const {
  return packed_ ? static_cast<int64_t>(codes_.size() + scales_.size()) : static_cast<int64_t>(f32_.size() * sizeof(float));
}

SequenceState::SequenceState(const loader::ModelConfig& c)
    : windows_(static_cast<size_t>(c.num_hidden_layers)), config_(&c), sources_(static_cast<size_t>(c.num_hidden_layers)) {
  reset();
}

int64_t SequenceState::bytes() const {
  int64_t b = 0;
  for (const auto& w : windows_) b += w.kv.bytes() + static_cast<int64_t>(w.pos.size() * sizeof(int64_t));
  for (const auto& s : sources_)
    b += static_cast<int64_t>((s.buf_kv.size() + s.buf_gate.size()) * sizeof(float)) + s.comp.bytes() + s.index_k.bytes();
  b += static_cast<int64_t>(engram_history_.size() * sizeof(int32_t));
  return b;
}

void SequenceState::reset() {
  length_ = 0;
  const auto& c = *config_;
  for (auto& w : windows_) w = WindowRing{PackedRows(kernels::FakeQuant::kFp8Pow2, c.head_dim, 32), {}};
  for (auto& s : sources_)
    s = SourceState{{}, {}, 0, PackedRows(kernels::FakeQuant::kFp4E4m3, c.head_dim, 16), 0,
                    PackedRows(kernels::FakeQuant::kFp4Pow2, c.index_head_dim, 32), 0};
  engram_history_.clear();
}

}  // namespace deepinfer::model
