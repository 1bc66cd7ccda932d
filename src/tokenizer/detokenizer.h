// Incremental detokenizer: turns a stream of token ids into text without ever emitting half
// a UTF-8 character.
//
// Purpose: push() appends a token's bytes and returns the newly complete text; bytes that
// could still become a character are held back; bytes that never can are replaced by U+FFFD
// exactly as a full decode() of all ids would. offset() is the length of the text emitted so
// far (for stop-string matching on the concatenated output).
// Invariants: concatenating every push() and the final flush() equals
// tokenizer.decode(all ids, skip_special_tokens).
// Threading: one object per request.
#pragma once

#include <cstdint>
#include <string>

#include "tokenizer/tokenizer.h"

namespace deepinfer::tokenizer {

class IncrementalDetokenizer {
 public:
  explicit IncrementalDetokenizer(const Tokenizer& tok, bool skip_special_tokens = true)
      : tok_(tok), skip_special_(skip_special_tokens) {}

  std::string push(int32_t id);
  // Emits whatever is held back (incomplete bytes become U+FFFD).
  std::string flush();
  size_t offset() const { return emitted_; }

 private:
  const Tokenizer& tok_;
  bool skip_special_;
  std::string pending_;  // undecided trailing bytes
  size_t emitted_ = 0;
};

}  // namespace deepinfer::tokenizer
