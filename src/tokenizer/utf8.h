// UTF-8 helpers shared by the tokenizer and the detokenizer.
//
// Purpose: the GPT-2 byte <-> unicode-char table of byte-level BPE, UTF-8 encoding of a code
// point, and lossy UTF-8 decoding that replaces each maximal invalid subpart with U+FFFD
// (the same rule as Rust's String::from_utf8_lossy, which the reference tokenizer uses).
// Threading: pure functions over immutable tables.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace deepinfer::tokenizer {

// Byte b -> the code point that stands for it in byte-level BPE token strings.
const std::array<char32_t, 256>& byte_to_unicode();
// Inverse: code point -> byte, or -1 if the code point is not one of the 256.
int unicode_to_byte(char32_t cp);

void append_utf8(std::string& out, char32_t cp);
// Decodes one code point at s[i]; returns its length, or 0 if the bytes there do not start
// a valid sequence (then *cp is unchanged).
size_t decode_utf8(std::string_view s, size_t i, char32_t* cp);
// Length of the maximal prefix of an invalid sequence at s[i] (>= 1), Unicode's "maximal
// subpart" rule; only meaningful where decode_utf8 returned 0.
size_t invalid_subpart_length(std::string_view s, size_t i);
// Bytes -> valid UTF-8, each maximal invalid subpart replaced by U+FFFD.
std::string utf8_lossy(std::string_view bytes);
// Length of the longest prefix of `bytes` that ends on a complete sequence boundary, treating
// a trailing sequence that could still be completed by more bytes as incomplete.
size_t complete_utf8_prefix(std::string_view bytes);

}  // namespace deepinfer::tokenizer

namespace deepinfer::tokenizer {

// Byte offset of the first byte that does not begin a valid UTF-8 sequence (an overlong form,
// a surrogate, a code point past U+10FFFF, a stray continuation byte or a truncated
// sequence), or std::string_view::npos when all of `s` is valid UTF-8.
size_t find_invalid_utf8(std::string_view s);
// Throws deepinfer::Error "<field>: invalid UTF-8 at byte offset N (byte 0xXX)" unless `s` is
// valid UTF-8. Every text that reaches the tokenizer's regexes must pass this first.
void check_utf8(std::string_view s, const std::string& field);

}  // namespace deepinfer::tokenizer
