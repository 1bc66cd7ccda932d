#include "model/engram.h"

#include <algorithm>
#include <set>
#include <string>

#include "core/error.h"
#include "core/numpy_rng.h"

namespace deepinfer::model {

namespace {
__extension__ typedef unsigned __int128 u128;
uint64_t mulmod(uint64_t a, uint64_t b, uint64_t m) { return static_cast<uint64_t>(static_cast<u128>(a) * b % m); }
uint64_t powmod(uint64_t a, uint64_t e, uint64_t m) {
  uint64_t r = 1;
  a %= m;
  while (e) {
    if (e & 1) r = mulmod(r, a, m);
    a = mulmod(a, a, m);
    e >>= 1;
  }
  return r;
}
}  // namespace

bool is_prime_u64(uint64_t n) {
  if (n < 2) return false;
  for (uint64_t p : {2ull, 3ull, 5ull, 7ull, 11ull, 13ull, 17ull, 19ull, 23ull, 29ull, 31ull, 37ull}) {
    if (n % p == 0) return n == p;
  }
  uint64_t d = n - 1;
  int s = 0;
  while ((d & 1) == 0) {
    d >>= 1;
    ++s;
  }
  // Deterministic Miller-Rabin bases for 64-bit integers.
  for (uint64_t a : {2ull, 3ull, 5ull, 7ull, 11ull, 13ull, 17ull, 19ull, 23ull, 29ull, 31ull, 37ull}) {
    uint64_t x = powmod(a, d, n);
    if (x == 1 || x == n - 1) continue;
    bool composite = true;
    for (int r = 1; r < s; ++r) {
      x = mulmod(x, x, n);
      if (x == n - 1) {
        composite = false;
        break;
      }
    }
    if (composite) return false;
  }
  return true;
}

EngramHasher::EngramHasher(const loader::ModelConfig& c, std::vector<int32_t> token_map, int32_t n_keys)
    : max_ngram_(c.engram_max_ngram_size), n_heads_(c.engram_n_heads), token_map_(std::move(token_map)) {
  if (n_keys != c.engram_compressed_vocab_size)
    throw Error("config.json: field 'engram_compressed_vocab_size': the tokenizer-derived compressed vocabulary has " +
                std::to_string(n_keys) + " keys, the config says " + std::to_string(c.engram_compressed_vocab_size) +
                " (the hash multipliers would rehash the whole table)");
  if (max_ngram_ < 2) throw Error("config.json: field 'engram_max_ngram_size': must be >= 2");
  if (static_cast<int64_t>(token_map_.size()) < c.vocab_size)
    throw Error("tokenizer: " + std::to_string(token_map_.size()) + " tokens, fewer than vocab_size " + std::to_string(c.vocab_size));
  if (c.engram_pad_id < 0 || c.engram_pad_id >= static_cast<int64_t>(token_map_.size()))
    throw Error("config.json: field 'engram_pad_id': out of the vocabulary");
  pad_ = token_map_[static_cast<size_t>(c.engram_pad_id)];
  std::set<int64_t> seen;
  const int64_t bound = std::max<int64_t>(1, (INT64_MAX / n_keys) / 2);
  for (size_t j = 0; j < c.engram_layer_ids.size(); ++j) {
    std::vector<int64_t> primes, offsets;
    int64_t total = 0;
    for (int64_t n = 2; n <= max_ngram_; ++n) {
      int64_t cur = c.engram_vocab_size - 1;
      for (int64_t h = 0; h < n_heads_; ++h) {
        do {
          ++cur;
        } while (!is_prime_u64(static_cast<uint64_t>(cur)) || seen.count(cur));
        seen.insert(cur);
        primes.push_back(cur);
        offsets.push_back(total);
        total += cur;
      }
    }
    if (total != c.engram_num_embeddings[j])
      throw Error("config.json: field 'engram_num_embeddings': layer " + std::to_string(c.engram_layer_ids[j]) +
                  " has " + std::to_string(c.engram_num_embeddings[j]) + " rows, the prime bucket layout needs " +
                  std::to_string(total));
    primes_.push_back(std::move(primes));
    offsets_.push_back(std::move(offsets));
    std::vector<int64_t> m = core::numpy_default_rng_integers(static_cast<uint64_t>(10007 * c.engram_layer_ids[j]), bound,
                                                              static_cast<size_t>(max_ngram_));
    for (auto& v : m) v = v * 2 + 1;
    multipliers_.push_back(std::move(m));
  }
}

void EngramHasher::hash(const int64_t* tokens, const int64_t* positions, int64_t n, std::vector<int32_t>& history,
                        int64_t* out) const {
  int64_t max_pos = 0;
  for (int64_t i = 0; i < n; ++i) max_pos = std::max(max_pos, positions[i] + 1);
  if (static_cast<int64_t>(history.size()) < max_pos) history.resize(static_cast<size_t>(max_pos), kDead);
  for (int64_t i = 0; i < n; ++i) history[static_cast<size_t>(positions[i])] = token_map_[static_cast<size_t>(tokens[i])];
  const int64_t L = n_layers(), cols = n_cols();
  std::vector<int64_t> toks(static_cast<size_t>(max_ngram_));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t p = positions[i];
    bool blocked = false;
    for (int64_t s = 0; s < max_ngram_; ++s) {
      const int32_t src = history[static_cast<size_t>(std::max<int64_t>(p - s, 0))];
      blocked = blocked || p < s || src == kDead;
      toks[static_cast<size_t>(s)] = blocked ? pad_ : src;
    }
    for (int64_t j = 0; j < L; ++j) {
      const auto& m = multipliers_[static_cast<size_t>(j)];
      int64_t h = toks[0] * m[0];
      int64_t* o = out + (i * L + j) * cols;
      for (int64_t k = 1; k < max_ngram_; ++k) {
        h ^= toks[static_cast<size_t>(k)] * m[static_cast<size_t>(k)];
        for (int64_t c = 0; c < n_heads_; ++c) {
          const size_t col = static_cast<size_t>((k - 1) * n_heads_ + c);
          o[col] = h % primes_[static_cast<size_t>(j)][col] + offsets_[static_cast<size_t>(j)][col];
        }
      }
    }
  }
}

}  // namespace deepinfer::model
