// EBNF parser: syntax, errors with line/column, printing and re-parsing.
#include <gtest/gtest.h>

#include "core/error.h"
#include "grammar/ebnf_parser.h"
#include "grammar_test_util.h"

using namespace deepinfer;
using namespace deepinfer::grammar;
using namespace deepinfer::grammar::testing;

namespace {

std::string error_of(const std::string& text) {
  try {
    parse_ebnf(text);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(GrammarEbnf, ParsesRulesAcrossLinesWithComments) {
  Grammar g = parse_ebnf(R"(
    # a comment
    root ::= greeting " " name   # trailing comment
      "!"
    greeting ::= "hello" | 'hi'
    name ::= [A-Z] [a-z]*
  )");
  EXPECT_EQ(g.rules().size(), 3u);
  EXPECT_EQ(g.rule(g.root()).name, "root");
  auto cg = CompiledGrammar::compile(g, byte_vocab());
  EXPECT_TRUE(matches(cg, "hello Bob!"));
  EXPECT_TRUE(matches(cg, "hi X!"));
  EXPECT_FALSE(matches(cg, "hello bob!"));
  EXPECT_FALSE(matches(cg, "hello Bob"));
}

TEST(GrammarEbnf, RepetitionOperators) {
  auto v = byte_vocab();
  auto g = compile_ebnf(R"(root ::= "a"{2,3} "b"{2} "c"{1,} "d"? "e"* "f"+)", v);
  EXPECT_TRUE(matches(g, "aabbcf"));
  EXPECT_TRUE(matches(g, "aaabbcccdeeeff"));
  EXPECT_FALSE(matches(g, "abbcf"));
  EXPECT_FALSE(matches(g, "aaaabbcf"));
  EXPECT_FALSE(matches(g, "aabbbcf"));
  EXPECT_FALSE(matches(g, "aabbf"));
  auto g2 = compile_ebnf(R"(root ::= ("ab" | "c"){0,2} "x"{0})", v);
  EXPECT_TRUE(matches(g2, ""));
  EXPECT_TRUE(matches(g2, "abc"));
  EXPECT_FALSE(matches(g2, "abcab"));
}

TEST(GrammarEbnf, EscapesAndClasses) {
  auto v = byte_vocab();
  auto g = compile_ebnf(R"(root ::= "\x41\u00e9\U0001F600\n\t\"\\" [^a-z\]] . [\d\w] "\u{48}")", v);
  EXPECT_TRUE(matches(g, "A\xC3\xA9\xF0\x9F\x98\x80\n\t\"\\Q\xE4\xB8\xAD_H"));
  EXPECT_FALSE(matches(g, "A\xC3\xA9\xF0\x9F\x98\x80\n\t\"\\q\xE4\xB8\xAD_H"));
  EXPECT_FALSE(matches(g, "A\xC3\xA9\xF0\x9F\x98\x80\n\t\"\\]\xE4\xB8\xAD_H"));
  // `.` never produces invalid UTF-8 or a surrogate.
  auto dot = compile_ebnf("root ::= .", v);
  EXPECT_TRUE(matches(dot, "\xF4\x8F\xBF\xBF"));
  EXPECT_FALSE(matches(dot, "\xED\xA0\x80"));
  EXPECT_FALSE(matches(dot, "\xC0\x80"));
  EXPECT_FALSE(matches(dot, "\xFF"));
}

TEST(GrammarEbnf, RecursionIsSupported) {
  auto g = compile_ebnf(R"G(
    root ::= expr
    expr ::= term ("+" term)*
    term ::= [0-9]+ | "(" expr ")"
  )G", byte_vocab());
  EXPECT_TRUE(matches(g, "1+(2+(3+4))+5"));
  EXPECT_TRUE(matches(g, "((((((7))))))"));
  EXPECT_FALSE(matches(g, "((1)"));
  EXPECT_FALSE(matches(g, "1+"));
}

TEST(GrammarEbnf, Errors) {
  EXPECT_NE(error_of("root ::= \"abc").find("line 1, column 14: unterminated string literal"), std::string::npos)
      << error_of("root ::= \"abc");
  EXPECT_NE(error_of("root ::= foo").find("rule 'foo' is not defined"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\"\nroot ::= \"b\"").find("line 2, column 1: rule 'root' is defined twice"), std::string::npos)
      << error_of("root ::= \"a\"\nroot ::= \"b\"");
  EXPECT_NE(error_of("start ::= \"a\"").find("no rule named 'root'"), std::string::npos);
  EXPECT_NE(error_of("root ::= (\"a\"").find("unbalanced '('"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\")").find("unbalanced ')'"), std::string::npos);
  EXPECT_NE(error_of("root ::= [a-").find("unterminated character class"), std::string::npos);
  EXPECT_NE(error_of("root ::= [z-a]").find("out of order"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\"{3,2}").find("n < m"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\"{1000000}").find("repetition bound"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"\\q\"").find("unknown escape"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"\\uD800\"").find("surrogate"), std::string::npos);
  EXPECT_NE(error_of("root ::= @").find("unexpected character '@'"), std::string::npos);
  EXPECT_NE(error_of("root \"a\"").find("expected '::='"), std::string::npos);
  EXPECT_NE(error_of(std::string("root ::= \"\xFF\"")).find("not valid UTF-8"), std::string::npos);
  EXPECT_NE(error_of(std::string(300, '(')).find("expected a rule name"), std::string::npos);
  EXPECT_NE(error_of("root ::= " + std::string(300, '(')).find("nesting deeper"), std::string::npos);
}

TEST(GrammarEbnf, CompileErrors) {
  auto v = byte_vocab();
  auto err = [&](const std::string& text) {
    try {
      compile_ebnf(text, v);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(err("root ::= root \"a\" | \"b\"").find("rule 'root' is left-recursive"), std::string::npos);
  EXPECT_NE(err("root ::= x\nx ::= y? root \"a\" | \"c\"\ny ::= \"b\"").find("left-recursive"), std::string::npos);
  EXPECT_NE(err("root ::= x\nx ::= \"a\" x").find("accepts no string"), std::string::npos);
  EXPECT_NE(err("root ::= [^\\x00-\\U0010FFFF]").find("accepts no string"), std::string::npos);
  EXPECT_NE(err("root ::= (\"a\"{1000}){1000}").find("grammar too large"), std::string::npos);
  // Right recursion and recursion behind a byte are fine.
  EXPECT_EQ(err("root ::= \"a\" root | \"b\""), "");
}

TEST(GrammarEbnf, PrintThenParseGivesTheSameLanguage) {
  const std::string text = R"(
    root ::= "{" ws (pair ("," ws pair)*)? "}"
    pair ::= str ws ":" ws val
    str ::= "\"" ([^"\\\x00-\x1F] | "\\" ["\\/bfnrt])* "\""
    val ::= str | [0-9]+ | root | "[" (val ("," val)*)? "]" | "\u00e9\U0001F600"
    ws ::= [ \t\n]{0,3}
  )";
  Grammar g = parse_ebnf(text);
  std::string printed = g.to_ebnf();
  Grammar g2 = parse_ebnf(printed);
  EXPECT_EQ(g2.to_ebnf(), printed);
  auto v = byte_vocab();
  auto a = CompiledGrammar::compile(g, v), b = CompiledGrammar::compile(g2, v);
  for (std::string s : {"{}", "{\"a\":1}", "{ \"a\" : [1,{\"b\":\"\\n\"}], \"c\":\"\xC3\xA9\xF0\x9F\x98\x80\"}", "{\"a\":}", "{\"a\":[1,]}"}) {
    EXPECT_EQ(matches(a, s), matches(b, s)) << s;
  }
  EXPECT_TRUE(matches(a, "{ \"a\" : [1,{\"b\":\"\\n\"}], \"c\":\xC3\xA9\xF0\x9F\x98\x80}"));
}
