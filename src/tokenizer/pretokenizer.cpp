#include "tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <nlohmann/json.hpp>
#include <utf8proc.h>

#include <array>
#include <cstdio>
#include <map>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace deepinfer::tokenizer {

namespace {
// The GPT-2 split ByteLevel applies when use_regex is set.
constexpr const char* kByteLevelPattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
}  // namespace

namespace {
// The Unicode White_Space characters: what \s means in Oniguruma, the engine Hugging Face
// tokenizers uses. PCRE2's \s differs (its \h also takes U+180E), so \s and \S are
// rewritten to this explicit set before compiling.
constexpr const char* kWhiteSpaceSet = "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

// Code points that this PCRE2 build's Unicode tables leave unassigned but utf8proc (a newer
// Unicode version, like the Oniguruma inside Hugging Face tokenizers) assigns to one of the
// general categories L, M, N, P, S: per category, a class body such as "\\x{1FA75}-\\x{1FA77}".
const std::map<char, std::string>& newer_unicode_ranges() {
  static const std::map<char, std::string> ranges = [] {
    std::string all;
    all.reserve(4u << 20);
    // Planes 0-3 and 14 hold every assigned L/M/N/P/S character (4-13 are unassigned,
    // 15-16 private use).
    for (char32_t cp = 1; cp <= 0x3FFFF; ++cp)
      if (cp < 0xD800 || cp > 0xDFFF) append_utf8(all, cp);
    for (char32_t cp = 0xE0000; cp <= 0xEFFFF; ++cp) append_utf8(all, cp);
    int err = 0;
    PCRE2_SIZE off = 0;
    const char* pat = "\\p{Cn}+";
    pcre2_code_8* code = pcre2_compile_8(reinterpret_cast<PCRE2_SPTR8>(pat), PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP,
                                         &err, &off, nullptr);
    std::map<char, std::vector<char32_t>> cps;
    if (code) {
      pcre2_jit_compile_8(code, PCRE2_JIT_COMPLETE);
      pcre2_match_data_8* md = pcre2_match_data_create_from_pattern_8(code, nullptr);
      size_t pos = 0;
      while (pos < all.size() &&
             pcre2_match_8(code, reinterpret_cast<PCRE2_SPTR8>(all.data()), all.size(), pos, 0, md, nullptr) > 0) {
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer_8(md);
        for (size_t i = ov[0]; i < ov[1];) {
          char32_t cp = 0;
          size_t n = decode_utf8(all, i, &cp);
          if (n == 0) n = 1;
          const char* cat = utf8proc_category_string(static_cast<utf8proc_int32_t>(cp));
          if (cat && (cat[0] == 'L' || cat[0] == 'M' || cat[0] == 'N' || cat[0] == 'P' || cat[0] == 'S'))
            cps[cat[0]].push_back(cp);
          i += n;
        }
        pos = ov[1] > pos ? ov[1] : pos + 1;
      }
      pcre2_match_data_free_8(md);
      pcre2_code_free_8(code);
    }
    std::map<char, std::string> out;
    auto hex = [](char32_t v) {
      char buf[16];
      std::snprintf(buf, sizeof(buf), "\\x{%X}", static_cast<unsigned>(v));
      return std::string(buf);
    };
    for (auto& [c, v] : cps) {
      std::string body;
      for (size_t i = 0; i < v.size();) {
        size_t j = i;
        while (j + 1 < v.size() && v[j + 1] == v[j] + 1) ++j;
        body += hex(v[i]);
        if (j > i) {
          body.push_back('-');
          body.append(hex(v[j]));
        }
        i = j + 1;
      }
      out[c] = body;
    }
    return out;
  }();
  return ranges;
}

std::string rewrite_classes(const std::string& p, const std::string& source) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char ch = p[i];
    if (ch == '\\' && i + 1 < p.size()) {
      const char nx = p[i + 1];
      if (nx == 's') {
        out += in_class ? std::string(kWhiteSpaceSet) : "[" + std::string(kWhiteSpaceSet) + "]";
      } else if (nx == 'S') {
        if (in_class) throw Error(source + ": regex '" + p + "': \\S inside a character class is not supported");
        out += "[^" + std::string(kWhiteSpaceSet) + "]";
      } else if (nx == 'p' && i + 4 < p.size() + 1 && p.compare(i + 2, 1, "{") == 0 && i + 4 < p.size() && p[i + 4] == '}' &&
                 newer_unicode_ranges().count(p[i + 3])) {
        // \p{X} for a major category: add the code points newer Unicode assigns to it.
        const std::string prop = p.substr(i, 5);
        const std::string& extra = newer_unicode_ranges().at(p[i + 3]);
        out += in_class ? prop + extra : "[" + prop + extra + "]";
        i += 4;
        continue;
      } else {
        out += ch;
        out += nx;
      }
      ++i;
      continue;
    }
    if (ch == '[' && !in_class) {
      in_class = true;
      out += ch;
      // A ']' right after '[' or '[^' is literal.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (ch == ']' && in_class) in_class = false;
    out += ch;
  }
  return out;
}
}  // namespace

Regex::Regex(const std::string& pattern_in, const std::string& source) {
  int err = 0;
  PCRE2_SIZE off = 0;
  const std::string pattern = rewrite_classes(pattern_in, source);
  pcre2_code_8* code = pcre2_compile_8(reinterpret_cast<PCRE2_SPTR8>(pattern.data()), pattern.size(),
                                       PCRE2_UTF | PCRE2_UCP, &err, &off, nullptr);
  if (!code) {
    PCRE2_UCHAR8 msg[256];
    pcre2_get_error_message_8(err, msg, sizeof(msg));
    throw Error(source + ": invalid regex '" + pattern + "' at offset " + std::to_string(off) + ": " +
                reinterpret_cast<const char*>(msg));
  }
  pcre2_jit_compile_8(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if JIT is unavailable
  code_ = code;
}

Regex::~Regex() { pcre2_code_free_8(static_cast<pcre2_code_8*>(code_)); }

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> out;
  auto* code = static_cast<pcre2_code_8*>(code_);
  pcre2_match_data_8* md = pcre2_match_data_create_from_pattern_8(code, nullptr);
  size_t pos = 0;
  while (pos <= text.size()) {
    int rc = pcre2_match_8(code, reinterpret_cast<PCRE2_SPTR8>(text.data()), text.size(), pos, PCRE2_NO_UTF_CHECK, md,
                           nullptr);
    if (rc < 0) break;
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer_8(md);
    size_t b = ov[0], e = ov[1];
    if (e == b) {
      // Empty match: step over one code point.
      size_t step = 1;
      while (b + step < text.size() && (static_cast<unsigned char>(text[b + step]) & 0xC0) == 0x80) ++step;
      pos = b + step;
      continue;
    }
    out.emplace_back(b, e);
    pos = e;
  }
  pcre2_match_data_free_8(md);
  return out;
}

std::string bytes_to_byte_level(std::string_view bytes) {
  const auto& t = byte_to_unicode();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) append_utf8(out, t[b]);
  return out;
}

PreTokenizer PreTokenizer::from_json(const nlohmann::json& j, const std::string& source) {
  PreTokenizer p;
  if (j.is_null()) return p;
  std::vector<const nlohmann::json*> list;
  if (j.value("type", "") == "Sequence") {
    for (const auto& s : j.at("pretokenizers")) list.push_back(&s);
  } else {
    list.push_back(&j);
  }
  for (const auto* sp : list) {
    const auto& s = *sp;
    const std::string type = s.value("type", "");
    PreTokenizerStep step;
    if (type == "Split") {
      const auto& pat = s.at("pattern");
      std::string re;
      if (pat.contains("Regex")) {
        re = pat["Regex"].get<std::string>();
      } else if (pat.contains("String")) {
        // A literal string: escape it for PCRE2.
        re = "\\Q" + pat["String"].get<std::string>() + "\\E";
      } else {
        throw Error(source + ": pre_tokenizer Split needs pattern.Regex or pattern.String");
      }
      step.regex = std::make_shared<Regex>(re, source);
      const std::string beh = s.value("behavior", "Isolated");
      if (beh == "Removed") step.behavior = SplitBehavior::kRemoved;
      else if (beh == "Isolated") step.behavior = SplitBehavior::kIsolated;
      else if (beh == "MergedWithPrevious") step.behavior = SplitBehavior::kMergedWithPrevious;
      else if (beh == "MergedWithNext") step.behavior = SplitBehavior::kMergedWithNext;
      else if (beh == "Contiguous") step.behavior = SplitBehavior::kContiguous;
      else throw Error(source + ": pre_tokenizer Split behavior '" + beh + "' is not supported");
      step.invert = s.value("invert", false);
    } else if (type == "ByteLevel") {
      step.kind = PreTokenizerStep::Kind::kByteLevel;
      step.add_prefix_space = s.value("add_prefix_space", false);
      if (s.value("use_regex", true)) step.regex = std::make_shared<Regex>(kByteLevelPattern, source);
      p.byte_level_ = true;
    } else {
      throw Error(source + ": pre_tokenizer type '" + type + "' is not supported (Split, ByteLevel, Sequence are)");
    }
    p.steps_.push_back(std::move(step));
  }
  return p;
}

namespace {

// One Split step over one piece, per Hugging Face's SplitDelimiterBehavior.
void split_piece(const PreTokenizerStep& st, std::string_view piece, std::vector<std::string>& out) {
  auto matches = st.regex->find_all(piece);
  // (begin, end, is_match) segments covering the piece.
  std::vector<std::tuple<size_t, size_t, bool>> segs;
  size_t prev = 0;
  for (auto [b, e] : matches) {
    if (b > prev) segs.emplace_back(prev, b, false);
    segs.emplace_back(b, e, true);
    prev = e;
  }
  if (prev < piece.size()) segs.emplace_back(prev, piece.size(), false);
  if (st.invert)
    for (auto& s : segs) std::get<2>(s) = !std::get<2>(s);
  auto emit = [&](size_t b, size_t e) {
    if (e > b) out.emplace_back(piece.substr(b, e - b));
  };
  switch (st.behavior) {
    case SplitBehavior::kRemoved:
      for (auto [b, e, m] : segs)
        if (!m) emit(b, e);
      break;
    case SplitBehavior::kIsolated:
      for (auto [b, e, m] : segs) emit(b, e);
      break;
    case SplitBehavior::kContiguous: {
      size_t i = 0;
      while (i < segs.size()) {
        size_t j = i;
        while (j + 1 < segs.size() && std::get<2>(segs[j + 1]) == std::get<2>(segs[i])) ++j;
        emit(std::get<0>(segs[i]), std::get<1>(segs[j]));
        i = j + 1;
      }
      break;
    }
    case SplitBehavior::kMergedWithPrevious: {
      size_t start = 0;
      for (auto [b, e, m] : segs)
        if (m) {
          emit(start, e);
          start = e;
        }
      emit(start, piece.size());
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      size_t start = 0;
      for (auto [b, e, m] : segs)
        if (m) {
          emit(start, b);
          start = b;
        }
      emit(start, piece.size());
      break;
    }
  }
}

}  // namespace

std::vector<std::string> PreTokenizer::split(std::string_view text) const {
  std::vector<std::string> pieces;
  if (text.empty()) return pieces;
  pieces.emplace_back(text);
  for (const auto& st : steps_) {
    std::vector<std::string> next;
    for (const auto& piece : pieces) {
      if (st.kind == PreTokenizerStep::Kind::kSplit) {
        split_piece(st, piece, next);
      } else {
        std::string p = piece;
        if (st.add_prefix_space && !p.empty() && p[0] != ' ') p = " " + p;
        if (st.regex) {
          PreTokenizerStep iso = st;
          iso.behavior = SplitBehavior::kIsolated;
          iso.invert = false;
          std::vector<std::string> parts;
          split_piece(iso, p, parts);
          for (auto& q : parts) next.push_back(bytes_to_byte_level(q));
        } else {
          next.push_back(bytes_to_byte_level(p));
        }
      }
    }
    pieces.swap(next);
  }
  return pieces;
}

}  // namespace deepinfer::tokenizer
