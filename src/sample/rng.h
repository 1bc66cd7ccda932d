// Counter-based random numbers for sampling: Philox4x32-10 (Salmon et al., SC'11).
//
// Purpose: the uniform used to draw a token is a pure function of (seed, step, stream):
// key = seed (two 32-bit words), counter = (step lo, step hi, stream lo, stream hi). Nothing
// is consumed or advanced, so a draw never depends on batch composition, thread count, or
// how many draws other requests made.
// Invariants: philox4x32_10 matches Random123's published known-answer vectors.
// Threading: pure functions.
#pragma once

#include <array>
#include <cstdint>

namespace deepinfer::sample {

// One Philox4x32 block with 10 rounds: ctr [4] u32, key [2] u32 -> [4] u32.
std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> ctr, std::array<uint32_t, 2> key);

// Uniform double in [0, 1) with 53 random bits: ((w0 << 32 | w1) >> 11) * 2^-53, where w0, w1 are
// the first two words of philox4x32_10({step, stream}, seed).
double draw_uniform(uint64_t seed, uint64_t step, uint64_t stream = 0);

// Speculative decoding's acceptance test of the draft token at output position `step`: a
// uniform independent of draw_uniform's, draw_uniform(seed, step, stream | kAcceptStream)
// (completion indices stay far below 2^63).
inline constexpr uint64_t kAcceptStream = uint64_t{1} << 63;
inline double accept_uniform(uint64_t seed, uint64_t step, uint64_t stream = 0) {
  return draw_uniform(seed, step, stream | kAcceptStream);
}

}  // namespace deepinfer::sample
