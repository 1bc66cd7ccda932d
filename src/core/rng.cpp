#include "core/rng.h"

#include <cmath>

namespace deepinfer::core {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

double uniform01(uint64_t seed, uint64_t counter) {
  uint64_t r = splitmix64(splitmix64(seed) ^ counter);
  return static_cast<double>(r >> 11) * (1.0 / 9007199254740992.0);
}

float normal01(uint64_t seed, uint64_t counter) {
  double u1 = uniform01(seed, 2 * counter), u2 = uniform01(seed, 2 * counter + 1);
  if (u1 < 1e-300) u1 = 1e-300;
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

}  // namespace deepinfer::core
