// The BPE model of tokenizer.json: vocabulary, ranked merges, and the merge loop.
//
// Purpose: encode one pre-tokenized piece (a byte-level string) into ids by repeatedly
// merging the adjacent pair with the lowest merge rank (ties: leftmost), as Hugging Face's
// BPE does, with a per-piece result cache. Merges are accepted as "a b" strings or as
// ["a", "b"] pairs; `ignore_merges` (a piece that is itself in the vocabulary is one token)
// is honoured.
// Threading: encode() is safe from many threads (the cache is guarded).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace deepinfer::tokenizer {

class Bpe {
 public:
  // Unused ids allowed below the largest one (holes in the id space) beyond the entry count.
  static constexpr int64_t kMaxUnusedIds = 65536;

  // Parses the `model` object; throws Error on an unsupported model or a merge whose parts
  // or result are not in the vocabulary.
  static Bpe from_json(const nlohmann::json& model, const std::string& source);

  void encode(std::string_view piece, std::vector<int32_t>& out) const;
  const std::unordered_map<std::string, int32_t>& vocab() const { return vocab_; }
  int32_t max_id() const { return max_id_; }

 private:
  struct Merge {
    int32_t rank, new_id;
  };
  static uint64_t key(int32_t a, int32_t b) { return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b); }
  void merge_word(std::string_view piece, std::vector<int32_t>& out) const;

  std::unordered_map<std::string, int32_t> vocab_;
  std::unordered_map<uint64_t, Merge> merges_;
  bool ignore_merges_ = false;
  int32_t unk_id_ = -1;
  int32_t max_id_ = -1;
  struct Cache {
    std::mutex mu;
    std::unordered_map<std::string, std::vector<int32_t>> map;
  };
  std::unique_ptr<Cache> cache_ = std::make_unique<Cache>();
};

}  // namespace deepinfer::tokenizer
