// Weight formats: exact dequantisation of one row, and storage size. The formats are those
// of DeepSeek's release checkpoints (FP8 e4m3 with ue8m0 32x32 block scales, MXFP4 experts,
// FP8 Engram rows) plus float32 and bf16.
#include <immintrin.h>

#include <algorithm>
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

// Branch-free conversions the compiler vectorises (exactly the table values; NaN codes give
// NaN): e4m3 normal = sign | (exp + 120) << 23 | mant << 20, subnormal = mant * 2^-9.
inline float e4m3_bits(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80) << 24, e = (b >> 3) & 0xFu, m = b & 7u;
  uint32_t nbits = sign | ((e + 120u) << 23) | (m << 20);
  if (e == 15 && m == 7) nbits = sign | 0x7FC00000u;
  float normal, sub = static_cast<float>(m) * 0x1p-9f;
  std::memcpy(&normal, &nbits, 4);
  return e ? normal : (sign ? -sub : sub);
}

// e2m1 code (sign in bit 3) -> value: c < 2: c / 2; else (1 + (c & 1) / 2) * 2^((c >> 1) - 1).
inline float e2m1_bits(uint32_t code) {
  const uint32_t c = code & 7u, sign = (code & 8u) << 28;
  const uint32_t nbits = sign | (((c >> 1) + 126u) << 23) | ((c & 1u) << 22);
  float normal;
  std::memcpy(&normal, &nbits, 4);
  const float sub = (c & 1u) ? 0.5f : 0.0f;
  return c >= 2 ? normal : ((sign && c) ? -sub : sub);
}

void dequant_fp8_scalar(const uint8_t* q, float sc, int64_t n, float* out) {
  for (int64_t j = 0; j < n; ++j) out[j] = e4m3_bits(q[j]) * sc;
}

void dequant_fp4_scalar(const uint8_t* q, float sc, int64_t begin, int64_t end, float* out) {
  for (int64_t j = begin; j < end; ++j) out[j] = e2m1_bits((j % 2 == 0) ? (q[j / 2] & 0xFu) : static_cast<uint32_t>(q[j / 2] >> 4)) * sc;
}

// AVX2, a whole row at a time: e4m3 by bit arithmetic, e2m1 through a 16-entry byte table of
// twice the magnitude. Each lane gives exactly the scalar value.
__attribute__((target("avx2"))) inline __m256 e4m3x8_avx2(const uint8_t* p, __m256 scale) {
  const __m256 sub_mul = _mm256_set1_ps(0x1p-9f);
  const __m256i x7f = _mm256_set1_epi32(0x7F), bias = _mm256_set1_epi32(120 << 23), eight = _mm256_set1_epi32(8),
                qnan = _mm256_set1_epi32(0x7FC00000);
  __m256i v8 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  __m256i em = _mm256_and_si256(v8, x7f);
  __m256i sign = _mm256_slli_epi32(_mm256_andnot_si256(x7f, v8), 24);
  __m256i normal = _mm256_add_epi32(_mm256_slli_epi32(em, 20), bias);
  normal = _mm256_blendv_epi8(normal, qnan, _mm256_cmpeq_epi32(em, x7f));
  __m256 sub = _mm256_mul_ps(_mm256_cvtepi32_ps(em), sub_mul);
  __m256 v = _mm256_blendv_ps(_mm256_castsi256_ps(normal), sub, _mm256_castsi256_ps(_mm256_cmpgt_epi32(eight, em)));
  return _mm256_mul_ps(_mm256_or_ps(v, _mm256_castsi256_ps(sign)), scale);
}

__attribute__((target("avx2"))) void dequant_fp8_row_avx2(const uint8_t* q, const uint8_t* s, int64_t k, float* out) {
  const float* e8m0 = tables().e8m0;
  for (int64_t b = 0; b < k; b += 32) {
    const float sc = e8m0[s[b / 32]];
    const __m256 scale = _mm256_set1_ps(sc);
    const int64_t e = std::min<int64_t>(k, b + 32);
    int64_t j = b;
    for (; j + 8 <= e; j += 8) _mm256_storeu_ps(out + j, e4m3x8_avx2(q + j, scale));
    dequant_fp8_scalar(q + j, sc, e - j, out + j);
  }
}

__attribute__((target("avx2"))) void dequant_fp4_row_avx2(const uint8_t* q, const uint8_t* s, int64_t k, float* out) {
  const float* e8m0 = tables().e8m0;
  const __m128i lut = _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, 1, 2, 3, 4, 6, 8, 12);
  const __m128i low = _mm_set1_epi8(0x0F), signbit = _mm_set1_epi8(0x08);
  for (int64_t b = 0; b < k; b += 32) {
    const float sc = e8m0[s[b / 32]];
    const __m256 half_scale = _mm256_set1_ps(sc * 0.5f);
    const int64_t e = std::min<int64_t>(k, b + 32);
    int64_t j = b;
    for (; j + 16 <= e; j += 16) {
      __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + j / 2));  // 8 bytes = 16 codes
      __m128i lo = _mm_and_si128(bytes, low), hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), low);
      __m128i codes = _mm_unpacklo_epi8(lo, hi);  // even, odd, even, odd, ...
      __m128i mag = _mm_shuffle_epi8(lut, codes);
      __m128i neg = _mm_cmpeq_epi8(_mm_and_si128(codes, signbit), signbit);
      __m128i val = _mm_sub_epi8(_mm_xor_si128(mag, neg), neg);  // negate where the sign bit is set
      __m256 f0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(val));
      __m256 f1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(val, 8)));
      _mm256_storeu_ps(out + j, _mm256_mul_ps(f0, half_scale));
      _mm256_storeu_ps(out + j + 8, _mm256_mul_ps(f1, half_scale));
    }
    dequant_fp4_scalar(q, sc, j, e, out);
  }
}

// Fused dequantise-and-dot of one x row with one quantised weight row, with exactly the
// arithmetic of cpu::dot over the dequantised row: 16 lane accumulators (here two 8-wide
// halves), products added in order, the same tail and reduction tree. Returns false when the
// format has no fused path.
__attribute__((target("avx2"))) float dot_fp8_avx2(const float* x, const uint8_t* q, const uint8_t* s, int64_t k) {
  const float* e8m0 = tables().e8m0;
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= k; i += 16) {
    const __m256 scale = _mm256_set1_ps(e8m0[s[i / 32]]);
    a0 = _mm256_add_ps(a0, _mm256_mul_ps(_mm256_loadu_ps(x + i), e4m3x8_avx2(q + i, scale)));
    a1 = _mm256_add_ps(a1, _mm256_mul_ps(_mm256_loadu_ps(x + i + 8), e4m3x8_avx2(q + i + 8, scale)));
  }
  float acc[16];
  _mm256_storeu_ps(acc, a0);
  _mm256_storeu_ps(acc + 8, a1);
  for (int j = 0; i + j < k; ++j) acc[j] += x[i + j] * (e4m3_bits(q[i + j]) * e8m0[s[(i + j) / 32]]);
  for (int w = 8; w > 0; w /= 2)
    for (int j = 0; j < w; ++j) acc[j] += acc[j + w];
  return acc[0];
}

__attribute__((target("avx2"))) float dot_fp4_avx2(const float* x, const uint8_t* q, const uint8_t* s, int64_t k) {
  const float* e8m0 = tables().e8m0;
  const __m128i lut = _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, 1, 2, 3, 4, 6, 8, 12);
  const __m128i low = _mm_set1_epi8(0x0F), signbit = _mm_set1_epi8(0x08);
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= k; i += 16) {
    const __m256 half_scale = _mm256_set1_ps(e8m0[s[i / 32]] * 0.5f);
    __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + i / 2));
    __m128i lo = _mm_and_si128(bytes, low), hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), low);
    __m128i codes = _mm_unpacklo_epi8(lo, hi);
    __m128i mag = _mm_shuffle_epi8(lut, codes);
    __m128i neg = _mm_cmpeq_epi8(_mm_and_si128(codes, signbit), signbit);
    __m128i val = _mm_sub_epi8(_mm_xor_si128(mag, neg), neg);
    __m256 w0 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(val)), half_scale);
    __m256 w1 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(val, 8))), half_scale);
    a0 = _mm256_add_ps(a0, _mm256_mul_ps(_mm256_loadu_ps(x + i), w0));
    a1 = _mm256_add_ps(a1, _mm256_mul_ps(_mm256_loadu_ps(x + i + 8), w1));
  }
  float acc[16];
  _mm256_storeu_ps(acc, a0);
  _mm256_storeu_ps(acc + 8, a1);
  for (int j = 0; i + j < k; ++j) {
    const int64_t c = i + j;
    const uint32_t code = (c % 2 == 0) ? (q[c / 2] & 0xFu) : static_cast<uint32_t>(q[c / 2] >> 4);
    acc[j] += x[c] * (e2m1_bits(code) * e8m0[s[c / 32]]);
  }
  for (int w = 8; w > 0; w /= 2)
    for (int j = 0; j < w; ++j) acc[j] += acc[j + w];
  return acc[0];
}

bool have_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
}

void dequant_fp8_row(const uint8_t* q, const uint8_t* s, int64_t k, float* out) {
  if (have_avx2()) return dequant_fp8_row_avx2(q, s, k, out);
  for (int64_t b = 0; b < k; b += 32) dequant_fp8_scalar(q + b, tables().e8m0[s[b / 32]], std::min<int64_t>(k, b + 32) - b, out + b);
}

void dequant_fp4_row(const uint8_t* q, const uint8_t* s, int64_t k, float* out) {
  if (have_avx2()) return dequant_fp4_row_avx2(q, s, k, out);
  for (int64_t b = 0; b < k; b += 32) dequant_fp4_scalar(q, tables().e8m0[s[b / 32]], b, std::min<int64_t>(k, b + 32), out);
}

__attribute__((target_clones("avx512f", "avx2", "default")))
void widen_bf16_row(const uint16_t* p, int64_t k, float* out) {
  for (int64_t j = 0; j < k; ++j) {
    const uint32_t b = static_cast<uint32_t>(p[j]) << 16;
    std::memcpy(&out[j], &b, 4);
  }
}
}  // namespace

void dequant_row(const WeightView& w, int64_t row, float* out) {
  const int64_t k = w.cols, sc_cols = ceil_div(k, 32);
  switch (w.format) {
    case WeightFormat::kF32:
      std::memcpy(out, static_cast<const float*>(w.data) + row * k, static_cast<size_t>(k) * sizeof(float));
      return;
    case WeightFormat::kBF16:
      widen_bf16_row(static_cast<const uint16_t*>(w.data) + row * k, k, out);
      return;
    case WeightFormat::kFP8Block32:
    case WeightFormat::kFP8Row32:
      dequant_fp8_row(static_cast<const uint8_t*>(w.data) + row * k,
                      w.scale + (w.format == WeightFormat::kFP8Block32 ? (row / 32) * sc_cols : row * sc_cols), k, out);
      return;
    case WeightFormat::kMXFP4:
      dequant_fp4_row(static_cast<const uint8_t*>(w.data) + row * ceil_div(k, 2), w.scale + row * sc_cols, k, out);
      return;
  }
  DI_CHECK(false, "unknown weight format");
}

bool dot_quantized(const float* x, const WeightView& w, int64_t row, float* out) {
  if (!have_avx2()) return false;
  const int64_t k = w.cols, sc_cols = ceil_div(k, 32);
  switch (w.format) {
    case WeightFormat::kFP8Block32:
      *out = dot_fp8_avx2(x, static_cast<const uint8_t*>(w.data) + row * k, w.scale + (row / 32) * sc_cols, k);
      return true;
    case WeightFormat::kFP8Row32:
      *out = dot_fp8_avx2(x, static_cast<const uint8_t*>(w.data) + row * k, w.scale + row * sc_cols, k);
      return true;
    case WeightFormat::kMXFP4:
      *out = dot_fp4_avx2(x, static_cast<const uint8_t*>(w.data) + row * ceil_div(k, 2), w.scale + row * sc_cols, k);
      return true;
    default:
      return false;
  }
}

int64_t weight_scale_bytes(const WeightView& w) {
  const int64_t r = w.rows, c = w.cols;
  switch (w.format) {
    case WeightFormat::kF32:
    case WeightFormat::kBF16: return 0;
    case WeightFormat::kFP8Block32: return ceil_div(r, 32) * ceil_div(c, 32);
    case WeightFormat::kFP8Row32:
    case WeightFormat::kMXFP4: return r * ceil_div(c, 32);
  }
  return 0;
}

int64_t weight_bytes(const WeightView& w) {
  const int64_t r = w.rows, c = w.cols;
  int64_t values = 0;
  switch (w.format) {
    case WeightFormat::kF32: values = r * c * 4; break;
    case WeightFormat::kBF16: values = r * c * 2; break;
    case WeightFormat::kFP8Block32:
    case WeightFormat::kFP8Row32: values = r * c; break;
    case WeightFormat::kMXFP4: values = r * ceil_div(c, 2); break;
  }
  return values + weight_scale_bytes(w);
}

}  // namespace deepinfer::kernels
