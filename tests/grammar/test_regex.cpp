// Regex compiler: every construct against PCRE2 on sample strings, full-match semantics,
// and a clear error for each unsupported construct.
#include <gtest/gtest.h>

#include "core/error.h"
#include "grammar/regex_parser.h"
#include "grammar_test_util.h"
#include "json_validator.h"

using namespace deepinfer;
using namespace deepinfer::grammar;
using namespace deepinfer::grammar::testing;

namespace {
std::string error_of(const std::string& pattern) {
  try {
    regex_to_grammar(pattern);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(GrammarRegex, AgreesWithPcre2) {
  const std::vector<std::string> patterns = {
      "abc", "a|bc|", "(ab)*c", "a+b?c{2,3}", "[a-c]x[^a-c]", "\\d\\w\\s", "[\\d.]+", "(?:x|y){2}z", "(?<n>ab)+", "a.c",
      "x{3}", "x{2,}", "\\x41\\u00e9\\u{1F600}", "[\\-\\]]+", "\\.\\*\\+\\?\\(\\)", "[αβ]+", "a*?b+?", "^ab$", "a{,2}"};
  const std::vector<std::string> texts = {"",  "a",   "abc", "bc",  "c",     "abababc", "abcc", "abbccc", "xax", "axd",
                                          "1a ", "3.14", "xyz", "yxz", "ababab", "a\nc",    "abc", "xxx",  "xxxxx", "A\xC3\xA9\xF0\x9F\x98\x80",
                                          "-]]", ".*+?()", "\xCE\xB1\xCE\xB2", "aabb", "b", "ab", "a{,2}", "a{,}"};
  auto v = byte_vocab();
  for (const auto& p : patterns) {
    auto g = CompiledGrammar::compile(regex_to_grammar(p), v);
    for (const auto& t : texts) {
      EXPECT_EQ(matches(g, t), regex_matches(p, t, true)) << "/" << p << "/ on '" << t << "'";
    }
  }
}

TEST(GrammarRegex, DotAndNegatedShorthandsStayValidEverywhere) {
  auto v = byte_vocab();
  auto dot = CompiledGrammar::compile(regex_to_grammar("."), v);
  EXPECT_FALSE(matches(dot, "\n"));
  EXPECT_FALSE(matches(dot, "\r"));
  EXPECT_FALSE(matches(dot, "\xE2\x80\xA8"));  // U+2028
  EXPECT_TRUE(matches(dot, "\xE2\x80\xA7"));
  auto nd = CompiledGrammar::compile(regex_to_grammar("\\D"), v);
  EXPECT_TRUE(matches(nd, "x"));
  EXPECT_FALSE(matches(nd, "\xD9\xA3"));  // non-ASCII: a digit under Python's \d
  auto ns = CompiledGrammar::compile(regex_to_grammar("[^\\s]"), v);
  EXPECT_FALSE(matches(ns, "\xC2\xA0"));  // NBSP: white space under Python's \s
  EXPECT_TRUE(matches(ns, "\xC3\xA9"));
}

TEST(GrammarRegex, UnsupportedConstructsAreErrors) {
  EXPECT_NE(error_of("(a)\\1").find("back-reference \\1 is not supported"), std::string::npos);
  EXPECT_NE(error_of("(?<x>a)\\k<x>").find("back-reference"), std::string::npos);
  EXPECT_NE(error_of("(?P<x>a)(?P=x)").find("back-reference"), std::string::npos);
  EXPECT_NE(error_of("a(?=b)").find("lookahead"), std::string::npos);
  EXPECT_NE(error_of("(?<!a)b").find("lookbehind"), std::string::npos);
  EXPECT_NE(error_of("\\bword").find("word boundary"), std::string::npos);
  EXPECT_NE(error_of("\\p{L}").find("Unicode property"), std::string::npos);
  EXPECT_NE(error_of("(?i)abc").find("inline flags"), std::string::npos);
  EXPECT_NE(error_of("a++").find("possessive"), std::string::npos);
  EXPECT_NE(error_of("a**").find("nested quantifier"), std::string::npos);
  EXPECT_NE(error_of("a^b").find("'^' anchor inside"), std::string::npos);
  EXPECT_NE(error_of("a$b").find("'$' anchor inside"), std::string::npos);
  EXPECT_NE(error_of("(ab").find("unbalanced '('"), std::string::npos);
  EXPECT_NE(error_of("ab)").find("unbalanced ')'"), std::string::npos);
  EXPECT_NE(error_of("[ab").find("unterminated character class"), std::string::npos);
  EXPECT_NE(error_of("*a").find("quantifier without an operand"), std::string::npos);
  EXPECT_NE(error_of("a{3,1}").find("m < n"), std::string::npos);
  EXPECT_NE(error_of("\\q").find("unknown escape"), std::string::npos);
  EXPECT_NE(error_of("[[:alpha:]]").find("POSIX"), std::string::npos);
  EXPECT_NE(error_of("(a)\\1").find("offset 3"), std::string::npos);
}
