// Input-controlled sizes and depths: long chains of rules, deeply nested expressions and
// documents, many properties, long names (no recursion whose depth the input sets; a
// clear error where a limit applies); integer bounds beyond 2^53 enforced exactly; oneOf
// accepted only where its branches exclude each other.
#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include <random>

#include "core/error.h"
#include "grammar/json_schema.h"
#include "grammar/regex_parser.h"
#include "grammar_test_util.h"
#include "json_validator.h"

using namespace deepinfer;
using namespace deepinfer::grammar;
using namespace deepinfer::grammar::testing;
using ::testing::HasSubstr;
using ojson = nlohmann::ordered_json;

namespace {

// Concatenation without `const char* + std::string` (GCC 12 warns falsely on it: -Wrestrict).
template <class... A>
std::string cat(const A&... a) {
  std::string s;
  ((s += a), ...);
  return s;
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::shared_ptr<const CompiledGrammar> schema(const std::string& text) {
  JsonSchemaOptions o;
  o.any_whitespace = false;
  return CompiledGrammar::compile(json_schema_to_grammar(text, o), byte_vocab(), {.precompute = false});
}

std::string schema_error(const std::string& text) {
  return error_of([&] { json_schema_to_grammar(text); });
}

std::string schema_error_compiled(const std::string& text) {
  return error_of([&] { schema(text); });
}

}  // namespace

TEST(GrammarLimits, LongChainOfRulesCompiles) {
  // r0 ::= "x" r1, ..., each rule used once: inlining it all would nest 40000 levels deep.
  const int n = 40000;
  std::string text;
  for (int i = 0; i < n; ++i) text += cat("r", std::to_string(i), " ::= \"x\" r", std::to_string(i + 1), "\n");
  text += cat("r", std::to_string(n), " ::= \"y\"\n");
  auto g = CompiledGrammar::compile(parse_ebnf(text, "r0"), byte_vocab(), {.precompute = false});
  EXPECT_TRUE(matches(g, std::string(n, 'x') + "y"));
  EXPECT_FALSE(matches(g, std::string(n - 1, 'x') + "y"));
  EXPECT_FALSE(matches(g, std::string(n, 'x')));
}

TEST(GrammarLimits, LongChainOfAliasesAndAlternativesCompiles) {
  // Pure aliases (no byte between references) and a fan of alternatives at each level.
  const int n = 30000;
  std::string text = "root ::= a0\n";
  for (int i = 0; i < n; ++i) {
    text += cat("a", std::to_string(i), " ::= a", std::to_string(i + 1), " | \"", std::to_string(i % 10), "\"\n");
  }
  text += cat("a", std::to_string(n), " ::= \"end\"\n");
  auto g = CompiledGrammar::compile(parse_ebnf(text), byte_vocab(), {.precompute = false});
  EXPECT_TRUE(matches(g, "end"));
  EXPECT_TRUE(matches(g, "7"));
  EXPECT_FALSE(matches(g, "77"));
}

TEST(GrammarLimits, DeeplyNestedExpressionIsAnErrorNamingTheLimit) {
  // 100000 postfix operators: one expression nested 100000 levels (the parser loops).
  std::string text = cat("root ::= \"a\"", std::string(100000, '?'), "\n");
  const std::string err = error_of([&] { CompiledGrammar::compile(parse_ebnf(text), byte_vocab()); });
  EXPECT_THAT(err, HasSubstr("rule 'root'"));
  EXPECT_THAT(err, HasSubstr(cat("deeper than ", std::to_string(kMaxExprDepth))));
  // Parentheses stop at the parser's own limit.
  std::string parens = cat("root ::= ", std::string(5000, '('), "\"a\"", std::string(5000, ')'));
  EXPECT_THAT(error_of([&] { parse_ebnf(parens); }), HasSubstr("nesting deeper than 256"));
  // Just under the expression limit still compiles.
  std::string ok = cat("root ::= \"a\"", std::string(kMaxExprDepth - 10, '?'), "\n");
  EXPECT_TRUE(matches(CompiledGrammar::compile(parse_ebnf(ok), byte_vocab(), {.precompute = false}), "a"));
}

TEST(GrammarLimits, ManyRequiredAndOptionalProperties) {
  for (bool required : {true, false}) {
    ojson s = {{"type", "object"}, {"properties", ojson::object()}, {"required", ojson::array()}};
    const int n = 1500;
    for (int i = 0; i < n; ++i) {
      const std::string k = cat("p", std::to_string(i));
      s["properties"][k] = {{"type", "integer"}};
      if (required || i % 2 == 0) s["required"].push_back(k);
    }
    auto g = schema(s.dump());
    std::string out = "{";
    for (int i = 0; i < n; ++i) {
      if (!required && i % 2 == 1) continue;
      out += cat(out.size() > 1 ? ", " : "", "\"p", std::to_string(i), "\": ", std::to_string(i));
    }
    out += "}";
    EXPECT_TRUE(matches(g, out)) << required;
    EXPECT_FALSE(matches(g, "{\"p0\": 0}")) << required;
  }
  // Far more members: the size limit answers (an Error), not the stack.
  ojson big = {{"type", "object"}, {"properties", ojson::object()}, {"required", ojson::array()}};
  for (int i = 0; i < 10000; ++i) {
    big["properties"][cat("p", std::to_string(i))] = {{"type", "integer"}};
    big["required"].push_back(cat("p", std::to_string(i)));
  }
  EXPECT_THAT(error_of([&] { schema(big.dump()); }), HasSubstr("grammar too large"));
}

TEST(GrammarLimits, LongPropertyNameWithAdditionalProperties) {
  // The "any other key" expression follows the name code point by code point.
  const std::string name(600, 'k');
  ojson s = {{"type", "object"}, {"properties", {{name, {{"type", "null"}}}}}, {"additionalProperties", {{"type", "integer"}}}};
  auto g = schema(s.dump());
  EXPECT_TRUE(matches(g, cat("{\"", name, "\": null}")));
  EXPECT_TRUE(matches(g, cat("{\"", name.substr(1), "\": 5}")));
  EXPECT_FALSE(matches(g, cat("{\"", name, "\": 5}")));  // the declared key is not "additional"
  // A far longer name reaches the size limit (an Error), not the stack.
  ojson huge = {{"properties", {{std::string(50000, 'k'), {{"type", "null"}}}}}, {"additionalProperties", true}};
  EXPECT_THAT(error_of([&] { schema(huge.dump()); }), HasSubstr("grammar too large"));
}

TEST(GrammarLimits, DeepDocumentsAreAnErrorNamingTheLimit) {
  const int depth = 100000;
  const std::string deep_const = cat("{\"const\":", std::string(depth, '['), std::string(depth, ']'), "}");
  EXPECT_THAT(schema_error(deep_const), HasSubstr("deeper than 512 levels"));
  const std::string deep_annotation = cat("{\"type\":\"string\",\"description\":", std::string(depth, '['), std::string(depth, ']'), "}");
  EXPECT_THAT(schema_error(deep_annotation), HasSubstr("deeper than 512 levels"));
  // The parsed-document entry point checks too (iteratively).
  ojson v = ojson::array();
  for (int i = 0; i < 2000; ++i) v = ojson::array({v});
  EXPECT_THAT(error_of([&] { json_schema_to_grammar(ojson{{"const", v}}); }), HasSubstr("deeper than 512 levels"));
  // Nested schemas stop at the converter's own limit with a message, not the stack.
  std::string nested;
  for (int i = 0; i < 240; ++i) nested += "{\"type\":\"array\",\"items\":";
  nested += cat("{\"type\":\"null\"}", std::string(240, '}'));
  EXPECT_THAT(schema_error(nested), HasSubstr("nested too deeply"));
}

TEST(GrammarLimits, DeepButAllowedSchemaCompiles) {
  std::string nested;
  for (int i = 0; i < 150; ++i) nested += "{\"type\":\"object\",\"properties\":{\"a\":";
  nested += "{\"type\":\"integer\",\"minimum\":1e300}";
  for (int i = 0; i < 150; ++i) nested += "},\"required\":[\"a\"]}";
  auto g = schema(nested);
  std::string out;
  for (int i = 0; i < 150; ++i) out += "{\"a\": ";
  out += cat("1", std::string(300, '0'), std::string(150, '}'));
  EXPECT_TRUE(matches(g, out));
}

TEST(GrammarLimits, IntegerBoundsBeyondDoublePrecisionAreExact) {
  // 2^53 + 1 and 2^64 - 1 are exact 64-bit integers.
  auto g = schema(R"({"type":"integer","minimum":9007199254740993,"maximum":18446744073709551615})");
  EXPECT_FALSE(matches(g, "9007199254740992"));
  EXPECT_TRUE(matches(g, "9007199254740993"));
  EXPECT_TRUE(matches(g, "18446744073709551615"));
  EXPECT_FALSE(matches(g, "18446744073709551616"));
  auto ex = schema(R"({"type":"integer","exclusiveMaximum":-9007199254740993})");
  EXPECT_TRUE(matches(ex, "-9007199254740994"));
  EXPECT_FALSE(matches(ex, "-9007199254740993"));
  EXPECT_FALSE(matches(ex, "-9007199254740992"));
  // allOf keeps the tighter bound exactly (the doubles of both bounds are equal).
  auto all = schema(R"({"allOf":[{"type":"integer","minimum":9007199254740992},{"minimum":9007199254740993}],
                        "maximum":9007199254740995})");
  EXPECT_FALSE(matches(all, "9007199254740992"));
  EXPECT_TRUE(matches(all, "9007199254740993"));
  auto all_max = schema(R"({"allOf":[{"type":"integer","maximum":9007199254740993},{"maximum":9007199254740992}],
                            "minimum":9007199254740990})");
  EXPECT_TRUE(matches(all_max, "9007199254740992"));
  EXPECT_FALSE(matches(all_max, "9007199254740993"));
}

TEST(GrammarLimits, BoundsTheParserWouldRoundAreErrors) {
  // Beyond 64 bits: the parser reads a double (2^64 + 1 becomes 2^64).
  std::string e = schema_error(R"({"type":"integer","maximum":18446744073709551617})");
  EXPECT_THAT(e, HasSubstr("/maximum"));
  EXPECT_THAT(e, HasSubstr("18446744073709551617"));
  EXPECT_THAT(e, HasSubstr("cannot be represented exactly"));
  EXPECT_THAT(schema_error(R"({"type":"integer","exclusiveMinimum":-36893488147419103233})"), HasSubstr("exclusiveMinimum"));
  EXPECT_THAT(schema_error(R"({"type":"number","minimum":0.10000000000000000000001})"), HasSubstr("0.10000000000000000000001"));
  EXPECT_THAT(schema_error(R"({"type":"integer","minimum":1e-400})"), HasSubstr("1e-400"));
  EXPECT_THAT(schema_error(R"({"properties":{"a":{"allOf":[{"maximum":9007199254740993.0}]}}})"), HasSubstr("maximum"));
  // A const or enum value the parser rounds would be written as another value.
  e = schema_error(R"({"enum":[1, 123456789012345678901234567890]})");
  EXPECT_THAT(e, HasSubstr("/enum"));
  EXPECT_THAT(e, HasSubstr("123456789012345678901234567890"));
  EXPECT_THAT(schema_error(R"({"const":9007199254740993.0})"), HasSubstr("/const"));
  // Exactly representable texts in any spelling are fine.
  EXPECT_EQ(schema_error(R"({"type":"integer","maximum":1e20,"minimum":-9.007199254740992e15})"), "");
  EXPECT_EQ(schema_error(R"({"type":"number","maximum":0.1,"minimum":-2.5E-3})"), "");
  EXPECT_EQ(schema_error(R"({"const":18446744073709551615})"), "");
}

TEST(GrammarLimits, OneOfWithOverlappingBranchesIsRejected) {
  const char* overlapping[] = {
      R"({"oneOf":[{"type":"integer"},{"type":"number"}]})",
      R"({"oneOf":[{"type":"string"},{"type":"string","maxLength":3}]})",
      R"({"oneOf":[{"enum":[1,2]},{"enum":[2,3]}]})",
      R"({"oneOf":[{"const":1},{"type":"number"}]})",
      R"({"oneOf":[{"type":"object","properties":{"k":{"const":"a"}},"required":["k"]},
                   {"type":"object","properties":{"k":{"enum":["a","b"]}},"required":["k"]}]})",
      // "k" is not required on the left: {} matches both.
      R"({"oneOf":[{"type":"object","properties":{"k":{"const":"a"}}},{"type":"object","properties":{"k":{"const":"b"}}}]})",
      R"({"oneOf":[{"$ref":"#/$defs/x"},{"type":"integer"}],"$defs":{"x":{"type":"integer","minimum":5}}})",
      R"({"type":"array","items":{"oneOf":[{"type":"boolean"},{"enum":[true,"x"]}]}})",
  };
  for (const char* s : overlapping) {
    const std::string e = schema_error(s);
    EXPECT_THAT(e, HasSubstr("'oneOf' branches")) << s;
    EXPECT_THAT(e, HasSubstr("not provably exclusive")) << s;
  }
  EXPECT_THAT(schema_error(overlapping[7]), HasSubstr("#/items/oneOf"));
  // A branch restricted to the types no other branch accepts; the branch it contains is left out.
  EXPECT_EQ(schema_error(R"({"oneOf":[{"type":["string","null"]},{"type":"null"}]})"), "");
  EXPECT_EQ(schema_error(R"({"oneOf":[{"type":"string"},{"minimum":3}]})"), "");  // numbers from the second only
  // Objects without "a" from the second only (the first's objects are valid against the second).
  EXPECT_EQ(schema_error(R"({"oneOf":[{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]},
                   {"type":"object","properties":{"b":{"type":"integer"}},"additionalProperties":true}]})"), "");
}

TEST(GrammarLimits, ExclusiveOneOfIsAcceptedAndItsOutputsMatchExactlyOneBranch) {
  const char* exclusive[] = {
      R"({"oneOf":[{"type":"integer"},{"type":"string"},{"type":"null"}]})",
      R"({"oneOf":[{"type":"number","minimum":1.5,"maximum":1.75},{"type":"boolean"}]})",
      R"({"oneOf":[{"enum":[1,"a"]},{"enum":[2,"b",null]},{"type":"array","maxItems":2}]})",
      R"({"oneOf":[{"type":"object","properties":{"k":{"const":"a"},"v":{"type":"integer"}},"required":["k","v"]},
                   {"type":"object","properties":{"k":{"const":"b"},"v":{"type":"string"}},"required":["k"]}]})",
      R"({"oneOf":[{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]},
                   {"type":"object","properties":{"b":{"type":"integer"}},"required":["b"],"additionalProperties":false}]})",
      R"({"oneOf":[{"$ref":"#/$defs/x"},{"$ref":"#/$defs/y"}],
          "$defs":{"x":{"type":"object","properties":{"t":{"const":1}},"required":["t"]},
                   "y":{"type":"object","properties":{"t":{"type":"string"}},"required":["t"]}}})",
  };
  for (const char* s : exclusive) {
    ASSERT_EQ(schema_error(s), "") << s;
    auto g = schema(s);
    std::mt19937_64 rng(7);
    for (int i = 0; i < 40; ++i) {
      bool finished = false;
      std::string out = random_walk(g, rng, 60, nullptr, &finished);
      if (!finished) continue;
      EXPECT_EQ(validate_json(ojson::parse(s), ojson::parse(out)), "") << s << " -> " << out;
    }
  }
}

TEST(GrammarLimits, QuadraticSubsetConstructionIsBounded) {
  // An unanchored search for a long run: each DFA state is a set of up to 100000 positions.
  const std::string err = error_of([] {
    Grammar g;
    const int32_t root = g.declare_rule("root");
    g.define_rule(root, regex_to_expr(g, "a{100000}", {.json_string = false, .search = true}));
    g.set_root(root);
    CompiledGrammar::compile(g, byte_vocab(), {.precompute = false});
  });
  EXPECT_THAT(err, HasSubstr("grammar too large"));
  EXPECT_THAT(schema_error_compiled(R"({"type":"string","pattern":"a{100000}"})"), HasSubstr("grammar too large"));
}
