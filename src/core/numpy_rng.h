// NumPy-compatible random integers: SeedSequence, PCG64 and Generator.integers (int64).
//
// Purpose: reproduce bit for bit what Engram's hashing computes in Python,
// `numpy.random.default_rng(seed).integers(low, high, size=n, dtype=numpy.int64)`, for a
// non-negative integer seed. default_rng(seed) is Generator(PCG64(SeedSequence(seed))):
//  - SeedSequence(seed): the seed's little-endian uint32 words (0 -> [0]) hashed into a
//    4-word pool (no spawn key, pool_size 4); generate_state() hashes the pool cyclically
//    into output words, and a uint64 word is two uint32 words, the first one low.
//  - PCG64: the 128-bit LCG (multiplier 0x2360ed051fc65da4'4385df649fccf645, the standard
//    one, not the "cheap multiplier" of PCG64DXSM) with the XSL-RR output taken after the
//    step. Seeded from generate_state(4, uint64) = [s_hi, s_lo, i_hi, i_lo] with PCG's
//    srandom: inc = (i << 1) | 1, state = 0, step, state += s, step. next_u32 splits one
//    64-bit draw, low half first, and keeps the high half for the next next_u32 call.
//  - Generator.integers uses Lemire's method (never the masked one): an inclusive range
//    rng = high - 1 - low of 0 gives `low` without drawing; rng == 2^32 - 1 takes next_u32
//    as is; rng < 2^32 - 1 uses 32-bit Lemire on next_u32; rng == 2^64 - 1 takes next_u64;
//    anything else uses 64-bit Lemire on next_u64.
// Invariants: matches NumPy >= 1.18.4 (earlier releases returned 0 for a range of exactly
// 2^32, NumPy gh-16066); results are independent of the platform's byte order.
// Threading: SeedSequence is immutable once built. A Pcg64 is a mutable stream: one thread
// at a time. The free functions hold no shared state.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace deepinfer::core {

class SeedSequence {
 public:
  static constexpr size_t kPoolSize = 4;

  // SeedSequence(entropy=seed) with no spawn key and the default pool size.
  explicit SeedSequence(uint64_t entropy);

  // The mixed entropy pool (numpy: SeedSequence.pool).
  const std::array<uint32_t, kPoolSize>& pool() const { return pool_; }
  // generate_state(n_words, dtype=np.uint32).
  std::vector<uint32_t> generate_state_u32(size_t n_words) const;
  // generate_state(n_words, dtype=np.uint64): word k = u32[2k] | u32[2k + 1] << 32.
  std::vector<uint64_t> generate_state_u64(size_t n_words) const;

 private:
  std::array<uint32_t, kPoolSize> pool_{};
};

// The full 128-bit PCG64 state as numpy reports it in bit_generator.state['state'].
struct Pcg64State {
  uint64_t state_hi = 0, state_lo = 0;
  uint64_t inc_hi = 0, inc_lo = 0;  // the odd increment actually used by the LCG
};

class Pcg64 {
 public:
  explicit Pcg64(const SeedSequence& seed_seq);
  // PCG64(seed) == PCG64(SeedSequence(seed)).
  explicit Pcg64(uint64_t seed) : Pcg64(SeedSequence(seed)) {}

  // numpy: PCG64.random_raw() / next_uint64.
  uint64_t next_u64();
  // numpy: next_uint32, with the bit generator's one-word buffer (low half first).
  uint32_t next_u32();

  Pcg64State state() const;
  // Whether a high half is buffered for the next next_u32 (numpy: state['has_uint32']).
  bool has_u32() const { return has_u32_; }

 private:
  void step();

  uint64_t state_hi_ = 0, state_lo_ = 0;
  uint64_t inc_hi_ = 0, inc_lo_ = 0;
  bool has_u32_ = false;
  uint32_t u32_buf_ = 0;
};

// numpy's random_bounded_uint64_fill with use_masked = false: out[i] = off + a uniform draw
// from [0, rng] (inclusive), consuming `gen` exactly as numpy does.
void bounded_u64_fill(Pcg64& gen, uint64_t off, uint64_t rng, std::span<uint64_t> out);

// Generator.integers(low, high, size=n, dtype=np.int64, endpoint=False) on an existing
// stream (so successive calls continue it as successive numpy calls do). n == 0 returns an
// empty vector without looking at the bounds (as numpy does); otherwise low >= high throws
// deepinfer::Error where numpy raises ValueError.
std::vector<int64_t> generator_integers_i64(Pcg64& gen, int64_t low, int64_t high, size_t n);

// numpy.random.default_rng(seed).integers(0, high, size=n, dtype=np.int64); high >= 1.
std::vector<int64_t> numpy_default_rng_integers(uint64_t seed, int64_t high, size_t n);

}  // namespace deepinfer::core
