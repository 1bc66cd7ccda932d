// Scalar data types of checkpoints and of the model's quantised state.
//
// Purpose: names, sizes and exact conversions to float32 of every dtype a checkpoint can
// hold (F32, BF16, F16, F8_E4M3, F8_E8M0, I8/U8, FP4 e2m1 codes), and the rounding the
// reference's fake quantisers use (float32 -> e4m3fn round-to-nearest-even, e2m1 codes with
// the reference's tie rule, power-of-two ceil scales).
// Invariants: every conversion here is exact and bit-reproducible; no global state.
// Threading: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace deepinfer::core {

enum class DType : uint8_t { F32, BF16, F16, F8_E4M3, F8_E8M0, I8, U8, I32, I64 };

// Size of one element in bytes.
int dtype_size(DType t);
// safetensors spelling ("F32", "BF16", ...).
std::string_view dtype_name(DType t);
// Parses a safetensors dtype string; returns false when unknown.
bool parse_dtype(std::string_view s, DType* out);

float bf16_to_f32(uint16_t v);
uint16_t f32_to_bf16(float v);  // round to nearest even
float f16_to_f32(uint16_t v);
// e4m3fn: sign, 4 exponent bits (bias 7), 3 mantissa bits; 0x7F/0xFF are NaN, no inf.
float e4m3_to_f32(uint8_t v);
// float32 -> e4m3fn code, round to nearest even; |x| beyond the finite range rounds to NaN
// exactly as torch's float8_e4m3fn cast does (non-saturating).
uint8_t f32_to_e4m3(float x);
// Round float32 onto the e4m3fn grid (value of f32_to_e4m3).
inline float round_e4m3(float x) { return e4m3_to_f32(f32_to_e4m3(x)); }
// ue8m0: 2^(v - 127); 255 is NaN.
float e8m0_to_f32(uint8_t v);
// e2m1 code (sign in bit 3) -> value in {0, 0.5, 1, 1.5, 2, 3, 4, 6} with sign.
float e2m1_to_f32(uint8_t code);
// e2m1 code of a value already clamped to [-6, 6]. Ties at 0.25, 1.25, 2.5 and 5.0 round
// down (to the even code); at 0.75, 1.75 and 3.5 they round up. -0 gets the sign bit.
uint8_t f32_to_e2m1(float q);
// 2^ceil(log2 t) for float32 t > 0, by the exponent/mantissa fields (the ue8m0 rounding).
float pow2_ceil(float t);

}  // namespace deepinfer::core
