#include "grammar/grammar.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "grammar/utf8_ranges.h"

namespace deepinfer::grammar {

std::vector<CodeRange> normalize_ranges(std::vector<CodeRange> ranges, bool negated) {
  for (auto& r : ranges) {
    if (r.lo > r.hi) std::swap(r.lo, r.hi);
    r.hi = std::min(r.hi, kMaxCodePoint);
  }
  std::erase_if(ranges, [](const CodeRange& r) { return r.lo > kMaxCodePoint; });
  std::sort(ranges.begin(), ranges.end(), [](const CodeRange& a, const CodeRange& b) { return a.lo < b.lo; });
  std::vector<CodeRange> merged;
  for (const auto& r : ranges) {
    if (!merged.empty() && r.lo <= merged.back().hi + 1) {
      merged.back().hi = std::max(merged.back().hi, r.hi);
    } else {
      merged.push_back(r);
    }
  }
  if (negated) {
    std::vector<CodeRange> comp;
    uint32_t next = 0;
    for (const auto& r : merged) {
      if (r.lo > next) comp.push_back({next, r.lo - 1});
      next = r.hi + 1;
    }
    if (next <= kMaxCodePoint) comp.push_back({next, kMaxCodePoint});
    merged = std::move(comp);
  }
  // Remove the surrogates.
  std::vector<CodeRange> out;
  for (const auto& r : merged) {
    if (r.hi < 0xD800 || r.lo > 0xDFFF) {
      out.push_back(r);
      continue;
    }
    if (r.lo < 0xD800) out.push_back({r.lo, 0xD7FF});
    if (r.hi > 0xDFFF) out.push_back({0xE000, r.hi});
  }
  return out;
}

int32_t Grammar::add(Expr e) {
  exprs_.push_back(std::move(e));
  return static_cast<int32_t>(exprs_.size() - 1);
}

int32_t Grammar::empty() { return add(Expr{}); }

int32_t Grammar::literal(std::string_view bytes) {
  if (bytes.empty()) return empty();
  DI_CHECK(utf8_valid(bytes), "grammar literal is not valid UTF-8");
  Expr e;
  e.kind = ExprKind::kLiteral;
  e.literal = std::string(bytes);
  return add(std::move(e));
}

int32_t Grammar::char_class(std::vector<CodeRange> ranges, bool negated) {
  Expr e;
  e.kind = ExprKind::kCharClass;
  e.ranges = normalize_ranges(std::move(ranges), negated);
  return add(std::move(e));
}

int32_t Grammar::any_char() { return char_class({}, true); }

int32_t Grammar::ref(int32_t rule) {
  DI_CHECK(rule >= 0 && rule < static_cast<int32_t>(rules_.size()), "rule id out of range");
  Expr e;
  e.kind = ExprKind::kRuleRef;
  e.rule = rule;
  return add(std::move(e));
}

int32_t Grammar::seq(std::vector<int32_t> children) {
  std::erase_if(children, [&](int32_t c) { return expr(c).kind == ExprKind::kEmpty; });
  if (children.empty()) return empty();
  if (children.size() == 1) return children[0];
  Expr e;
  e.kind = ExprKind::kSeq;
  e.children = std::move(children);
  return add(std::move(e));
}

int32_t Grammar::alt(std::vector<int32_t> children) {
  DI_CHECK(!children.empty(), "alternation needs at least one branch");
  if (children.size() == 1) return children[0];
  Expr e;
  e.kind = ExprKind::kAlt;
  e.children = std::move(children);
  return add(std::move(e));
}

int32_t Grammar::repeat(int32_t child, int32_t min, int32_t max) {
  DI_CHECK(min >= 0 && (max == kUnbounded || max >= min), "bad repetition bounds");
  if (max == 0) return empty();
  if (min == 1 && max == 1) return child;
  Expr e;
  e.kind = ExprKind::kRepeat;
  e.children = {child};
  e.min = min;
  e.max = max;
  return add(std::move(e));
}

int32_t Grammar::declare_rule(std::string_view name) {
  int32_t id = find_rule(name);
  if (id >= 0) return id;
  rules_.push_back(Rule{std::string(name), -1});
  rule_index_.emplace(std::string(name), static_cast<int32_t>(rules_.size() - 1));
  return static_cast<int32_t>(rules_.size() - 1);
}

int32_t Grammar::new_rule(std::string_view prefix) {
  for (;;) {
    std::string name = std::string(prefix) + "_" + std::to_string(fresh_++);
    if (find_rule(name) < 0) return declare_rule(name);
  }
}

void Grammar::define_rule(int32_t rule, int32_t body) {
  DI_CHECK(rule >= 0 && rule < static_cast<int32_t>(rules_.size()), "rule id out of range");
  rules_[static_cast<size_t>(rule)].body = body;
}

int32_t Grammar::find_rule(std::string_view name) const {
  auto it = rule_index_.find(std::string(name));
  return it == rule_index_.end() ? -1 : it->second;
}

void Grammar::validate() const {
  if (root_ < 0 || root_ >= static_cast<int32_t>(rules_.size())) throw Error("grammar: no root rule");
  for (const auto& r : rules_) {
    if (r.body < 0) throw Error("grammar: rule '" + r.name + "' is referenced but never defined");
    if (static_cast<size_t>(r.body) >= exprs_.size()) throw Error("grammar: rule '" + r.name + "' has an invalid body");
  }
  // Nesting depth of every expression, children first (their ids are smaller), so no walk
  // here recurses.
  std::vector<int32_t> depth(exprs_.size(), 1);
  for (size_t id = 0; id < exprs_.size(); ++id) {
    for (int32_t c : exprs_[id].children) {
      if (c < 0 || static_cast<size_t>(c) >= id) throw Error("grammar: expression " + std::to_string(id) + " has an invalid child");
      depth[id] = std::max(depth[id], depth[static_cast<size_t>(c)] + 1);
    }
  }
  for (const auto& r : rules_) {
    if (depth[static_cast<size_t>(r.body)] > kMaxExprDepth) {
      throw Error("grammar: rule '" + r.name + "' nests expressions deeper than " + std::to_string(kMaxExprDepth) +
                  " levels (groups, repetitions of repetitions, or a deeply nested schema value); split it into rules");
    }
  }
}

std::string ebnf_quote(std::string_view bytes) {
  std::string out;
  size_t i = 0;
  while (i < bytes.size()) {
    uint32_t cp = 0;
    size_t n = utf8_decode(bytes, i, &cp);
    char buf[16];
    if (n == 0) {  // not UTF-8 (never produced by the compilers); keep the byte's value
      std::snprintf(buf, sizeof buf, "\\x%02X", static_cast<unsigned char>(bytes[i]));
      out += buf;
      ++i;
      continue;
    }
    if (cp == '"' || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp < 0x20 || cp == 0x7F) {
      std::snprintf(buf, sizeof buf, "\\x%02X", cp);
      out += buf;
    } else {
      out.append(bytes.substr(i, n));
    }
    i += n;
  }
  return out;
}

namespace {

std::string class_char(uint32_t cp) {
  char buf[16];
  if (cp == ']' || cp == '\\' || cp == '-' || cp == '^' || cp == '[') return std::string("\\") + static_cast<char>(cp);
  if (cp < 0x20 || cp == 0x7F) {
    std::snprintf(buf, sizeof buf, "\\x%02X", cp);
    return buf;
  }
  if (cp >= 0x80) {
    if (cp <= 0xFFFF) {
      std::snprintf(buf, sizeof buf, "\\u%04X", cp);
    } else {
      std::snprintf(buf, sizeof buf, "\\U%08X", cp);
    }
    return buf;
  }
  return std::string(1, static_cast<char>(cp));
}

// a + b + c without `const char* + std::string&&` (GCC 12 warns falsely on it: -Wrestrict).
std::string wrap(const char* a, const std::string& b, const char* c) {
  std::string s = a;
  s += b;
  s += c;
  return s;
}

class Printer {
 public:
  explicit Printer(const Grammar& g) : g_(g) {}
  // prec: 0 = alternation context, 1 = sequence element, 2 = repetition operand
  std::string print(int32_t id, int prec) const {
    const Expr& e = g_.expr(id);
    switch (e.kind) {
      case ExprKind::kEmpty: return "\"\"";
      case ExprKind::kLiteral: return wrap("\"", ebnf_quote(e.literal), "\"");
      case ExprKind::kCharClass: {
        if (e.ranges.empty()) return "[^\\x00-\\U0010FFFF]";
        std::string s = "[";
        for (const auto& r : e.ranges) {
          s += class_char(r.lo);
          if (r.hi != r.lo) {
            s += '-';
            s += class_char(r.hi);
          }
        }
        return s + "]";
      }
      case ExprKind::kRuleRef: return g_.rule(e.rule).name;
      case ExprKind::kSeq: {
        std::string s;
        for (size_t i = 0; i < e.children.size(); ++i) {
          if (i) s += ' ';
          s += print(e.children[i], 1);
        }
        return prec >= 2 ? wrap("(", s, ")") : s;
      }
      case ExprKind::kAlt: {
        std::string s;
        for (size_t i = 0; i < e.children.size(); ++i) {
          if (i) s += " | ";
          s += print(e.children[i], 0);
        }
        return prec >= 1 ? wrap("(", s, ")") : s;
      }
      case ExprKind::kRepeat: {
        std::string s = print(e.children[0], 2);
        if (e.min == 0 && e.max == 1) return s + "?";
        if (e.min == 0 && e.max == kUnbounded) return s + "*";
        if (e.min == 1 && e.max == kUnbounded) return s + "+";
        s += '{';
        s += std::to_string(e.min);
        if (e.max == kUnbounded) return s + ",}";
        if (e.min == e.max) return s + "}";
        s += ',';
        s += std::to_string(e.max);
        return s + "}";
      }
    }
    return "";
  }

 private:
  const Grammar& g_;
};

}  // namespace

std::string Grammar::to_ebnf() const {
  Printer p(*this);
  std::string out;
  auto emit = [&](const Rule& r) {
    out += r.name + " ::= " + (r.body >= 0 ? p.print(r.body, 0) : std::string("\"\"")) + "\n";
  };
  if (root_ >= 0) emit(rules_[static_cast<size_t>(root_)]);
  for (size_t i = 0; i < rules_.size(); ++i) {
    if (static_cast<int32_t>(i) != root_) emit(rules_[i]);
  }
  return out;
}

}  // namespace deepinfer::grammar
