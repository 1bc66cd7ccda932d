// Unicode normalisers of tokenizer.json and the text primitives Engram's key uses.
//
// Purpose: NFC/NFD/NFKC/NFKD (utf8proc), full lowercase as Rust's char::to_lowercase
// (simple mappings plus the one unconditional multi-character mapping, U+0130), removal of
// combining marks, whitespace strip by the Unicode White_Space property, literal replace;
// and `Normalizer`, a Sequence of these parsed from tokenizer.json.
// Threading: pure functions; Normalizer is immutable after parsing.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace deepinfer::tokenizer {

std::string nfc(std::string_view s);
std::string nfd(std::string_view s);
std::string nfkc(std::string_view s);
std::string nfkd(std::string_view s);
std::string lowercase(std::string_view s);
// Drops every code point of general category Mn, Mc or Me.
std::string strip_marks(std::string_view s);
bool is_unicode_whitespace(char32_t cp);
std::string strip_whitespace(std::string_view s, bool left = true, bool right = true);
std::string replace_all(std::string_view s, std::string_view from, std::string_view to);

class Normalizer {
 public:
  // `normalizer` object of tokenizer.json (null = identity); throws Error on unsupported types.
  static Normalizer from_json(const nlohmann::json& j, const std::string& source);
  std::string apply(std::string_view s) const;
  bool empty() const { return steps_.empty(); }

 private:
  struct Step {
    std::string type, a, b;  // a/b: Replace from/to, Prepend text
    bool left = true, right = true;
  };
  std::vector<Step> steps_;
};

}  // namespace deepinfer::tokenizer
