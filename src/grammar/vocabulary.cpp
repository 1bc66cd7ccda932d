#include "grammar/vocabulary.h"

#include <algorithm>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::grammar {

std::shared_ptr<const Vocabulary> Vocabulary::from_tokenizer(const tokenizer::Tokenizer& tok,
                                                             const std::vector<int32_t>& extra_stop_ids) {
  const int32_t n = tok.vocab_size();
  std::vector<std::string> tokens(static_cast<size_t>(n));
  std::vector<uint8_t> special(static_cast<size_t>(n), 0);
  for (int32_t id = 0; id < n; ++id) {
    tokens[static_cast<size_t>(id)] = tok.token_bytes(id);
    special[static_cast<size_t>(id)] = tok.is_special(id) ? 1 : 0;
  }
  std::vector<int32_t> stops = extra_stop_ids;
  if (tok.eos_id()) stops.push_back(*tok.eos_id());
  return from_tokens(std::move(tokens), std::move(special), std::move(stops));
}

std::shared_ptr<const Vocabulary> Vocabulary::from_tokens(std::vector<std::string> tokens, std::vector<uint8_t> special,
                                                          std::vector<int32_t> stop_ids) {
  DI_CHECK(special.size() == tokens.size(), "special flags and tokens differ in size");
  std::shared_ptr<Vocabulary> v(new Vocabulary());
  v->tokens_ = std::move(tokens);
  v->excluded_ = std::move(special);
  std::sort(stop_ids.begin(), stop_ids.end());
  stop_ids.erase(std::unique(stop_ids.begin(), stop_ids.end()), stop_ids.end());
  for (int32_t s : stop_ids) {
    if (s < 0 || s >= v->size()) throw Error("grammar: stop token id " + std::to_string(s) + " is outside the vocabulary");
  }
  v->stop_ids_ = std::move(stop_ids);
  v->build();
  return v;
}

void Vocabulary::build() {
  for (int32_t s : stop_ids_) excluded_[static_cast<size_t>(s)] = 1;
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < size(); ++id) {
    if (tokens_[static_cast<size_t>(id)].empty()) excluded_[static_cast<size_t>(id)] = 1;
    if (!excluded_[static_cast<size_t>(id)]) ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    const auto& x = tokens_[static_cast<size_t>(a)];
    const auto& y = tokens_[static_cast<size_t>(b)];
    return x != y ? x < y : a < b;
  });
  trie_.clear();
  trie_tokens_.clear();
  trie_.push_back(TrieNode{});
  std::vector<int32_t> path{0};  // open nodes, path[d] at depth d
  const std::string* prev = nullptr;
  for (int32_t id : ids) {
    const std::string& s = tokens_[static_cast<size_t>(id)];
    max_token_bytes_ = std::max(max_token_bytes_, static_cast<int>(s.size()));
    DI_CHECK(s.size() < 65535, "token longer than 65534 bytes");
    size_t lcp = 0;
    if (prev) {
      while (lcp < s.size() && lcp < prev->size() && s[lcp] == (*prev)[lcp]) ++lcp;
    }
    while (path.size() > lcp + 1) {
      trie_[static_cast<size_t>(path.back())].subtree_end = static_cast<int32_t>(trie_.size());
      path.pop_back();
    }
    for (size_t d = lcp; d < s.size(); ++d) {
      TrieNode n;
      n.depth = static_cast<uint16_t>(d + 1);
      n.byte = static_cast<uint8_t>(s[d]);
      n.tokens_begin = n.tokens_end = static_cast<int32_t>(trie_tokens_.size());
      path.push_back(static_cast<int32_t>(trie_.size()));
      trie_.push_back(n);
    }
    TrieNode& leaf = trie_[static_cast<size_t>(path.back())];
    if (leaf.tokens_end == leaf.tokens_begin) leaf.tokens_begin = leaf.tokens_end = static_cast<int32_t>(trie_tokens_.size());
    trie_tokens_.push_back(id);
    leaf.tokens_end = static_cast<int32_t>(trie_tokens_.size());
    prev = &s;
  }
  while (!path.empty()) {
    trie_[static_cast<size_t>(path.back())].subtree_end = static_cast<int32_t>(trie_.size());
    path.pop_back();
  }
}

}  // namespace deepinfer::grammar
