// Pre-tokenization of tokenizer.json: `Split(regex, behavior, invert)` and
// `ByteLevel(add_prefix_space, use_regex)`, alone or in a `Sequence`.
//
// Purpose: cut normalised text into pieces the BPE model encodes independently, exactly as
// Hugging Face tokenizers does. Regexes run on PCRE2 in UTF + UCP mode (Unicode properties
// such as \p{L}, look-ahead), JIT-compiled where available. ByteLevel maps every byte of a
// piece to its stand-in code point (the GPT-2 table) at the end.
// Invariants: pieces cover the input in order; empty pieces are dropped.
// Threading: immutable after construction; split() is reentrant (per-call match data).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace deepinfer::tokenizer {

class Regex;  // PCRE2 wrapper

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct PreTokenizerStep {
  enum class Kind { kSplit, kByteLevel } kind = Kind::kSplit;
  std::shared_ptr<Regex> regex;     // kSplit; also kByteLevel with use_regex
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  bool add_prefix_space = false;    // kByteLevel
};

class PreTokenizer {
 public:
  // Parses the `pre_tokenizer` object (null = no pre-tokenization); throws Error naming the
  // unsupported type or bad pattern.
  static PreTokenizer from_json(const nlohmann::json& j, const std::string& source);
  // Splits `text` into pieces; with a ByteLevel step the pieces are byte-level strings.
  std::vector<std::string> split(std::string_view text) const;
  bool byte_level() const { return byte_level_; }

 private:
  std::vector<PreTokenizerStep> steps_;
  bool byte_level_ = false;
};

class Regex {
 public:
  // UTF + UCP; throws Error with PCRE2's message on a bad pattern.
  Regex(const std::string& pattern, const std::string& source);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  // Non-overlapping matches [begin, end) in byte offsets, leftmost first; empty matches are
  // skipped.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;

 private:
  void* code_ = nullptr;  // pcre2_code_8*
};

// Byte-level mapping of raw bytes to their stand-in characters (UTF-8 encoded).
std::string bytes_to_byte_level(std::string_view bytes);

}  // namespace deepinfer::tokenizer
