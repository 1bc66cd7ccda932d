// JSON Schema compiler: accepted and rejected texts per feature, number ranges against
// exact arithmetic, error messages for invalid or unsupported schemas.
#include <gtest/gtest.h>

#include <fstream>

#include "core/error.h"
#include "grammar/json_schema.h"
#include "grammar_test_util.h"

using namespace deepinfer;
using namespace deepinfer::grammar;
using namespace deepinfer::grammar::testing;
using ojson = nlohmann::ordered_json;

namespace {

std::shared_ptr<const CompiledGrammar> schema(const std::string& text, bool any_ws = false) {
  JsonSchemaOptions o;
  o.any_whitespace = any_ws;
  return CompiledGrammar::compile(json_schema_to_grammar(text, o), byte_vocab());
}

std::string error_of(const std::string& text) {
  try {
    json_schema_to_grammar(text);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(GrammarJsonSchema, ObjectsInSchemaOrderWithOptionalMembers) {
  auto g = schema(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"},"c":{"type":"boolean"}},
                      "required":["b"]})");
  EXPECT_TRUE(matches(g, R"({"b": "x"})"));
  EXPECT_TRUE(matches(g, R"({"a": 1, "b": "x", "c": true})"));
  EXPECT_TRUE(matches(g, R"({"b": "x", "c": false})"));
  EXPECT_FALSE(matches(g, R"({"a": 1})"));                      // b is required
  EXPECT_FALSE(matches(g, R"({"b": "x", "a": 1})"));            // schema order
  EXPECT_FALSE(matches(g, R"({"b": "x", "d": 1})"));            // strict: no additional properties
  EXPECT_FALSE(matches(g, R"({"b":"x"})"));                     // compact layout is ", " and ": "
  auto ws = schema(R"({"type":"object","properties":{"a":{"type":"integer"}}})", true);
  EXPECT_TRUE(matches(ws, "{\n  \"a\" :\t1\n}"));
  EXPECT_TRUE(matches(ws, "{}"));
  EXPECT_FALSE(matches(ws, " {}"));  // no white space around the top value
}

TEST(GrammarJsonSchema, AdditionalPropertiesNeverRepeatDeclaredNames) {
  auto g = schema(R"({"type":"object","properties":{"id":{"type":"integer"}},"additionalProperties":{"type":"boolean"}})");
  EXPECT_TRUE(matches(g, R"({"id": 1, "idx": true, "i": false})"));
  EXPECT_TRUE(matches(g, R"({"x": true})"));
  EXPECT_FALSE(matches(g, R"({"id": 1, "id": true})"));
  EXPECT_FALSE(matches(g, R"({"x": 1})"));
  EXPECT_FALSE(matches(g, R"({"i\u0064": true})"));  // only canonical escapes in additional keys
}

TEST(GrammarJsonSchema, StringsCountCodePointsAndEscapes) {
  auto g = schema(R"({"type":"string","minLength":2,"maxLength":3})");
  EXPECT_TRUE(matches(g, "\"ab\""));
  EXPECT_TRUE(matches(g, "\"\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80\""));  // 3 code points, 9 bytes
  EXPECT_TRUE(matches(g, R"("\n\u00e9")"));
  EXPECT_FALSE(matches(g, R"("\ud83d\ude00")"));  // surrogate escapes are never produced
  EXPECT_FALSE(matches(g, "\"abcd\""));
  EXPECT_FALSE(matches(g, "\"a\""));
  EXPECT_FALSE(matches(g, "\"a\nb\""));  // raw control character
}

TEST(GrammarJsonSchema, PatternsAreJsonEscapedAndUnanchoredUnlessAnchored) {
  auto g = schema(R"({"type":"string","pattern":"^a\"b\\\\c$"})");
  EXPECT_TRUE(matches(g, R"("a\"b\\c")"));
  EXPECT_FALSE(matches(g, R"("a"b\c")"));
  auto s = schema(R"({"type":"string","pattern":"x+y"})");
  EXPECT_TRUE(matches(s, R"("abxxyz")"));
  EXPECT_TRUE(matches(s, R"("xy")"));
  EXPECT_FALSE(matches(s, R"("yx")"));
  auto n = schema(R"({"type":"string","pattern":"^\\d+$"})");
  EXPECT_TRUE(matches(n, R"("0123")"));
  EXPECT_FALSE(matches(n, "\"\xD9\xA3\""));  // Arabic-Indic digit: outside \d as generated
}

TEST(GrammarJsonSchema, Formats) {
  auto date = schema(R"({"type":"string","format":"date"})");
  for (const char* ok : {"\"2024-02-29\"", "\"2000-02-29\"", "\"0001-12-31\"", "\"2023-04-30\""}) EXPECT_TRUE(matches(date, ok)) << ok;
  for (const char* bad : {"\"2023-02-29\"", "\"1900-02-29\"", "\"0000-01-01\"", "\"2023-04-31\"", "\"2023-13-01\"", "\"2023-1-01\""}) {
    EXPECT_FALSE(matches(date, bad)) << bad;
  }
  auto dt = schema(R"({"type":"string","format":"date-time"})");
  EXPECT_TRUE(matches(dt, "\"2024-05-06T07:08:09.123Z\""));
  EXPECT_TRUE(matches(dt, "\"2024-05-06T23:59:59+05:30\""));
  EXPECT_FALSE(matches(dt, "\"2024-05-06T24:00:00Z\""));
  EXPECT_FALSE(matches(dt, "\"2024-05-06T12:00:00\""));
  auto ip = schema(R"({"type":"string","format":"ipv4"})");
  EXPECT_TRUE(matches(ip, "\"255.0.10.199\""));
  EXPECT_FALSE(matches(ip, "\"256.0.0.1\""));
  EXPECT_FALSE(matches(ip, "\"01.0.0.1\""));
  auto uuid = schema(R"({"type":"string","format":"uuid"})");
  EXPECT_TRUE(matches(uuid, "\"123e4567-e89b-12d3-A456-426614174000\""));
  EXPECT_FALSE(matches(uuid, "\"123e4567e89b12d3a456426614174000\""));
  auto email = schema(R"({"type":"string","format":"email"})");
  EXPECT_TRUE(matches(email, "\"first.last+tag@mail.example.com\""));
  EXPECT_FALSE(matches(email, "\"no-at-sign\""));
  auto time = schema(R"({"type":"string","format":"time"})");
  EXPECT_TRUE(matches(time, "\"00:00:00-12:00\""));
}

TEST(GrammarJsonSchema, IntegerRangesMatchExactArithmetic) {
  const std::vector<std::pair<std::string, std::pair<long, long>>> cases = {
      {R"("minimum":0,"maximum":100)", {0, 100}},      {R"("minimum":-50,"maximum":-3)", {-50, -3}},
      {R"("minimum":-17,"maximum":42)", {-17, 42}},    {R"("exclusiveMinimum":0,"exclusiveMaximum":10)", {1, 9}},
      {R"("minimum":1.5,"maximum":9.5)", {2, 9}},      {R"("minimum":-9.5,"maximum":-1.5)", {-9, -2}},
      {R"("minimum":99,"maximum":1001)", {99, 1001}},  {R"("minimum":5,"maximum":5)", {5, 5}},
      {R"("minimum":-1000,"maximum":-1000)", {-1000, -1000}}};
  for (const auto& [bounds, range] : cases) {
    auto g = schema("{\"type\":\"integer\"," + bounds + "}");
    for (long x = -1100; x <= 1100; ++x) {
      EXPECT_EQ(matches(g, std::to_string(x)), x >= range.first && x <= range.second) << bounds << " x=" << x;
    }
    EXPECT_FALSE(matches(g, "007"));
    EXPECT_FALSE(matches(g, "-0"));
  }
  auto lo = schema(R"({"type":"integer","minimum":7})");
  EXPECT_TRUE(matches(lo, "12345678901234"));
  EXPECT_FALSE(matches(lo, "6"));
  EXPECT_TRUE(matches(schema(R"({"type":"integer","minimum":12345678901234567890})"), "12345678901234567890"));
}

TEST(GrammarJsonSchema, NumberRangesMatchExactArithmetic) {
  struct Case {
    std::string bounds;
    double lo, hi;
    bool lo_ex, hi_ex;
  };
  const std::vector<Case> cases = {{R"("minimum":0,"maximum":1)", 0, 1, false, false},
                                   {R"("exclusiveMinimum":-1.5,"exclusiveMaximum":2.25)", -1.5, 2.25, true, true},
                                   {R"("minimum":-10.5,"maximum":-0.001)", -10.5, -0.001, false, false},
                                   {R"("minimum":5.25,"maximum":5.75)", 5.25, 5.75, false, false},
                                   {R"("exclusiveMinimum":0.1,"maximum":0.3)", 0.1, 0.3, true, false}};
  std::vector<std::string> texts;
  for (int i = -1200; i <= 1200; ++i) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3f", i / 100.0);
    texts.push_back(buf);
    std::snprintf(buf, sizeof buf, "%.1f", i / 100.0);
    texts.push_back(buf);
    if (i % 100 == 0) texts.push_back(std::to_string(i / 100));
  }
  for (const auto& c : cases) {
    auto g = schema("{\"type\":\"number\"," + c.bounds + "}");
    for (const auto& t : texts) {
      // Decimal comparison on exact thousandths (the texts have at most three decimals).
      const long x = std::lround(std::stod(t) * 1000), lo = std::lround(c.lo * 1000), hi = std::lround(c.hi * 1000);
      const bool want = (c.lo_ex ? x > lo : x >= lo) && (c.hi_ex ? x < hi : x <= hi);
      const bool neg_zero = t == "-0.0" || t == "-0.000";
      if (neg_zero) continue;  // "-0.0" equals 0; either answer is valid
      EXPECT_EQ(matches(g, t), want) << c.bounds << " x=" << t;
    }
  }
  auto any = schema(R"({"type":"number"})");
  EXPECT_TRUE(matches(any, "-1.5e10"));
  EXPECT_TRUE(matches(any, "0.25E-3"));
  EXPECT_FALSE(matches(any, "01"));
  EXPECT_FALSE(matches(any, "1e100"));  // exponents have at most two digits
}

TEST(GrammarJsonSchema, EnumConstAndCombinators) {
  auto e = schema(R"({"enum":["a\"b", 1.5, null, {"k":[true]}]})");
  EXPECT_TRUE(matches(e, R"("a\"b")"));
  EXPECT_TRUE(matches(e, "1.5"));
  EXPECT_TRUE(matches(e, "null"));
  EXPECT_TRUE(matches(e, R"({"k": [true]})"));
  EXPECT_FALSE(matches(e, R"({"k": [false]})"));
  auto bounded = schema(R"({"type":"integer","enum":[1,5,9],"minimum":2})");
  EXPECT_FALSE(matches(bounded, "1"));
  EXPECT_TRUE(matches(bounded, "5"));
  auto any_of = schema(R"({"anyOf":[{"type":"integer","minimum":0,"maximum":5},{"type":"null"}]})");
  EXPECT_TRUE(matches(any_of, "3"));
  EXPECT_TRUE(matches(any_of, "null"));
  EXPECT_FALSE(matches(any_of, "6"));
  auto all_of = schema(R"({"allOf":[{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]},
                                    {"properties":{"b":{"type":"string"}},"required":["b"]}]})");
  EXPECT_TRUE(matches(all_of, R"({"a": 1, "b": "x"})"));
  EXPECT_FALSE(matches(all_of, R"({"a": 1})"));
  auto base = schema(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}},
                         "anyOf":[{"required":["a"]},{"required":["b"]}]})");
  EXPECT_TRUE(matches(base, R"({"b": 2})"));
  EXPECT_FALSE(matches(base, "{}"));
}

TEST(GrammarJsonSchema, RefsAndRecursion) {
  auto g = schema(R"({"$defs":{"n":{"type":"object","properties":{"v":{"type":"integer"},"next":{"anyOf":[{"$ref":"#/$defs/n"},{"type":"null"}]}},
                      "required":["v","next"]}},"$ref":"#/$defs/n"})");
  EXPECT_TRUE(matches(g, R"({"v": 1, "next": {"v": 2, "next": {"v": 3, "next": null}}})"));
  EXPECT_FALSE(matches(g, R"({"v": 1, "next": {"v": 2}})"));
  auto root = schema(R"({"type":"array","items":{"$ref":"#"},"maxItems":2})");
  EXPECT_TRUE(matches(root, "[[], [[], [[]]]]"));
  EXPECT_FALSE(matches(root, "[[], [], []]"));
}

TEST(GrammarJsonSchema, Arrays) {
  auto t = schema(R"({"type":"array","prefixItems":[{"type":"integer"},{"type":"string"}],"items":{"type":"boolean"},"maxItems":3})");
  EXPECT_TRUE(matches(t, "[]"));
  EXPECT_TRUE(matches(t, "[1]"));
  EXPECT_TRUE(matches(t, R"([1, "a", true])"));
  EXPECT_FALSE(matches(t, R"([1, "a", true, false])"));
  EXPECT_FALSE(matches(t, R"(["a"])"));
  auto m = schema(R"({"type":"array","items":{"type":"integer"},"minItems":2,"maxItems":2})");
  EXPECT_TRUE(matches(m, "[1, 2]"));
  EXPECT_FALSE(matches(m, "[1]"));
  EXPECT_FALSE(matches(m, "[1, 2, 3]"));
}

TEST(GrammarJsonSchema, InvalidSchemasGiveClearErrors) {
  std::ifstream in(test_data("grammar/schemas_invalid.jsonl"));
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    auto e = ojson::parse(line);
    std::string err;
    try {
      json_schema_to_grammar(e["schema"]);
    } catch (const Error& x) {
      err = x.what();
    }
    EXPECT_NE(err.find(e["error"].get<std::string>()), std::string::npos) << e["name"] << ": got '" << err << "'";
    ++n;
  }
  EXPECT_GE(n, 25);
  EXPECT_NE(error_of("{\"type\": ").find("not valid JSON"), std::string::npos);
  EXPECT_NE(error_of(R"({"properties":{"a":{"type":"string","pattern":"(a)\\1"}}})").find("#/properties/a/pattern"), std::string::npos);
}
