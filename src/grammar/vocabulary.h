// Vocabulary: the token bytes a grammar's masks are computed over.
//
// Purpose: each token id's raw bytes (from tokenizer::Tokenizer::token_bytes), which ids
// may never appear inside a grammar (special tokens, tokens with no bytes), the stop ids
// (EOS and any extra ones: allowed exactly when the grammar can end), and a byte trie of
// the grammar-eligible tokens in preorder, so a mask computation visits each shared prefix
// once and skips a whole subtree when its prefix is rejected.
// Invariants: trie()[0] is the root (the empty prefix, depth 0); a node's subtree is
// [index, subtree_end); its tokens are trie_tokens()[tokens_begin, tokens_end); stop and
// special ids are not in the trie. Bitmasks cover ids [0, size()) in 32-bit words (bit
// id % 32 of word id / 32, the layout of xgrammar's int32 bitmask).
// Threading: immutable after construction; share one per tokenizer.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace deepinfer::tokenizer {
class Tokenizer;
}

namespace deepinfer::grammar {

class Vocabulary {
 public:
  struct TrieNode {
    int32_t subtree_end = 0;
    int32_t tokens_begin = 0, tokens_end = 0;
    uint16_t depth = 0;
    uint8_t byte = 0;
  };

  // Stop ids: the tokenizer's EOS (when it has one) plus `extra_stop_ids`.
  static std::shared_ptr<const Vocabulary> from_tokenizer(const tokenizer::Tokenizer& tok,
                                                          const std::vector<int32_t>& extra_stop_ids = {});
  // For tests: token i has bytes tokens[i]; special[i] != 0 keeps it out of grammars.
  static std::shared_ptr<const Vocabulary> from_tokens(std::vector<std::string> tokens, std::vector<uint8_t> special,
                                                       std::vector<int32_t> stop_ids);

  int32_t size() const { return static_cast<int32_t>(tokens_.size()); }
  int32_t bitmask_words() const { return (size() + 31) / 32; }
  const std::string& token(int32_t id) const { return tokens_[static_cast<size_t>(id)]; }
  // Never allowed inside a grammar (a special token, a stop id, or a token without bytes).
  bool excluded(int32_t id) const { return excluded_[static_cast<size_t>(id)] != 0; }
  const std::vector<int32_t>& stop_ids() const { return stop_ids_; }
  const std::vector<TrieNode>& trie() const { return trie_; }
  const std::vector<int32_t>& trie_tokens() const { return trie_tokens_; }
  int max_token_bytes() const { return max_token_bytes_; }

 private:
  Vocabulary() = default;
  void build();

  std::vector<std::string> tokens_;
  std::vector<uint8_t> excluded_;
  std::vector<int32_t> stop_ids_;
  std::vector<TrieNode> trie_;
  std::vector<int32_t> trie_tokens_;
  int max_token_bytes_ = 1;
};

}  // namespace deepinfer::grammar
