#include "model/quantize.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"

namespace deepinfer::model {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

uint8_t* own_bytes(Weights& w, int64_t n) {
  w.owned_bytes.emplace_back(new uint8_t[static_cast<size_t>(std::max<int64_t>(n, 1))]);
  w.owned_byte_count += n;
  return w.owned_bytes.back().get();
}

}  // namespace

Mat quantize_matrix(const Mat& m, kernels::WeightFormat to, Weights& owner) {
  const int64_t R = m.rows, C = m.cols, sc_cols = ceil_div(C, 32);
  std::vector<float> x(static_cast<size_t>(R * C));
  for (int64_t r = 0; r < R; ++r) kernels::dequant_row(m, r, x.data() + r * C);
  Mat out;
  out.format = to;
  out.rows = R;
  out.cols = C;
  switch (to) {
    case kernels::WeightFormat::kF32: {
      owner.owned.emplace_back(new float[static_cast<size_t>(std::max<int64_t>(R * C, 1))]);
      owner.owned_floats += R * C;
      std::copy(x.begin(), x.end(), owner.owned.back().get());
      out.data = owner.owned.back().get();
      return out;
    }
    case kernels::WeightFormat::kBF16: {
      uint8_t* b = own_bytes(owner, R * C * 2);
      auto* p = reinterpret_cast<uint16_t*>(b);
      for (int64_t i = 0; i < R * C; ++i) p[i] = core::f32_to_bf16(x[static_cast<size_t>(i)]);
      out.data = b;
      return out;
    }
    case kernels::WeightFormat::kFP8Block32:
    case kernels::WeightFormat::kFP8Row32:
    case kernels::WeightFormat::kMXFP4: {
      const int64_t sr = to == kernels::WeightFormat::kFP8Block32 ? ceil_div(R, 32) : R;
      uint8_t* q = own_bytes(owner, R * (to == kernels::WeightFormat::kMXFP4 ? ceil_div(C, 2) : C));
      uint8_t* sc = own_bytes(owner, sr * sc_cols);
      kernels::quantize_weight_rows({.x = x.data(), .rows = R, .cols = C, .row0 = 0, .format = to, .codes = q, .scales = sc});
      out.data = q;
      out.scale = sc;
      return out;
    }
  }
  DI_CHECK(false, "unknown weight format");
  return out;
}

}  // namespace deepinfer::model
