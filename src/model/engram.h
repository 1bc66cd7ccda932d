// Engram n-gram hashing: bucket layout (primes, offsets), hash multipliers, and the hash ids
// of every position from the sequence's compressed-id history.
//
// Purpose: for engram layer j, n-gram size n = 2..N and head c, position p hashes the
// compressed ids of tokens p, p-1, ..., p-n+1 (pad where there is no live history) by XOR of
// id x multiplier[j][shift], modulo a prime of its own, plus the layer's offset of that
// (n, c) bucket range. Primes are the next primes above engram_vocab_size - 1, drawn in
// order and never reused; multipliers come from NumPy's default_rng(10007 * layer_id).
// Invariants: the history is by absolute position (DEAD = -1 where no live token), so
// chunked prefill, decode and rollback see the same n-grams.
// Threading: immutable after construction; hash() writes only its outputs and the history.
#pragma once

#include <cstdint>
#include <vector>

#include "loader/config.h"

namespace deepinfer::model {

bool is_prime_u64(uint64_t n);

class EngramHasher {
 public:
  static constexpr int32_t kDead = -1;

  // token_map: compressed id per token id (from the tokenizer); n_keys its distinct count.
  // Throws Error when n_keys differs from engram_compressed_vocab_size or the layout does
  // not sum to engram_num_embeddings.
  EngramHasher(const loader::ModelConfig& c, std::vector<int32_t> token_map, int32_t n_keys);

  int64_t n_layers() const { return static_cast<int64_t>(primes_.size()); }
  int64_t n_cols() const { return (max_ngram_ - 1) * n_heads_; }
  // primes()[layer][(n-2)*heads + c]
  const std::vector<std::vector<int64_t>>& primes() const { return primes_; }
  const std::vector<std::vector<int64_t>>& multipliers() const { return multipliers_; }
  int64_t pad_id() const { return pad_; }

  // Writes the compressed ids of tokens at positions into `history` (grown as needed), then
  // hash ids [n, n_layers, n_cols] for those positions.
  void hash(const int64_t* tokens, const int64_t* positions, int64_t n, std::vector<int32_t>& history,
            int64_t* out) const;

 private:
  int64_t max_ngram_, n_heads_, pad_;
  std::vector<int32_t> token_map_;
  std::vector<std::vector<int64_t>> primes_, offsets_, multipliers_;
};

}  // namespace deepinfer::model
