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
  const int64_t so = scale_offset(r, n);
  out.resize(static_cast<size_t>(so + r.scales * n));
  const auto* values = static_cast<const uint8_t*>(t.data);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = ids[i];
    DI_CHECK(row >= 0 && row < t.rows, "Engram table staging: row id out of the table");
    std::memcpy(out.data() + i * r.values, values + row * r.values, static_cast<size_t>(r.values));
    if (r.scales > 0)
      std::memcpy(out.data() + so + i * r.scales, t.scale + row * r.scales, static_cast<size_t>(r.scales));
  }
  return staged_view(t, n, out.data());
}

}  // namespace deepinfer::model
