#include "model/engram_rows.h"

#include <cstring>
#include <string>

#include "core/error.h"

namespace deepinfer::model {

namespace {

struct RowBytes {
  int64_t values = 0, scales = 0;
};

RowBytes row_bytes(const kernels::WeightView& t) {
  const kernels::WeightView one{t.format, nullptr, nullptr, 1, t.cols};
  if (t.format == kernels::WeightFormat::kFP8Block32)
    throw Error("Engram table staging: format FP8 32x32 blocks shares scales across rows (table of " +
                std::to_string(t.rows) + " rows)");
  const int64_t scales = kernels::weight_scale_bytes(one);
  return {kernels::weight_bytes(one) - scales, scales};
}

int64_t scale_offset(const RowBytes& r, int64_t n) { return (r.values * n + 15) / 16 * 16; }
int64_t staged_bytes(const RowBytes& r, int64_t n) { return scale_offset(r, n) + r.scales * n; }
int64_t align256(int64_t b) { return (b + 255) / 256 * 256; }

// Rows ids[0..n) of t into out, laid out as staged_view reads them.
void pack_rows(const kernels::WeightView& t, const RowBytes& r, const int64_t* ids, int64_t n, uint8_t* out) {
  const int64_t so = scale_offset(r, n);
  const auto* values = static_cast<const uint8_t*>(t.data);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = ids[i];
    DI_CHECK(row >= 0 && row < t.rows, "Engram table staging: row id out of the table");
    std::memcpy(out + i * r.values, values + row * r.values, static_cast<size_t>(r.values));
    if (r.scales > 0) std::memcpy(out + so + i * r.scales, t.scale + row * r.scales, static_cast<size_t>(r.scales));
  }
}

}  // namespace

int64_t table_row_bytes(const kernels::WeightView& t) {
  const RowBytes r = row_bytes(t);
  return r.values + r.scales;
}

kernels::WeightView staged_view(const kernels::WeightView& t, int64_t n, const void* base) {
  const RowBytes r = row_bytes(t);
  const auto* b = static_cast<const uint8_t*>(base);
  return {t.format, b, r.scales > 0 ? b + scale_offset(r, n) : nullptr, n, t.cols};
}

kernels::WeightView stage_table_rows(const kernels::WeightView& t, const int64_t* ids, int64_t n, std::vector<uint8_t>& out) {
  const RowBytes r = row_bytes(t);
  out.resize(static_cast<size_t>(staged_bytes(r, n)));
  pack_rows(t, r, ids, n, out.data());
  return staged_view(t, n, out.data());
}

EngramStep::EngramStep(std::vector<kernels::WeightView> tables, bool staged, int64_t cols, int64_t n_pad)
    : tables_(std::move(tables)), staged_(staged), cols_(cols), n_pad_(n_pad) {
  const int64_t ids = align256(n_pad * cols * static_cast<int64_t>(sizeof(int64_t)));
  for (const kernels::WeightView& t : tables_) {
    if (staged_) {
      ids_at_.push_back(0);
      rows_at_.push_back(ids + bytes_);
      bytes_ += align256(staged_bytes(row_bytes(t), n_pad * cols));
    } else {
      ids_at_.push_back(bytes_);
      bytes_ += ids;
    }
  }
  if (staged_ && !tables_.empty()) bytes_ += ids;
}

void EngramStep::pack(const int64_t* hash_ids, int64_t n, uint8_t* out) const {
  DI_CHECK(n >= 0 && n <= n_pad_, "Engram step: more rows than the step holds");
  const int64_t L = static_cast<int64_t>(tables_.size()), m = n_pad_ * cols_;
  if (m == 0) return;  // a step with no rows (a replayed chunk whose tail is empty)
  std::vector<int64_t> layer(static_cast<size_t>(m), 0);  // one layer's hash ids, padding rows 0
  for (int64_t j = 0; j < L; ++j) {
    const kernels::WeightView& t = tables_[static_cast<size_t>(j)];
    for (int64_t i = 0; i < n; ++i)
      for (int64_t k = 0; k < cols_; ++k) {
        const int64_t row = hash_ids[(i * L + j) * cols_ + k];
        DI_CHECK(row >= 0 && row < t.rows, "engram hash id out of the table");
        layer[static_cast<size_t>(i * cols_ + k)] = row;
      }
    if (staged_) pack_rows(t, row_bytes(t), layer.data(), m, out + rows_at_[static_cast<size_t>(j)]);
    else std::memcpy(out + ids_at_[static_cast<size_t>(j)], layer.data(), static_cast<size_t>(m) * sizeof(int64_t));
  }
  if (staged_ && L > 0) {
    for (int64_t i = 0; i < m; ++i) layer[static_cast<size_t>(i)] = i;
    std::memcpy(out, layer.data(), static_cast<size_t>(m) * sizeof(int64_t));
  }
}

const int64_t* EngramStep::ids(size_t j, const uint8_t* base) const {
  return reinterpret_cast<const int64_t*>(base + ids_at_.at(j));
}

kernels::WeightView EngramStep::table(size_t j, const uint8_t* base) const {
  if (!staged_) return tables_.at(j);
  return staged_view(tables_.at(j), n_pad_ * cols_, base + rows_at_.at(j));
}

}  // namespace deepinfer::model
