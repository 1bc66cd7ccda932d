// Counter-based random numbers for seeded weight generation (`--load-format random`).
//
// Purpose: value i of stream `seed` is a pure function of (seed, i) (SplitMix64 of the
// counter), so random weights are identical whatever the thread split. NumPy-compatible
// generators (PCG64) arrive with Engram's hashing.
// Threading: pure functions.
#pragma once

#include <cstdint>

namespace deepinfer::core {

uint64_t splitmix64(uint64_t x);
// Uniform in [0, 1) from (seed, counter).
double uniform01(uint64_t seed, uint64_t counter);
// Standard normal from (seed, counter) by Box-Muller over two uniforms.
float normal01(uint64_t seed, uint64_t counter);

}  // namespace deepinfer::core
