#include "sample/rng.h"

namespace deepinfer::sample {

namespace {

constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;    // round multipliers
constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;  // key schedule increments

inline void mul_hi_lo(uint32_t a, uint32_t b, uint32_t* hi, uint32_t* lo) {
  const uint64_t p = static_cast<uint64_t>(a) * b;
  *hi = static_cast<uint32_t>(p >> 32);
  *lo = static_cast<uint32_t>(p);
}

}  // namespace

std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k[0] += kWeyl0;
      k[1] += kWeyl1;
    }
    uint32_t hi0, lo0, hi1, lo1;
    mul_hi_lo(kMul0, c[0], &hi0, &lo0);
    mul_hi_lo(kMul1, c[2], &hi1, &lo1);
    c = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
  }
  return c;
}

double draw_uniform(uint64_t seed, uint64_t step, uint64_t stream) {
  const auto w = philox4x32_10({static_cast<uint32_t>(step), static_cast<uint32_t>(step >> 32),
                                static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32)},
                               {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
  const uint64_t bits = ((static_cast<uint64_t>(w[0]) << 32) | w[1]) >> 11;
  return static_cast<double>(bits) * (1.0 / 9007199254740992.0);
}

}  // namespace deepinfer::sample
