// UTF-8 helpers for the grammar room: decode/encode one scalar value, validate, and turn a
// set of code-point ranges into byte-range sequences (the classic construction used by
// regex engines), so classes over code points become byte automata.
//
// Invariants: only well-formed UTF-8 is produced or accepted (no overlongs, no surrogates,
// nothing above U+10FFFF). Threading: stateless.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/grammar.h"

namespace deepinfer::grammar {

struct ByteRange {
  uint8_t lo = 0, hi = 0;  // inclusive
};

// One UTF-8 encoded alternative: 1..4 byte ranges, matched in order.
struct Utf8Sequence {
  ByteRange r[4];
  int len = 0;
};

// Decodes the scalar value at s[i]; returns its byte length, 0 if s[i..] is not well-formed.
size_t utf8_decode(std::string_view s, size_t i, uint32_t* cp);
void utf8_append(std::string& out, uint32_t cp);
bool utf8_valid(std::string_view s);

// Byte-range sequences whose union is exactly the UTF-8 encodings of `ranges` (which must
// be normalised: sorted, disjoint, no surrogates).
std::vector<Utf8Sequence> utf8_sequences(const std::vector<CodeRange>& ranges);

}  // namespace deepinfer::grammar
