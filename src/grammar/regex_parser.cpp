#include "grammar/regex_parser.h"

#include "core/error.h"
#include "grammar/ebnf_parser.h"
#include "grammar/json_string.h"
#include "grammar/utf8_ranges.h"

namespace deepinfer::grammar {
namespace {

constexpr int kMaxNesting = 256;

// White space of ECMA-262 (\s) and of Python's str.isspace(), united.
const std::vector<CodeRange> kAnySpace = {{0x09, 0x0D}, {0x1C, 0x20}, {0x85, 0x85}, {0xA0, 0xA0}, {0x1680, 0x1680},
                                          {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F},
                                          {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
const std::vector<CodeRange> kDigit = {{'0', '9'}};
const std::vector<CodeRange> kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const std::vector<CodeRange> kSpace = {{'\t', '\r'}, {' ', ' '}};

// Complement of `set` within ASCII.
std::vector<CodeRange> ascii_complement(const std::vector<CodeRange>& set) {
  auto comp = normalize_ranges(set, true);
  std::vector<CodeRange> out;
  for (auto r : comp) {
    if (r.lo > 0x7F) break;
    r.hi = std::min<uint32_t>(r.hi, 0x7F);
    out.push_back(r);
  }
  return out;
}

class RegexParser {
 public:
  RegexParser(Grammar& g, std::string_view s, const RegexOptions& o) : g_(g), s_(s), opts_(o) {}

  int32_t parse() {
    std::vector<int32_t> alts;
    for (;;) {
      bool anchored_start = false, anchored_end = false;
      if (pos_ < s_.size() && s_[pos_] == '^') {
        anchored_start = true;
        ++pos_;
      }
      std::vector<int32_t> items = parse_sequence_items(0, /*top=*/true, &anchored_end);
      int32_t body = g_.seq(items);
      if (opts_.search) {
        int32_t any = g_.star(emit_class(normalize_ranges({}, true)));
        body = g_.seq({anchored_start ? g_.empty() : any, body, anchored_end ? g_.empty() : any});
      }
      alts.push_back(body);
      if (pos_ < s_.size() && s_[pos_] == '|') {
        ++pos_;
        continue;
      }
      break;
    }
    if (pos_ < s_.size()) fail(s_[pos_] == ')' ? "unbalanced ')'" : "unexpected character");
    return g_.alt(alts);
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { fail_at(pos_, what); }
  [[noreturn]] void fail_at(size_t at, const std::string& what) const {
    throw Error("regex: offset " + std::to_string(at) + ": " + what + " in /" + std::string(s_) + "/");
  }

  int32_t emit_class(const std::vector<CodeRange>& ranges) {
    return opts_.json_string ? json_char_class(g_, ranges) : g_.char_class(ranges);
  }
  int32_t emit_code_point(uint32_t cp) { return emit_class({{cp, cp}}); }

  int32_t parse_alternatives(int depth) {
    if (depth > kMaxNesting) fail("nesting deeper than " + std::to_string(kMaxNesting));
    std::vector<int32_t> alts;
    for (;;) {
      alts.push_back(g_.seq(parse_sequence_items(depth, false, nullptr)));
      if (pos_ < s_.size() && s_[pos_] == '|') {
        ++pos_;
        continue;
      }
      return g_.alt(alts);
    }
  }

  std::vector<int32_t> parse_sequence_items(int depth, bool top, bool* anchored_end) {
    std::vector<int32_t> items;
    while (pos_ < s_.size()) {
      char c = s_[pos_];
      if (c == '|' || c == ')') break;
      if (c == '$') {
        bool at_end = pos_ + 1 == s_.size() || s_[pos_ + 1] == '|';
        if (!top || !at_end) fail("'$' anchor inside the pattern is not supported");
        ++pos_;
        *anchored_end = true;
        break;
      }
      if (c == '^') fail("'^' anchor inside the pattern is not supported");
      size_t atom_at = pos_;
      int32_t atom = parse_atom(depth);
      items.push_back(parse_quantifiers(atom, atom_at));
    }
    return items;
  }

  bool parse_bound(int32_t* lo, int32_t* hi) {
    // At '{': a valid {n}, {n,}, {n,m}? Otherwise '{' is a literal (ECMA / PCRE rule).
    size_t p = pos_ + 1;
    auto num = [&](int64_t* v) {
      size_t b = p;
      *v = 0;
      while (p < s_.size() && s_[p] >= '0' && s_[p] <= '9') {
        *v = std::min<int64_t>(*v * 10 + (s_[p] - '0'), int64_t{kMaxRepeat} + 1);
        ++p;
      }
      return p > b;
    };
    int64_t a = 0, b = 0;
    if (!num(&a)) return false;
    b = a;
    if (p < s_.size() && s_[p] == ',') {
      ++p;
      if (!num(&b)) b = -1;
    }
    if (p >= s_.size() || s_[p] != '}') return false;
    if (a > kMaxRepeat || b > kMaxRepeat) fail("repetition bound above " + std::to_string(kMaxRepeat));
    if (b >= 0 && b < a) fail("repetition {n,m} with m < n");
    *lo = static_cast<int32_t>(a);
    *hi = b < 0 ? kUnbounded : static_cast<int32_t>(b);
    pos_ = p + 1;
    return true;
  }

  int32_t parse_quantifiers(int32_t atom, size_t atom_at) {
    bool quantified = false;
    for (;;) {
      if (pos_ >= s_.size()) break;
      char c = s_[pos_];
      int32_t lo = 0, hi = 0;
      if (c == '*') {
        lo = 0, hi = kUnbounded, ++pos_;
      } else if (c == '+') {
        lo = 1, hi = kUnbounded, ++pos_;
      } else if (c == '?') {
        lo = 0, hi = 1, ++pos_;
      } else if (c == '{' && parse_bound(&lo, &hi)) {
      } else {
        break;
      }
      if (quantified) fail_at(atom_at, "nested quantifier (write a group)");
      quantified = true;
      if (pos_ < s_.size() && s_[pos_] == '?') {
        ++pos_;  // lazy: same language
      } else if (pos_ < s_.size() && s_[pos_] == '+') {
        fail("possessive quantifier is not supported");
      }
      atom = g_.repeat(atom, lo, hi);
    }
    return atom;
  }

  uint32_t parse_hex(int min_digits, int max_digits) {
    uint32_t v = 0;
    int n = 0;
    while (n < max_digits && pos_ < s_.size()) {
      char c = s_[pos_];
      int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
      if (d < 0) break;
      v = v * 16 + static_cast<uint32_t>(d);
      if (v > kMaxCodePoint) fail("code point above U+10FFFF");
      ++pos_, ++n;
    }
    if (n < min_digits) fail("expected hex digits");
    return v;
  }

  // After '\': a class escape (fills `set`, returns true) or a single code point.
  bool parse_escape(uint32_t* cp, std::vector<CodeRange>* set, bool* ascii_only, bool in_class) {
    size_t at = pos_ - 1;
    if (pos_ >= s_.size()) fail("trailing backslash");
    char c = s_[pos_++];
    switch (c) {
      case 'd': *set = kDigit; return true;
      case 'w': *set = kWord; return true;
      case 's': *set = kSpace; return true;
      case 'D': *set = ascii_complement(kDigit), *ascii_only = true; return true;
      case 'W': *set = ascii_complement(kWord), *ascii_only = true; return true;
      case 'S': *set = normalize_ranges(kAnySpace, true); return true;
      case 't': *cp = '\t'; return false;
      case 'n': *cp = '\n'; return false;
      case 'r': *cp = '\r'; return false;
      case 'f': *cp = '\f'; return false;
      case 'v': *cp = '\v'; return false;
      case '0':
        if (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') fail_at(at, "octal escape is not supported");
        *cp = 0;
        return false;
      case 'x':
      case 'u':
        if (pos_ < s_.size() && s_[pos_] == '{') {
          ++pos_;
          *cp = parse_hex(1, 6);
          if (pos_ >= s_.size() || s_[pos_] != '}') fail("expected '}'");
          ++pos_;
        } else {
          *cp = parse_hex(c == 'x' ? 2 : 4, c == 'x' ? 2 : 4);
        }
        if (*cp >= 0xD800 && *cp <= 0xDFFF) fail_at(at, "surrogate code point");
        return false;
      case 'b':
        if (in_class) {
          *cp = '\b';
          return false;
        }
        fail_at(at, "word boundary \\b is not supported");
      case 'B': fail_at(at, "word boundary \\B is not supported");
      case 'k': fail_at(at, "back-reference \\k<name> is not supported");
      case 'p': case 'P': fail_at(at, "Unicode property escapes (\\p{..}) are not supported");
      case 'A': case 'z': case 'Z': case 'G': fail_at(at, std::string("anchor \\") + c + " is not supported");
      case 'c': fail_at(at, "control escape \\c is not supported");
      default: break;
    }
    if (c >= '1' && c <= '9') fail_at(at, "back-reference \\" + std::string(1, c) + " is not supported");
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) {
      fail_at(at, std::string("unknown escape \\") + c);
    }
    // Escaped punctuation or any other code point stands for itself.
    --pos_;
    *cp = next_code_point();
    return false;
  }

  uint32_t next_code_point() {
    uint32_t cp = 0;
    size_t n = utf8_decode(s_, pos_, &cp);
    if (n == 0) fail("invalid UTF-8");
    pos_ += n;
    return cp;
  }

  int32_t parse_class() {
    size_t at = pos_++;
    bool negated = false, ascii_only = false;
    if (pos_ < s_.size() && s_[pos_] == '^') {
      negated = true;
      ++pos_;
    }
    std::vector<CodeRange> ranges;
    bool first = true;
    for (;;) {
      if (pos_ >= s_.size()) fail_at(at, "unterminated character class");
      if (s_[pos_] == ']' && !first) {
        ++pos_;
        break;
      }
      if (s_[pos_] == '[' && pos_ + 1 < s_.size() && (s_[pos_ + 1] == ':' || s_[pos_ + 1] == '=' || s_[pos_ + 1] == '.')) {
        fail("POSIX classes [:name:] are not supported");
      }
      first = false;
      uint32_t lo = 0;
      std::vector<CodeRange> set;
      if (s_[pos_] == '\\') {
        ++pos_;
        const char shorthand = pos_ < s_.size() ? s_[pos_] : '\0';
        if (parse_escape(&lo, &set, &ascii_only, true)) {
          // Negated classes keep outputs valid under both engines: with \d or \w they stay
          // in ASCII; \s removes every engine's white space; \S keeps only ASCII space.
          if (shorthand == 'd' || shorthand == 'w' || shorthand == 'S') ascii_only = true;
          if (shorthand == 's' && negated) set = kAnySpace;
          ranges.insert(ranges.end(), set.begin(), set.end());
          continue;
        }
      } else {
        lo = next_code_point();
      }
      uint32_t hi = lo;
      if (pos_ + 1 < s_.size() && s_[pos_] == '-' && s_[pos_ + 1] != ']') {
        ++pos_;
        if (s_[pos_] == '\\') {
          ++pos_;
          std::vector<CodeRange> set2;
          bool dummy = false;
          if (parse_escape(&hi, &set2, &dummy, true)) fail("class shorthand as a range end");
        } else {
          hi = next_code_point();
        }
        if (hi < lo) fail("character range out of order");
      }
      ranges.push_back({lo, hi});
    }
    std::vector<CodeRange> norm = normalize_ranges(ranges, false);
    if (negated) norm = ascii_only ? ascii_complement(norm) : normalize_ranges(norm, true);
    return emit_class(norm);
  }

  int32_t parse_group(int depth) {
    size_t at = pos_++;
    if (pos_ < s_.size() && s_[pos_] == '?') {
      ++pos_;
      if (pos_ < s_.size() && s_[pos_] == ':') {
        ++pos_;
      } else if (pos_ < s_.size() && (s_[pos_] == '<' || s_[pos_] == 'P')) {
        const bool python = s_[pos_] == 'P';
        ++pos_;
        if (python && pos_ < s_.size() && s_[pos_] == '=') fail_at(at, "back-reference (?P=name) is not supported");
        if (python && (pos_ >= s_.size() || s_[pos_] != '<')) fail_at(at, "unknown group syntax");
        if (python) ++pos_;
        if (!python && pos_ < s_.size() && (s_[pos_] == '=' || s_[pos_] == '!')) fail_at(at, "lookbehind is not supported");
        const size_t name_at = pos_;
        while (pos_ < s_.size() && s_[pos_] != '>') ++pos_;
        if (pos_ >= s_.size() || pos_ == name_at) fail_at(at, "unterminated or empty group name");
        ++pos_;
      } else if (pos_ < s_.size() && (s_[pos_] == '=' || s_[pos_] == '!')) {
        fail_at(at, "lookahead is not supported");
      } else {
        fail_at(at, "inline flags and other (?...) groups are not supported");
      }
    }
    int32_t e = parse_alternatives(depth + 1);
    if (pos_ >= s_.size() || s_[pos_] != ')') fail_at(at, "unbalanced '('");
    ++pos_;
    return e;
  }

  int32_t parse_atom(int depth) {
    char c = s_[pos_];
    switch (c) {
      case '(': return parse_group(depth);
      case '[': return parse_class();
      case '.':
        ++pos_;
        return emit_class(normalize_ranges({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}, true));
      case '*': case '+': case '?': fail("quantifier without an operand");
      case '\\': {
        ++pos_;
        uint32_t cp = 0;
        std::vector<CodeRange> set;
        bool ascii_only = false;
        if (parse_escape(&cp, &set, &ascii_only, false)) return emit_class(normalize_ranges(set, false));
        return emit_code_point(cp);
      }
      default: return emit_code_point(next_code_point());
    }
  }

  Grammar& g_;
  std::string_view s_;
  RegexOptions opts_;
  size_t pos_ = 0;
};

}  // namespace

int32_t regex_to_expr(Grammar& g, std::string_view pattern, const RegexOptions& opts) {
  if (!utf8_valid(pattern)) throw Error("regex: the pattern is not valid UTF-8");
  RegexParser p(g, pattern, opts);
  return p.parse();
}

Grammar regex_to_grammar(std::string_view pattern) {
  Grammar g;
  int32_t root = g.declare_rule("root");
  g.define_rule(root, regex_to_expr(g, pattern));
  g.set_root(root);
  return g;
}

}  // namespace deepinfer::grammar
