// Weight formats: exact dequantisation of one row, and storage size. The formats are those
// of DeepSeek's release checkpoints (FP8 e4m3 with ue8m0 32x32 block scales, MXFP4 experts,
// FP8 Engram rows) plus float32 and bf16.
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/backend.h"

namespace deepinfer::kernels {

namespace {
// Lookup tables: every e4m3 / e2m1 code and every e8m0 scale as float.
struct Tables {
  float e4m3[256], e8m0[256], e2m1[16];
  Tables() {
    for (int i = 0; i < 256; ++i) {
      e4m3[i] = core::e4m3_to_f32(static_cast<uint8_t>(i));
      e8m0[i] = core::e8m0_to_f32(static_cast<uint8_t>(i));
    }
    for (int i = 0; i < 16; ++i) e2m1[i] = core::e2m1_to_f32(static_cast<uint8_t>(i));
  }
};
const Tables& tables() {
  static const Tables t;
  return t;
}
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
}  // namespace

void dequant_row(const WeightView& w, int64_t row, float* out) {
  const Tables& t = tables();
  const int64_t k = w.cols, sc_cols = ceil_div(k, 32);
  switch (w.format) {
    case WeightFormat::kF32:
      std::memcpy(out, static_cast<const float*>(w.data) + row * k, static_cast<size_t>(k) * sizeof(float));
      return;
    case WeightFormat::kBF16: {
      const uint16_t* p = static_cast<const uint16_t*>(w.data) + row * k;
      for (int64_t j = 0; j < k; ++j) {
        uint32_t b = static_cast<uint32_t>(p[j]) << 16;
        std::memcpy(&out[j], &b, 4);
      }
      return;
    }
    case WeightFormat::kFP8Block32:
    case WeightFormat::kFP8Row32: {
      const uint8_t* q = static_cast<const uint8_t*>(w.data) + row * k;
      const uint8_t* s = w.scale + (w.format == WeightFormat::kFP8Block32 ? (row / 32) * sc_cols : row * sc_cols);
      for (int64_t j = 0; j < k; ++j) out[j] = t.e4m3[q[j]] * t.e8m0[s[j / 32]];
      return;
    }
    case WeightFormat::kMXFP4: {
      const uint8_t* q = static_cast<const uint8_t*>(w.data) + row * ceil_div(k, 2);
      const uint8_t* s = w.scale + row * sc_cols;
      for (int64_t j = 0; j < k; ++j) {
        const uint8_t byte = q[j / 2];
        const uint8_t code = (j % 2 == 0) ? (byte & 0xF) : static_cast<uint8_t>(byte >> 4);
        out[j] = t.e2m1[code] * t.e8m0[s[j / 32]];
      }
      return;
    }
  }
  DI_CHECK(false, "unknown weight format");
}

int64_t weight_bytes(const WeightView& w) {
  const int64_t r = w.rows, c = w.cols;
  switch (w.format) {
    case WeightFormat::kF32: return r * c * 4;
    case WeightFormat::kBF16: return r * c * 2;
    case WeightFormat::kFP8Block32: return r * c + ceil_div(r, 32) * ceil_div(c, 32);
    case WeightFormat::kFP8Row32: return r * c + r * ceil_div(c, 32);
    case WeightFormat::kMXFP4: return r * ceil_div(c, 2) + r * ceil_div(c, 32);
  }
  return 0;
}

}  // namespace deepinfer::kernels
