#include "grammar/ebnf_parser.h"

#include <unordered_map>
#include <unordered_set>

#include "core/error.h"
#include "grammar/utf8_ranges.h"

namespace deepinfer::grammar {
namespace {

constexpr int kMaxNesting = 256;

bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || (c >= '0' && c <= '9') || c == '-' || c == '.'; }

class Parser {
 public:
  Parser(std::string_view text, Grammar& g) : s_(text), g_(g) {}

  void parse_all() {
    skip_ws();
    while (pos_ < s_.size()) {
      if (s_[pos_] == ')') fail("unbalanced ')'");
      size_t name_pos = pos_;
      std::string name = parse_name();
      skip_ws();
      if (!eat("::=")) fail("expected '::=' after rule name '" + name + "'");
      int32_t rule = g_.declare_rule(name);
      if (defined_.count(rule)) fail_at(name_pos, "rule '" + name + "' is defined twice");
      defined_.insert(rule);
      int32_t body = parse_alternatives(0);
      g_.define_rule(rule, body);
      skip_ws();
    }
  }

  [[noreturn]] void fail(const std::string& what) const { fail_at(pos_, what); }
  [[noreturn]] void fail_at(size_t at, const std::string& what) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < at && i < s_.size(); ++i) {
      if (s_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    throw Error("grammar: line " + std::to_string(line) + ", column " + std::to_string(col) + ": " + what);
  }

  // Where each referenced rule was first used, for "undefined rule" errors.
  std::unordered_map<int32_t, size_t> first_use;

 private:
  void skip_ws() {
    while (pos_ < s_.size()) {
      char c = s_[pos_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else if (c == '#') {
        while (pos_ < s_.size() && s_[pos_] != '\n') ++pos_;
      } else {
        break;
      }
    }
  }
  bool eat(std::string_view tok) {
    if (s_.substr(pos_, tok.size()) == tok) {
      pos_ += tok.size();
      return true;
    }
    return false;
  }
  std::string parse_name() {
    if (pos_ >= s_.size() || !is_name_start(s_[pos_])) fail("expected a rule name");
    size_t b = pos_;
    while (pos_ < s_.size() && is_name_char(s_[pos_])) ++pos_;
    return std::string(s_.substr(b, pos_ - b));
  }
  // True when the text at pos_ is `name ::=` (the start of the next rule).
  bool at_rule_start() const {
    size_t p = pos_;
    if (p >= s_.size() || !is_name_start(s_[p])) return false;
    while (p < s_.size() && is_name_char(s_[p])) ++p;
    while (p < s_.size() && (s_[p] == ' ' || s_[p] == '\t' || s_[p] == '\n' || s_[p] == '\r')) ++p;
    return s_.substr(p, 3) == "::=";
  }

  int32_t parse_alternatives(int depth) {
    if (depth > kMaxNesting) fail("nesting deeper than " + std::to_string(kMaxNesting));
    std::vector<int32_t> alts{parse_sequence(depth)};
    skip_ws();
    while (pos_ < s_.size() && s_[pos_] == '|') {
      ++pos_;
      alts.push_back(parse_sequence(depth));
      skip_ws();
    }
    return g_.alt(std::move(alts));
  }

  int32_t parse_sequence(int depth) {
    std::vector<int32_t> items;
    for (;;) {
      skip_ws();
      if (pos_ >= s_.size()) break;
      char c = s_[pos_];
      if (c == '|' || c == ')') break;
      if (at_rule_start()) break;
      items.push_back(parse_postfix(depth));
    }
    return g_.seq(std::move(items));
  }

  int32_t parse_int() {
    if (pos_ >= s_.size() || s_[pos_] < '0' || s_[pos_] > '9') fail("expected a number");
    int64_t v = 0;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      v = v * 10 + (s_[pos_] - '0');
      if (v > kMaxRepeat) fail("repetition bound above " + std::to_string(kMaxRepeat));
      ++pos_;
    }
    return static_cast<int32_t>(v);
  }

  int32_t parse_postfix(int depth) {
    int32_t e = parse_primary(depth);
    for (;;) {
      if (pos_ >= s_.size()) break;
      char c = s_[pos_];
      if (c == '?') {
        ++pos_;
        e = g_.optional(e);
      } else if (c == '*') {
        ++pos_;
        e = g_.star(e);
      } else if (c == '+') {
        ++pos_;
        e = g_.plus(e);
      } else if (c == '{') {
        size_t at = pos_++;
        skip_ws();
        int32_t lo = parse_int(), hi = lo;
        skip_ws();
        if (eat(",")) {
          skip_ws();
          hi = (pos_ < s_.size() && s_[pos_] == '}') ? kUnbounded : parse_int();
          skip_ws();
        }
        if (!eat("}")) fail("expected '}' to close the repetition");
        if (hi != kUnbounded && hi < lo) fail_at(at, "repetition {m,n} with n < m");
        e = g_.repeat(e, lo, hi);
      } else {
        break;
      }
    }
    return e;
  }

  uint32_t parse_hex(int digits_min, int digits_max) {
    uint32_t v = 0;
    int n = 0;
    while (n < digits_max && pos_ < s_.size()) {
      char c = s_[pos_];
      int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
      if (d < 0) break;
      v = v * 16 + static_cast<uint32_t>(d);
      ++pos_;
      ++n;
      if (v > 0x10FFFF) fail("escape above U+10FFFF");
    }
    if (n < digits_min) fail("expected " + std::to_string(digits_min) + " hex digits");
    return v;
  }

  // After a backslash: one escaped code point.
  uint32_t parse_escape(bool in_class) {
    if (pos_ >= s_.size()) fail("unterminated escape");
    char c = s_[pos_++];
    switch (c) {
      case 'n': return '\n';
      case 'r': return '\r';
      case 't': return '\t';
      case 'f': return '\f';
      case 'v': return '\v';
      case '0': return 0;
      case '\\': case '"': case '\'': case '/': return static_cast<uint32_t>(c);
      case 'x': return parse_hex(2, 2);
      case 'u':
        if (pos_ < s_.size() && s_[pos_] == '{') {
          ++pos_;
          uint32_t v = parse_hex(1, 6);
          if (!eat("}")) fail("expected '}' after \\u{...");
          return v;
        }
        return parse_hex(4, 4);
      case 'U': return parse_hex(8, 8);
      default:
        if (in_class && (c == ']' || c == '[' || c == '-' || c == '^')) return static_cast<uint32_t>(c);
        fail_at(pos_ - 2, std::string("unknown escape '\\") + c + "'");
    }
  }

  uint32_t parse_code_point(bool in_class) {
    if (s_[pos_] == '\\') {
      ++pos_;
      uint32_t v = parse_escape(in_class);
      if (v >= 0xD800 && v <= 0xDFFF) fail("escape names a surrogate code point");
      return v;
    }
    uint32_t cp = 0;
    size_t n = utf8_decode(s_, pos_, &cp);
    if (n == 0) fail("invalid UTF-8");
    pos_ += n;
    return cp;
  }

  int32_t parse_literal() {
    char quote = s_[pos_++];
    std::string bytes;
    for (;;) {
      if (pos_ >= s_.size() || s_[pos_] == '\n') fail("unterminated string literal");
      if (s_[pos_] == quote) {
        ++pos_;
        break;
      }
      utf8_append(bytes, parse_code_point(false));
    }
    return g_.literal(bytes);
  }

  bool class_shorthand(std::vector<CodeRange>& out) {
    if (s_[pos_] != '\\' || pos_ + 1 >= s_.size()) return false;
    char c = s_[pos_ + 1];
    if (c == 'd') {
      out.push_back({'0', '9'});
    } else if (c == 'w') {
      out.insert(out.end(), {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}});
    } else if (c == 's') {
      out.insert(out.end(), {{'\t', '\r'}, {' ', ' '}});
    } else {
      return false;
    }
    pos_ += 2;
    return true;
  }

  int32_t parse_class() {
    size_t at = pos_++;
    bool negated = false;
    if (pos_ < s_.size() && s_[pos_] == '^') {
      negated = true;
      ++pos_;
    }
    std::vector<CodeRange> ranges;
    for (;;) {
      if (pos_ >= s_.size()) fail_at(at, "unterminated character class");
      if (s_[pos_] == ']') {
        ++pos_;
        break;
      }
      if (class_shorthand(ranges)) continue;
      uint32_t lo = parse_code_point(true), hi = lo;
      if (pos_ + 1 < s_.size() && s_[pos_] == '-' && s_[pos_ + 1] != ']') {
        ++pos_;
        hi = parse_code_point(true);
        if (hi < lo) fail("character range out of order");
      }
      ranges.push_back({lo, hi});
    }
    return g_.char_class(std::move(ranges), negated);
  }

  int32_t parse_primary(int depth) {
    char c = s_[pos_];
    if (c == '"' || c == '\'') return parse_literal();
    if (c == '[') return parse_class();
    if (c == '.') {
      ++pos_;
      return g_.any_char();
    }
    if (c == '(') {
      size_t at = pos_++;
      int32_t e = parse_alternatives(depth + 1);
      skip_ws();
      if (!eat(")")) fail_at(at, "unbalanced '('");
      return e;
    }
    if (is_name_start(c)) {
      size_t at = pos_;
      int32_t rule = g_.declare_rule(parse_name());
      first_use.emplace(rule, at);
      return g_.ref(rule);
    }
    fail(std::string("unexpected character '") + c + "'");
  }

  std::string_view s_;
  Grammar& g_;
  size_t pos_ = 0;
  std::unordered_set<int32_t> defined_;
};

}  // namespace

Grammar parse_ebnf(std::string_view text, std::string_view root_rule) {
  if (!utf8_valid(text)) throw Error("grammar: the text is not valid UTF-8");
  Grammar g;
  Parser p(text, g);
  p.parse_all();
  for (size_t i = 0; i < g.rules().size(); ++i) {
    if (g.rules()[i].body < 0) {
      auto it = p.first_use.find(static_cast<int32_t>(i));
      p.fail_at(it == p.first_use.end() ? 0 : it->second, "rule '" + g.rules()[i].name + "' is not defined");
    }
  }
  int32_t root = g.find_rule(root_rule);
  if (root < 0) throw Error("grammar: no rule named '" + std::string(root_rule) + "' (the start rule)");
  g.set_root(root);
  return g;
}

}  // namespace deepinfer::grammar
