// Grammar: the context-free grammar every structured-output source compiles to.
//
// Purpose: a small expression IR (literals, code-point classes, rule references, sequence,
// alternation, counted repetition) organised in named rules, plus its text form, the EBNF
// below. JSON Schema, regular expressions and user grammars all become a Grammar; the
// automaton compiler (grammar/automaton.h) turns it into byte-level tables.
//
// EBNF syntax (GBNF-like; `parse_ebnf` in grammar/ebnf_parser.h reads it, `to_ebnf` writes it):
//   # comment to the end of the line
//   root  ::= "{" ws pair ( "," ws pair )* "}"     a rule: name ::= expression
//   name  : [A-Za-z_][A-Za-z0-9_.-]*  (a rule may span lines; the next `name ::=` ends it)
//   "abc" 'abc'   literal text (UTF-8); escapes \n \r \t \f \v \0 \\ \" \' \/ \xHH \uHHHH
//                 \UHHHHHHHH and \u{H..} (code points)
//   [a-z_] [^"\\] character class over Unicode code points (escapes as above, plus \] \[ \-
//                 \^ and \d \w \s); `^` first negates (the complement over all scalar values)
//   .             any code point (U+0000..U+10FFFF without surrogates)
//   name          a reference to a rule (defined anywhere in the text)
//   ( e )         grouping;  e1 e2  sequence;  e1 | e2  alternation (lowest precedence)
//   e?  e*  e+  e{m}  e{m,}  e{m,n}   repetition (binds tightest)
// The start rule is `root` unless another name is given. The grammar describes the output's
// bytes: literals and classes are matched as UTF-8, so every accepted output is valid UTF-8.
// A rule may be recursive, but not left-recursive (a rule that can reach itself without
// consuming a byte is a compile error naming it).
//
// Invariants: expression ids index exprs(); a Seq/Alt/Repeat's children have smaller ids
// than the expression itself (builders take existing ids); every RuleRef names an existing rule; CharClass
// ranges are sorted, disjoint, non-adjacent scalar values (negation is resolved when the
// class is built). Exprs form a DAG (an id may be used in several places).
// Threading: a Grammar is a value; build it on one thread, then share it read-only.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace deepinfer::grammar {

struct CodeRange {
  uint32_t lo = 0, hi = 0;  // inclusive Unicode scalar values
  bool operator==(const CodeRange&) const = default;
};

inline constexpr uint32_t kMaxCodePoint = 0x10FFFF;
inline constexpr int32_t kUnbounded = -1;
// Deepest nesting of one rule body's expression tree (a rule reference counts as one level;
// inlining a referenced rule is bounded separately by the automaton compiler). The
// compilers walk expressions recursively, so validate() rejects deeper grammars up front.
inline constexpr int32_t kMaxExprDepth = 2000;

enum class ExprKind : uint8_t { kEmpty, kLiteral, kCharClass, kRuleRef, kSeq, kAlt, kRepeat };

struct Expr {
  ExprKind kind = ExprKind::kEmpty;
  std::string literal;              // kLiteral: bytes (UTF-8), never empty
  std::vector<CodeRange> ranges;    // kCharClass: normalised (sorted, disjoint, merged)
  int32_t rule = -1;                // kRuleRef
  std::vector<int32_t> children;    // kSeq / kAlt: expr ids; kRepeat: exactly one
  int32_t min = 0, max = 0;         // kRepeat: max == kUnbounded for no upper bound
};

struct Rule {
  std::string name;
  int32_t body = -1;  // expr id; -1 while declared but not yet defined
};

// Sorts, merges and (when `negated`) complements ranges over the Unicode scalar values
// (U+0000..U+10FFFF without the surrogates U+D800..U+DFFF, which are always removed).
std::vector<CodeRange> normalize_ranges(std::vector<CodeRange> ranges, bool negated);

class Grammar {
 public:
  // Expression builders; each returns the new expr id. seq/alt of one child return it.
  int32_t empty();
  int32_t literal(std::string_view bytes);  // "" gives empty()
  int32_t char_class(std::vector<CodeRange> ranges, bool negated = false);
  int32_t any_char();
  int32_t ref(int32_t rule);
  int32_t seq(std::vector<int32_t> children);
  int32_t alt(std::vector<int32_t> children);
  int32_t repeat(int32_t child, int32_t min, int32_t max);  // max: kUnbounded or >= min
  int32_t optional(int32_t child) { return repeat(child, 0, 1); }
  int32_t star(int32_t child) { return repeat(child, 0, kUnbounded); }
  int32_t plus(int32_t child) { return repeat(child, 1, kUnbounded); }

  // Rules: declare (or find) by name, then define. Names must be unique.
  int32_t declare_rule(std::string_view name);
  // A fresh rule whose name starts with `prefix` (made unique with a counter).
  int32_t new_rule(std::string_view prefix);
  void define_rule(int32_t rule, int32_t body);
  int32_t find_rule(std::string_view name) const;  // -1 if absent

  void set_root(int32_t rule) { root_ = rule; }
  int32_t root() const { return root_; }
  const std::vector<Rule>& rules() const { return rules_; }
  const Rule& rule(int32_t id) const { return rules_.at(static_cast<size_t>(id)); }
  const Expr& expr(int32_t id) const { return exprs_.at(static_cast<size_t>(id)); }
  size_t n_exprs() const { return exprs_.size(); }

  // Throws deepinfer::Error naming the first undefined rule, a missing root, or a rule whose
  // expression is nested deeper than kMaxExprDepth.
  void validate() const;
  // The grammar in the EBNF syntax above (parse_ebnf(to_ebnf()) gives the same language).
  std::string to_ebnf() const;

 private:
  int32_t add(Expr e);
  std::vector<Expr> exprs_;
  std::vector<Rule> rules_;
  std::unordered_map<std::string, int32_t> rule_index_;  // name -> rule id
  int32_t root_ = -1;
  int32_t fresh_ = 0;
};

// Escapes bytes as an EBNF double-quoted literal body (printable ASCII kept; others \xHH /
// \uHHHH for valid UTF-8 code points).
std::string ebnf_quote(std::string_view bytes);

}  // namespace deepinfer::grammar
