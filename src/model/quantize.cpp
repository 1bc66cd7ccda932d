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

// ue8m0 code of 2^ceil(log2(amax / max_code)); zero blocks get code 0.
uint8_t scale_code(float amax, float max_code) {
  if (!(amax > 0.0f)) return 0;
  const float s = core::pow2_ceil(amax / max_code);
  const int e = std::ilogb(s) + 127;
  return static_cast<uint8_t>(std::clamp(e, 0, 254));
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
    case kernels::WeightFormat::kFP8Row32: {
      const bool row = to == kernels::WeightFormat::kFP8Row32;
      const int64_t sr = row ? R : ceil_div(R, 32);
      uint8_t* q = own_bytes(owner, R * C);
      uint8_t* sc = own_bytes(owner, sr * sc_cols);
      for (int64_t br = 0; br < sr; ++br)
        for (int64_t bc = 0; bc < sc_cols; ++bc) {
          const int64_t r0 = row ? br : br * 32, r1 = row ? br + 1 : std::min(R, r0 + 32);
          const int64_t c0 = bc * 32, c1 = std::min(C, c0 + 32);
          float amax = 0.0f;
          for (int64_t r = r0; r < r1; ++r)
            for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(x[static_cast<size_t>(r * C + c)]));
          const uint8_t code = scale_code(amax, 448.0f);
          sc[br * sc_cols + bc] = code;
          const float s = core::e8m0_to_f32(code);
          for (int64_t r = r0; r < r1; ++r)
            for (int64_t c = c0; c < c1; ++c)
              q[r * C + c] = core::f32_to_e4m3(std::clamp(x[static_cast<size_t>(r * C + c)] / s, -448.0f, 448.0f));
        }
      out.data = q;
      out.scale = sc;
      return out;
    }
    case kernels::WeightFormat::kMXFP4: {
      const int64_t packed = ceil_div(C, 2);
      uint8_t* q = own_bytes(owner, R * packed);
      uint8_t* sc = own_bytes(owner, R * sc_cols);
      std::fill(q, q + R * packed, uint8_t{0});
      for (int64_t r = 0; r < R; ++r)
        for (int64_t bc = 0; bc < sc_cols; ++bc) {
          const int64_t c0 = bc * 32, c1 = std::min(C, c0 + 32);
          float amax = 0.0f;
          for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(x[static_cast<size_t>(r * C + c)]));
          const uint8_t code = scale_code(amax, 6.0f);
          sc[r * sc_cols + bc] = code;
          const float s = core::e8m0_to_f32(code);
          for (int64_t c = c0; c < c1; ++c) {
            const uint8_t e = core::f32_to_e2m1(std::clamp(x[static_cast<size_t>(r * C + c)] / s, -6.0f, 6.0f));
            q[r * packed + c / 2] = static_cast<uint8_t>(q[r * packed + c / 2] | (c % 2 == 0 ? e : e << 4));
          }
        }
      out.data = q;
      out.scale = sc;
      return out;
    }
  }
  DI_CHECK(false, "unknown weight format");
  return out;
}

}  // namespace deepinfer::model
