// Engram's compressed token map: token ids that normalise alike share one compressed id.
//
// Purpose: exactly the reference's derivation — decode each id alone (special tokens kept);
// if the text holds U+FFFD the key is the raw token string, otherwise NFKC, NFD, drop
// combining marks, lowercase, collapse runs of space/tab/CR/LF to one space, protect a text
// that is exactly one space, strip whitespace, and fall back to the raw text when that
// leaves nothing; compressed ids are numbered in first-seen (token id) order.
// Threading: pure function.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace deepinfer::tokenizer {

struct EngramTokenMap {
  std::vector<int32_t> map;  // [vocab] compressed id per token id
  int32_t n_keys = 0;        // distinct keys = the compressed vocabulary size
};

// The normalised key of one decoded text (no U+FFFD case).
std::string engram_normalize(const std::string& text);
EngramTokenMap build_engram_token_map(const Tokenizer& tok);

}  // namespace deepinfer::tokenizer
