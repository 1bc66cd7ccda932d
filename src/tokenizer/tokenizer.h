// Tokenizer: byte-level BPE from a Hugging Face tokenizer.json, as DeepSeek uses it.
//
// Purpose: encode text to ids and decode ids to text exactly as the `tokenizers` library
// does: added/special tokens are matched first (leftmost-longest, honouring lstrip, rstrip,
// single_word and normalized), the rest goes through the normalizer, the pre-tokenizer
// (Split regexes on PCRE2, ByteLevel) and the BPE model; `add_special_tokens` applies the
// TemplateProcessing post-processor. Decoding maps byte-level characters back to bytes and
// turns invalid UTF-8 into U+FFFD (maximal subparts), like Rust's from_utf8_lossy.
// Invariants: immutable after load. Threading: encode/decode are safe from many threads.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/bpe.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pretokenizer.h"

namespace deepinfer::tokenizer {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false, lstrip = false, rstrip = false, normalized = false, single_word = false;
};

class Tokenizer {
 public:
  // `path`: a tokenizer.json file, or a checkpoint directory holding one. Errors name the
  // file and field.
  static std::unique_ptr<Tokenizer> load(const std::string& path);
  static std::unique_ptr<Tokenizer> from_json_text(const std::string& json_text, const std::string& source);

  // Throws Error ("text: invalid UTF-8 at byte offset N ...") unless `text` is valid UTF-8.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = false) const;
  // The same ids while they number at most `limit`; past it, encoding stops early and the
  // result holds more than `limit` ids (a prefix of the full encoding, not to be used as ids):
  // enough to reject a prompt that is too long without tokenizing all of it.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens, size_t limit) const;
  // A byte length above which a text certainly encodes to more than `n_tokens` ids (not
  // counting post-processor tokens), or nullopt where the tokenizer gives no such bound (a
  // normaliser, or added tokens that strip white space).
  std::optional<size_t> max_bytes_for(size_t n_tokens) const;
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;
  // Raw bytes of a token (byte-level decoded; added tokens give their content).
  std::string token_bytes(int32_t id) const;

  // One past the largest id of the vocabulary and the added tokens.
  int32_t vocab_size() const { return vocab_size_; }
  // The longest token's bytes.
  size_t max_token_bytes() const { return max_token_bytes_; }
  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The token's string as stored (byte-level characters for model tokens); "" if unknown.
  const std::string& id_to_token(int32_t id) const;
  bool is_special(int32_t id) const;
  bool is_added(int32_t id) const;
  const std::vector<AddedToken>& added_tokens() const { return added_; }
  std::optional<int32_t> bos_id() const { return bos_; }
  std::optional<int32_t> eos_id() const { return eos_; }

 private:
  void encode_segment(std::string_view text, std::vector<int32_t>& out, size_t limit) const;
  // Leftmost-longest added token at or after `from`: returns its index and span (after
  // lstrip/rstrip widening), or -1.
  int find_added(std::string_view text, size_t from, size_t* begin, size_t* end) const;

  Normalizer normalizer_;
  PreTokenizer pre_;
  Bpe bpe_;
  std::vector<AddedToken> added_;
  std::unordered_map<int32_t, size_t> added_by_id_;
  std::array<std::vector<size_t>, 256> added_by_first_byte_;  // indices into added_, longest first
  std::vector<std::string> id_to_token_;
  std::vector<int32_t> post_prefix_, post_suffix_;  // TemplateProcessing ids around the sequence
  bool byte_level_decoder_ = true;
  int32_t vocab_size_ = 0;
  size_t max_token_bytes_ = 1;
  bool bytes_bound_tokens_ = false;  // max_bytes_for gives a bound
  std::optional<int32_t> bos_, eos_;
};

}  // namespace deepinfer::tokenizer
