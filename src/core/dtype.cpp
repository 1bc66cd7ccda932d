#include "core/dtype.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace deepinfer::core {

int dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::BF16: return 2;
    case DType::F16: return 2;
    case DType::F8_E4M3: return 1;
    case DType::F8_E8M0: return 1;
    case DType::I8: return 1;
    case DType::U8: return 1;
    case DType::I32: return 4;
    case DType::I64: return 8;
  }
  return 0;
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::BF16: return "BF16";
    case DType::F16: return "F16";
    case DType::F8_E4M3: return "F8_E4M3";
    case DType::F8_E8M0: return "F8_E8M0";
    case DType::I8: return "I8";
    case DType::U8: return "U8";
    case DType::I32: return "I32";
    case DType::I64: return "I64";
  }
  return "?";
}

bool parse_dtype(std::string_view s, DType* out) {
  static constexpr DType kAll[] = {DType::F32, DType::BF16, DType::F16, DType::F8_E4M3, DType::F8_E8M0,
                                   DType::I8,  DType::U8,   DType::I32, DType::I64};
  for (DType t : kAll) {
    if (dtype_name(t) == s) {
      *out = t;
      return true;
    }
  }
  return false;
}

static float bits_to_f32(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
static uint32_t f32_to_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

float bf16_to_f32(uint16_t v) { return bits_to_f32(static_cast<uint32_t>(v) << 16); }

uint16_t f32_to_bf16(float v) {
  uint32_t b = f32_to_bits(v);
  if (std::isnan(v)) return static_cast<uint16_t>((b >> 16) | 0x40);
  uint32_t lsb = (b >> 16) & 1u;
  b += 0x7FFFu + lsb;
  return static_cast<uint16_t>(b >> 16);
}

float f16_to_f32(uint16_t v) {
  uint32_t sign = (v >> 15) & 1u, exp = (v >> 10) & 0x1Fu, man = v & 0x3FFu;
  float mag;
  if (exp == 0) {
    mag = std::ldexp(static_cast<float>(man), -24);
  } else if (exp == 31) {
    mag = man ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  } else {
    mag = std::ldexp(static_cast<float>(man | 0x400u), static_cast<int>(exp) - 25);
  }
  return sign ? -mag : mag;
}

float e4m3_to_f32(uint8_t v) {
  uint32_t sign = (v >> 7) & 1u, exp = (v >> 3) & 0xFu, man = v & 0x7u;
  float mag;
  if (exp == 0xF && man == 0x7) {
    mag = std::numeric_limits<float>::quiet_NaN();
  } else if (exp == 0) {
    mag = std::ldexp(static_cast<float>(man), -9);
  } else {
    mag = std::ldexp(static_cast<float>(man | 0x8u), static_cast<int>(exp) - 10);
  }
  return sign ? -mag : mag;
}

uint8_t f32_to_e4m3(float x) {
  uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  float a = std::fabs(x);
  if (std::isnan(a) || a >= 480.0f) return static_cast<uint8_t>(sign | 0x7F);
  // Scale onto an integer grid where the step is 1, round half to even, rebuild.
  int e;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  int step_exp = (a < 0.015625f) ? -9 : (e - 1) - 3;  // subnormal step 2^-9, else 2^(E-3)
  float scaled = std::ldexp(a, -step_exp);            // exact
  float r = std::nearbyint(scaled);                   // default rounding mode: to nearest even
  float v = std::ldexp(r, step_exp);
  if (v > 448.0f) return static_cast<uint8_t>(sign | 0x7F);
  if (v == 0.0f) return sign;
  int ve;
  std::frexp(v, &ve);
  int E = ve - 1;  // v = 1.mmm * 2^E
  if (E < -6) {    // subnormal: v = man * 2^-9
    uint8_t man = static_cast<uint8_t>(std::ldexp(v, 9));
    return static_cast<uint8_t>(sign | man);
  }
  uint8_t man = static_cast<uint8_t>(std::ldexp(v, 3 - E) - 8.0f);
  return static_cast<uint8_t>(sign | ((E + 7) << 3) | man);
}

float e8m0_to_f32(uint8_t v) {
  if (v == 255) return std::numeric_limits<float>::quiet_NaN();
  return std::ldexp(1.0f, static_cast<int>(v) - 127);
}

float e2m1_to_f32(uint8_t code) {
  static constexpr float kTable[16] = {0.0f, 0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                       0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
  return kTable[code & 0xF];
}

uint8_t f32_to_e2m1(float q) {
  // Thresholds: boundary itself where ties round up, the next float above it where ties
  // round down (the reference counts how many thresholds |q| reaches).
  static const float kThresholds[7] = {
      std::nextafter(0.25f, 1.0f), 0.75f, std::nextafter(1.25f, 2.0f), 1.75f,
      std::nextafter(2.5f, 3.0f),  3.5f,  std::nextafter(5.0f, 6.0f)};
  float m = std::fabs(q);
  uint8_t code = 0;
  for (float t : kThresholds) code = static_cast<uint8_t>(code + (m >= t ? 1 : 0));
  return static_cast<uint8_t>(code | (std::signbit(q) ? 0x8 : 0x0));
}

float pow2_ceil(float t) {
  uint32_t b = f32_to_bits(t);
  int exponent = static_cast<int>((b >> 23) & 0xFFu);
  int k = exponent - 127 + ((b & 0x7FFFFFu) != 0 ? 1 : 0);
  return std::ldexp(1.0f, k);
}

}  // namespace deepinfer::core
