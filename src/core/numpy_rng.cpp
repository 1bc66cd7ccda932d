#include "core/numpy_rng.h"

#include <string>

#include "core/error.h"

namespace deepinfer::core {

namespace {

__extension__ typedef unsigned __int128 u128;

// SeedSequence hashing constants (numpy/random/bit_generator.pyx).
constexpr uint32_t kInitA = 0x43b0d7e5u;
constexpr uint32_t kMultA = 0x931e8875u;
constexpr uint32_t kInitB = 0x8b51f9ddu;
constexpr uint32_t kMultB = 0x58f38dedu;
constexpr uint32_t kMixMultL = 0xca01f9ddu;
constexpr uint32_t kMixMultR = 0x4973f715u;
constexpr unsigned kXShift = 16;

// PCG's default 128-bit LCG multiplier (PCG_DEFAULT_MULTIPLIER_128).
constexpr uint64_t kPcgMultHi = 0x2360ed051fc65da4ull;
constexpr uint64_t kPcgMultLo = 0x4385df649fccf645ull;

constexpr u128 make_u128(uint64_t hi, uint64_t lo) { return (static_cast<u128>(hi) << 64) | lo; }
constexpr uint64_t hi64(u128 x) { return static_cast<uint64_t>(x >> 64); }
constexpr uint64_t lo64(u128 x) { return static_cast<uint64_t>(x); }

// hashmix: the multiplier `hash_const` evolves across calls within one mixing pass.
uint32_t hashmix(uint32_t value, uint32_t* hash_const) {
  value ^= *hash_const;
  *hash_const *= kMultA;
  value *= *hash_const;
  return value ^ (value >> kXShift);
}

uint32_t mix(uint32_t x, uint32_t y) {
  uint32_t r = kMixMultL * x - kMixMultR * y;
  return r ^ (r >> kXShift);
}

uint64_t rotr64(uint64_t v, unsigned r) { return r == 0 ? v : (v >> r) | (v << (64 - r)); }

// Lemire's method on 32-bit draws for an inclusive range rng < 2^32 - 1.
uint32_t bounded_lemire_u32(Pcg64& gen, uint32_t rng) {
  const uint32_t rng_excl = rng + 1;
  uint64_t m = static_cast<uint64_t>(gen.next_u32()) * rng_excl;
  uint32_t leftover = static_cast<uint32_t>(m);
  if (leftover < rng_excl) {
    const uint32_t threshold = static_cast<uint32_t>(UINT32_MAX - rng) % rng_excl;  // 2^32 mod rng_excl
    while (leftover < threshold) {
      m = static_cast<uint64_t>(gen.next_u32()) * rng_excl;
      leftover = static_cast<uint32_t>(m);
    }
  }
  return static_cast<uint32_t>(m >> 32);
}

// Lemire's method on 64-bit draws for an inclusive range rng < 2^64 - 1.
uint64_t bounded_lemire_u64(Pcg64& gen, uint64_t rng) {
  const uint64_t rng_excl = rng + 1;
  u128 m = static_cast<u128>(gen.next_u64()) * rng_excl;
  uint64_t leftover = lo64(m);
  if (leftover < rng_excl) {
    const uint64_t threshold = (UINT64_MAX - rng) % rng_excl;  // 2^64 mod rng_excl
    while (leftover < threshold) {
      m = static_cast<u128>(gen.next_u64()) * rng_excl;
      leftover = lo64(m);
    }
  }
  return hi64(m);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// SeedSequence

SeedSequence::SeedSequence(uint64_t entropy) {
  // The entropy as little-endian uint32 words; 0 is one zero word.
  std::vector<uint32_t> words;
  do {
    words.push_back(static_cast<uint32_t>(entropy));
    entropy >>= 32;
  } while (entropy != 0);

  uint32_t hash_const = kInitA;
  for (size_t i = 0; i < kPoolSize; ++i) pool_[i] = hashmix(i < words.size() ? words[i] : 0u, &hash_const);
  for (size_t src = 0; src < kPoolSize; ++src)
    for (size_t dst = 0; dst < kPoolSize; ++dst)
      if (src != dst) pool_[dst] = mix(pool_[dst], hashmix(pool_[src], &hash_const));
  // Entropy beyond the pool (never for a uint64 seed with pool size 4, kept for clarity).
  for (size_t src = kPoolSize; src < words.size(); ++src)
    for (size_t dst = 0; dst < kPoolSize; ++dst) pool_[dst] = mix(pool_[dst], hashmix(words[src], &hash_const));
}

std::vector<uint32_t> SeedSequence::generate_state_u32(size_t n_words) const {
  std::vector<uint32_t> out(n_words);
  uint32_t hash_const = kInitB;
  for (size_t i = 0; i < n_words; ++i) {
    uint32_t v = pool_[i % kPoolSize] ^ hash_const;
    hash_const *= kMultB;
    v *= hash_const;
    out[i] = v ^ (v >> kXShift);
  }
  return out;
}

std::vector<uint64_t> SeedSequence::generate_state_u64(size_t n_words) const {
  const std::vector<uint32_t> w = generate_state_u32(2 * n_words);
  std::vector<uint64_t> out(n_words);
  for (size_t k = 0; k < n_words; ++k) out[k] = static_cast<uint64_t>(w[2 * k]) | (static_cast<uint64_t>(w[2 * k + 1]) << 32);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Pcg64

Pcg64::Pcg64(const SeedSequence& seed_seq) {
  const std::vector<uint64_t> s = seed_seq.generate_state_u64(4);
  const u128 init_state = make_u128(s[0], s[1]);
  const u128 init_seq = make_u128(s[2], s[3]);
  const u128 inc = (init_seq << 1) | 1u;
  inc_hi_ = hi64(inc);
  inc_lo_ = lo64(inc);
  state_hi_ = state_lo_ = 0;
  step();
  const u128 st = make_u128(state_hi_, state_lo_) + init_state;
  state_hi_ = hi64(st);
  state_lo_ = lo64(st);
  step();
}

void Pcg64::step() {
  const u128 st = make_u128(state_hi_, state_lo_) * make_u128(kPcgMultHi, kPcgMultLo) + make_u128(inc_hi_, inc_lo_);
  state_hi_ = hi64(st);
  state_lo_ = lo64(st);
}

uint64_t Pcg64::next_u64() {
  step();
  // XSL-RR: xor the halves, rotate right by the top 6 bits of the new state.
  return rotr64(state_hi_ ^ state_lo_, static_cast<unsigned>(state_hi_ >> 58));
}

uint32_t Pcg64::next_u32() {
  if (has_u32_) {
    has_u32_ = false;
    return u32_buf_;
  }
  const uint64_t v = next_u64();
  has_u32_ = true;
  u32_buf_ = static_cast<uint32_t>(v >> 32);
  return static_cast<uint32_t>(v);
}

Pcg64State Pcg64::state() const { return Pcg64State{state_hi_, state_lo_, inc_hi_, inc_lo_}; }

// ---------------------------------------------------------------------------------------------
// Generator.integers

void bounded_u64_fill(Pcg64& gen, uint64_t off, uint64_t rng, std::span<uint64_t> out) {
  if (rng == 0) {
    for (uint64_t& v : out) v = off;
  } else if (rng == UINT32_MAX) {
    for (uint64_t& v : out) v = off + gen.next_u32();
  } else if (rng < UINT32_MAX) {
    for (uint64_t& v : out) v = off + bounded_lemire_u32(gen, static_cast<uint32_t>(rng));
  } else if (rng == UINT64_MAX) {
    for (uint64_t& v : out) v = off + gen.next_u64();
  } else {
    for (uint64_t& v : out) v = off + bounded_lemire_u64(gen, rng);
  }
}

std::vector<int64_t> generator_integers_i64(Pcg64& gen, int64_t low, int64_t high, size_t n) {
  if (n == 0) return {};  // numpy returns an empty array before it checks the bounds
  if (low >= high)
    throw Error("numpy Generator.integers: need low < high, got low=" + std::to_string(low) +
                " high=" + std::to_string(high));
  // Inclusive range [low, high - 1]; unsigned wrap-around keeps the full int64 span exact.
  const uint64_t off = static_cast<uint64_t>(low);
  const uint64_t rng = static_cast<uint64_t>(high - 1) - off;
  std::vector<uint64_t> raw(n);
  bounded_u64_fill(gen, off, rng, raw);
  std::vector<int64_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<int64_t>(raw[i]);
  return out;
}

std::vector<int64_t> numpy_default_rng_integers(uint64_t seed, int64_t high, size_t n) {
  Pcg64 gen(seed);
  return generator_integers_i64(gen, 0, high, n);
}

}  // namespace deepinfer::core
