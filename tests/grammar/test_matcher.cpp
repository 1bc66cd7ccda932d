// Matcher: accept/reject, EOS, special tokens, rollback, fork, jump-forward, UTF-8 split
// across tokens, and the cached bitmask against a byte-by-byte check of every token.
#include <gtest/gtest.h>

#include <random>

#include "grammar_test_util.h"

using namespace deepinfer;
using namespace deepinfer::grammar;
using namespace deepinfer::grammar::testing;

namespace {

const char* kJsonish = R"(
  root ::= value
  value ::= obj | arr | str | num | "true" | "false" | "null"
  obj ::= "{" ws (str ws ":" ws value ws ("," ws str ws ":" ws value ws)*)? "}"
  arr ::= "[" ws (value ws ("," ws value ws)*)? "]"
  str ::= "\"" ([^"\\\x00-\x1F] | "\\" ["\\/nt])* "\""
  num ::= "-"? [0-9]+ ("." [0-9]+)?
  ws ::= [ \n]*
)";

int32_t id_of(const Vocabulary& v, const std::string& s) {
  for (int32_t i = 0; i < v.size(); ++i) {
    if (v.token(i) == s && !v.excluded(i)) return i;
  }
  ADD_FAILURE() << "no token " << s;
  return -1;
}

}  // namespace

TEST(GrammarMatcher, AcceptRejectAndEos) {
  auto v = byte_vocab({"ab", "abc", "c<", "<|x|>"});
  auto g = compile_ebnf(R"(root ::= "ab" "c"+)", v);
  Matcher m(g);
  const int32_t eos = v->stop_ids()[0];
  EXPECT_FALSE(m.accept_token(eos));  // cannot end yet
  EXPECT_FALSE(m.accept_token(id_of(*v, "c")));
  EXPECT_TRUE(m.accept_token(id_of(*v, "ab")));
  EXPECT_FALSE(m.can_end());
  EXPECT_FALSE(m.accept_token(id_of(*v, "c<")));  // a token may not run past what is allowed
  EXPECT_TRUE(m.accept_token(id_of(*v, "c")));
  EXPECT_TRUE(m.can_end());
  EXPECT_FALSE(m.is_completed());  // more "c" may follow
  auto bits = bitmask_of(m);
  EXPECT_TRUE(bit(bits, eos));
  EXPECT_TRUE(bit(bits, id_of(*v, "c")));
  EXPECT_FALSE(bit(bits, id_of(*v, "ab")));
  EXPECT_TRUE(m.accept_token(eos));
  EXPECT_TRUE(m.is_terminated());
  EXPECT_FALSE(m.accept_token(id_of(*v, "c")));
  m.rollback(1);
  EXPECT_FALSE(m.is_terminated());
  EXPECT_TRUE(m.accept_token(id_of(*v, "c")));
}

TEST(GrammarMatcher, SpecialTokensNeverAllowedEvenIfTheirTextMatches) {
  std::vector<std::string> toks = {"<", "|", "x", ">", "<|x|>", "</s>"};
  auto v = Vocabulary::from_tokens(toks, {0, 0, 0, 0, 1, 1}, {5});
  auto g = compile_ebnf(R"(root ::= "<|x|>")", v);
  Matcher m(g);
  auto bits = bitmask_of(m);
  EXPECT_FALSE(bit(bits, 4));
  EXPECT_TRUE(bit(bits, 0));
  EXPECT_FALSE(m.accept_token(4));
  EXPECT_TRUE(m.accept_string("<|x|>"));
  EXPECT_TRUE(m.is_completed());
  bits = bitmask_of(m);
  for (int32_t i = 0; i < 5; ++i) EXPECT_FALSE(bit(bits, i));
  EXPECT_TRUE(bit(bits, 5));
}

TEST(GrammarMatcher, TokensSpanRuleBoundariesAndUtf8IsSplit) {
  // "é" = C3 A9, "中" = E4 B8 AD: tokens hold partial characters and cross rules.
  auto v = byte_vocab({"\"\xC3", "\xA9\"", "\xE4\xB8", "\xAD\"}", "\":\"", "{\"k", "\xC3\xA9"});
  auto g = compile_ebnf(R"(
    root ::= "{" key ":" val "}"
    key ::= "\"" [a-z]+ "\""
    val ::= "\"" [^"]* "\""
  )", v);
  Matcher m(g);
  EXPECT_TRUE(m.accept_token(id_of(*v, "{\"k")));
  EXPECT_TRUE(m.accept_token(id_of(*v, "\":\"")));
  expect_mask_exact(m, "after key");
  EXPECT_TRUE(m.accept_token(id_of(*v, "\xE4\xB8")));
  auto bits = bitmask_of(m);
  EXPECT_FALSE(bit(bits, '"'));                    // inside a character
  EXPECT_TRUE(bit(bits, id_of(*v, "\xAD\"}")));    // finishes it, the string and the object
  EXPECT_FALSE(bit(bits, id_of(*v, "\xC3\xA9")));  // not a continuation byte
  expect_mask_exact(m, "mid character");
  EXPECT_TRUE(m.accept_token(id_of(*v, "\xAD\"}")));
  EXPECT_TRUE(m.is_completed());
  // Invalid UTF-8 is rejected even where any character is allowed.
  Matcher m2(g);
  EXPECT_TRUE(m2.accept_string("{\"a\":\""));
  EXPECT_FALSE(m2.accept_string("\xC3\x28"));
  EXPECT_FALSE(m2.accept_string("\xED\xA0\x80"));  // a surrogate
  EXPECT_TRUE(m2.accept_string("\xF0\x9F\x98\x80\"}"));
}

TEST(GrammarMatcher, RollbackThenReacceptGivesTheSameState) {
  auto v = fixture_vocab();
  auto g = compile_ebnf(kJsonish, v);
  std::mt19937 rng(7);
  std::vector<uint32_t> bits(static_cast<size_t>(v->bitmask_words()));
  for (int trial = 0; trial < 20; ++trial) {
    Matcher m(g);
    std::vector<int32_t> taken;
    std::vector<std::string> states{m.debug_state()};
    for (int step = 0; step < 40 && !m.is_terminated(); ++step) {
      m.fill_next_token_bitmask(bits);
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < v->size(); ++id) {
        if (bit(bits, id)) allowed.push_back(id);
      }
      ASSERT_FALSE(allowed.empty());
      int32_t t = allowed[rng() % allowed.size()];
      ASSERT_TRUE(m.accept_token(t)) << v->token(t);
      taken.push_back(t);
      states.push_back(m.debug_state());
    }
    const size_t n = taken.size();
    const size_t k = 1 + rng() % n;
    m.rollback(static_cast<int>(k));
    EXPECT_EQ(m.debug_state(), states[n - k]);
    for (size_t i = n - k; i < n; ++i) {
      ASSERT_TRUE(m.accept_token(taken[i]));
      EXPECT_EQ(m.debug_state(), states[i + 1]);
    }
    m.rollback(static_cast<int>(n));
    EXPECT_EQ(m.debug_state(), states[0]);
  }
}

TEST(GrammarMatcher, ForksAreIndependent) {
  auto v = byte_vocab({"[1", ",2", "]"});
  auto g = compile_ebnf(kJsonish, v);
  Matcher a(g);
  ASSERT_TRUE(a.accept_string("[[1,"));
  Matcher b = a.fork();
  EXPECT_TRUE(a.accept_string("2]]"));
  EXPECT_TRUE(a.is_completed());
  EXPECT_FALSE(b.can_end());
  EXPECT_TRUE(b.accept_string("{\"x\":[]}"));
  EXPECT_FALSE(b.accept_string("}"));
  EXPECT_TRUE(b.accept_string("]]"));
  EXPECT_TRUE(b.is_completed());
  a.rollback(1);
  EXPECT_FALSE(a.can_end());
  EXPECT_TRUE(b.is_completed());
}

TEST(GrammarMatcher, JumpForward) {
  auto v = byte_vocab();
  auto g = compile_ebnf(R"(root ::= "{\"name\": \"" [a-z]+ "\", \"age\": " [0-9]+ "}")", v);
  Matcher m(g);
  EXPECT_EQ(m.find_jump_forward_string(), "{\"name\": \"");
  ASSERT_TRUE(m.accept_string("{\"name\": \"bo"));
  EXPECT_EQ(m.find_jump_forward_string(), "");
  ASSERT_TRUE(m.accept_string("b\""));
  EXPECT_EQ(m.find_jump_forward_string(), ", \"age\": ");
  auto g2 = compile_ebnf(R"(root ::= "ab" ("cd" | "ce") "f")", v);
  Matcher m2(g2);
  EXPECT_EQ(m2.find_jump_forward_string(), "abc");
}

TEST(GrammarMatcher, BitmaskEqualsBruteForceOnTheFixtureVocabulary) {
  auto v = fixture_vocab();
  std::mt19937 rng(11);
  std::vector<uint32_t> bits(static_cast<size_t>(v->bitmask_words()));
  for (const char* text : {kJsonish, R"(root ::= ("a" | "the" | " ")+ "." | [0-9]{2,4} "!")",
                           R"G(root ::= x "." x  x ::= "(" x? ")" | [a-z])G"}) {
    for (int depth : {0, 1, 3}) {
      CompileOptions o;
      o.max_tag_depth = depth;
      auto g = compile_ebnf(text, v, o);
      for (int trial = 0; trial < 6; ++trial) {
        Matcher m(g);
        for (int step = 0; step < 30 && !m.is_terminated(); ++step) {
          expect_mask_exact(m, std::string(text).substr(0, 20) + " step " + std::to_string(step));
          m.fill_next_token_bitmask(bits);
          std::vector<int32_t> allowed;
          for (int32_t id = 0; id < v->size(); ++id) {
            if (bit(bits, id)) allowed.push_back(id);
          }
          if (allowed.empty()) break;
          ASSERT_TRUE(m.accept_token(allowed[rng() % allowed.size()]));
        }
      }
    }
  }
}
