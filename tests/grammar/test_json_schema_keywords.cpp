// JSON Schema compiler: the vocabulary (annotations and unknown keywords ignored, draft-04 to
// 2020-12 spellings, the strict_keywords option), `true` / `false` subschemas, and the
// keywords enforced beyond the core set, each with texts it must accept and reject.
#include <gtest/gtest.h>

#include "core/error.h"
#include "deepinfer/sampling_params.h"
#include "grammar/grammar_cache.h"
#include "grammar/json_schema.h"
#include "grammar_test_util.h"
#include "json_validator.h"

using namespace deepinfer;
using namespace deepinfer::grammar;
using namespace deepinfer::grammar::testing;

namespace {

std::shared_ptr<const CompiledGrammar> compact(const std::string& text, JsonSchemaOptions o = {}) {
  o.any_whitespace = false;
  return CompiledGrammar::compile(json_schema_to_grammar(text, o), byte_vocab());
}

std::string error_of(const std::string& text, JsonSchemaOptions o = {}) {
  try {
    json_schema_to_grammar(text, o);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST(GrammarJsonSchemaKeywords, KeywordsOutsideTheVocabularyAreIgnored) {
  const std::string s = R"({"type":"object","self":{"vendor":"com.x","name":"e","format":"jsonschema"},"x-kubernetes-preserve":true,
      "links":[],"name":"thing","example":{"a":1},"_format":"uri","$comment":"c","title":"t","description":"d",
      "properties":{"a":{"type":"integer","x-order":1,"readOnly":true,"deprecated":true,"default":3,"examples":[1]}},
      "required":["a"]})";
  auto g = compact(s);
  EXPECT_TRUE(matches(g, R"({"a": 5})"));
  EXPECT_FALSE(matches(g, R"({"a": "x"})"));
  EXPECT_FALSE(matches(g, R"({})"));
  JsonSchemaOptions strict;
  strict.strict_keywords = true;
  const std::string e = error_of(s, strict);
  EXPECT_TRUE(has(e, "JSON schema at #: keyword '")) << e;
  EXPECT_TRUE(has(e, "is not JSON Schema vocabulary")) << e;
  EXPECT_TRUE(has(error_of(R"({"properties":{"a":{"x-y":1}}})", strict), "#/properties/a: keyword 'x-y'"));
  // Annotations stay accepted in strict mode.
  EXPECT_EQ(error_of(R"({"type":"string","title":"t","description":"d","default":"x","$comment":"c","examples":["y"]})", strict), "");
  // Vocabulary keywords the compiler does not enforce are errors in both modes.
  EXPECT_TRUE(has(error_of(R"({"type":"array","contains":{"type":"integer"}})"), "keyword 'contains' is not supported"));
}

TEST(GrammarJsonSchemaKeywords, StrictKeywordsReachTheCompilerFromStructuredOutput) {
  StructuredOutput so;
  so.kind = StructuredOutput::Kind::kJsonSchema;
  so.source = R"({"type":"integer","x-unit":"s"})";
  EXPECT_NO_THROW(grammar_of(so));
  so.strict_keywords = true;
  EXPECT_THROW(grammar_of(so), Error);
  GrammarCache cache(byte_vocab());
  EXPECT_NE(cache.get(so).error, "");
  so.strict_keywords = false;
  EXPECT_EQ(cache.get(so).error, "");  // cached apart from the strict entry
}

TEST(GrammarJsonSchemaKeywords, Draft4Spellings) {
  auto g = compact(R"({"id":"http://example.com/s.json","$schema":"http://json-schema.org/draft-04/schema#",
      "definitions":{"pos":{"type":"integer","minimum":0,"exclusiveMinimum":true}},
      "type":"object","properties":{"n":{"$ref":"#/definitions/pos"},"t":{"type":"array","items":[{"type":"string"}],
      "additionalItems":false}},"required":["n"]})");
  EXPECT_TRUE(matches(g, R"({"n": 1})"));
  EXPECT_FALSE(matches(g, R"({"n": 0})"));
  EXPECT_TRUE(matches(g, R"({"n": 2, "t": ["a"]})"));
  EXPECT_FALSE(matches(g, R"({"n": 2, "t": ["a", "b"]})"));
}

TEST(GrammarJsonSchemaKeywords, FalseAndTrueSubschemas) {
  auto g = compact(R"({"type":"object","properties":{"a":{"type":"integer"},"b":false,"c":true},
      "additionalProperties":{"type":"integer"}})");
  EXPECT_TRUE(matches(g, R"({"a": 1})"));
  EXPECT_TRUE(matches(g, R"({"a": 1, "c": [true, {}]})"));
  EXPECT_FALSE(matches(g, R"({"a": 1, "b": 1})"));  // neither as a declared nor as an additional property
  EXPECT_FALSE(matches(g, R"({"b": 1})"));
  EXPECT_TRUE(matches(g, R"({"bb": 1})"));
  EXPECT_TRUE(has(error_of(R"({"type":"object","properties":{"b":false},"required":["b"]})"),
                  "#/properties/b: required property 'b' is never valid"));
  auto t = compact(R"({"type":"array","prefixItems":[{"type":"integer"},false],"items":{"type":"string"}})");
  EXPECT_TRUE(matches(t, "[1]"));
  EXPECT_TRUE(matches(t, "[]"));
  EXPECT_FALSE(matches(t, R"([1, "x"])"));
  EXPECT_FALSE(matches(t, "[1, 2]"));
  auto a = compact(R"({"anyOf":[false,{"type":"null"}]})");
  EXPECT_TRUE(matches(a, "null"));
  EXPECT_FALSE(matches(a, "1"));
  EXPECT_TRUE(has(error_of(R"({"anyOf":[false,false]})"), "no 'anyOf' branch can be satisfied"));
  // An optional property no value satisfies is left out.
  auto o = compact(R"({"type":"object","properties":{"a":{"type":"object","enum":["x"]},"b":{"type":"integer"},
      "c":{"not":{}},"d":{"allOf":[{"type":"string"},{"not":{"description":"anything"}}]}}})");
  EXPECT_FALSE(matches(o, R"({"c": 1})"));
  EXPECT_FALSE(matches(o, R"({"d": "x"})"));
  EXPECT_TRUE(matches(o, R"({"b": 1})"));
  EXPECT_FALSE(matches(o, R"({"a": "x"})"));
  auto any = compact("true");
  EXPECT_TRUE(matches(any, R"({"x": [1, null]})"));
}

TEST(GrammarJsonSchemaKeywords, OneOfBranchesToldApartByRequiredKeys) {
  // The overlapping branches of issue 31: an object with length, width and radius would
  // match both; each branch leaves out a key the other requires.
  const std::string s = R"({"type":"object","properties":{"length":{"type":"number"},"width":{"type":"number"},
      "radius":{"type":"number"}},"oneOf":[{"required":["length","width"]},{"required":["radius"]}]})";
  auto g = compact(s);
  EXPECT_TRUE(matches(g, R"({"length": 1, "width": 2})"));
  EXPECT_TRUE(matches(g, R"({"radius": 3})"));
  EXPECT_TRUE(matches(g, R"({"width": 2, "radius": 3})"));  // only branch 1 holds (no length)
  EXPECT_FALSE(matches(g, R"({"length": 1, "width": 2, "radius": 3})"));
  EXPECT_FALSE(matches(g, R"({"length": 1, "radius": 3})"));
  EXPECT_FALSE(matches(g, R"({"length": 1})"));
  // A branch whose values always satisfy another branch too is not generated: here objects
  // with a and b match both branches, so only objects with a and without b are written.
  auto sub = compact(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}},
      "oneOf":[{"required":["a"]},{"required":["a","b"]}]})");
  EXPECT_TRUE(matches(sub, R"({"a": 1})"));
  EXPECT_FALSE(matches(sub, R"({"a": 1, "b": 2})"));
  // Branches that cannot be told apart at all: the error names them.
  const std::string e = error_of(R"({"oneOf":[{"type":"string"},{"type":"string","maxLength":3}]})");
  EXPECT_TRUE(has(e, "#/oneOf: 'oneOf' branches 0 and 1")) << e;
  EXPECT_TRUE(has(e, "not provably exclusive")) << e;
  // Types: a branch keeps to the types no other branch accepts.
  auto t = compact(R"({"oneOf":[{},{"type":"string"},{"type":"array","items":{"type":"integer"}}]})");
  EXPECT_TRUE(matches(t, "1"));
  EXPECT_TRUE(matches(t, "null"));
  EXPECT_FALSE(matches(t, R"("s")"));  // valid against branches 0 and 1
  EXPECT_FALSE(matches(t, "[1]"));
  // Arrays whose items exclude each other: the empty array (valid against both) is left out.
  auto arr = compact(R"({"oneOf":[{"type":"array","items":{"type":"number"}},{"type":"array","items":{"type":"string"}}]})");
  EXPECT_TRUE(matches(arr, "[1, 2]"));
  EXPECT_TRUE(matches(arr, R"(["a"])"));
  EXPECT_FALSE(matches(arr, "[]"));
  EXPECT_FALSE(matches(arr, R"([1, "a"])"));
  // Branches no value satisfies never hold, under oneOf as under anyOf.
  auto u = compact(R"({"oneOf":[{"allOf":[{"type":"string"},{"type":"integer"}]},{"type":"integer"}]})");
  EXPECT_TRUE(matches(u, "3"));
  EXPECT_FALSE(matches(u, R"("s")"));
  // Open objects: the required key of the other branch is forbidden, extras never use it.
  auto open = compact(R"({"oneOf":[{"type":"object","required":["x"],"additionalProperties":{"type":"integer"}},
      {"type":"object","required":["y"],"additionalProperties":{"type":"integer"}}]})");
  EXPECT_TRUE(matches(open, R"({"x": 1, "z": 2})"));
  EXPECT_FALSE(matches(open, R"({"x": 1, "y": 2})"));
  EXPECT_FALSE(matches(open, R"({"y": 1, "x": 2})"));
}

TEST(GrammarJsonSchemaKeywords, MoreFormats) {
  auto f = [](const char* name) { return compact(std::string(R"({"type":"string","format":")") + name + "\"}"); };
  auto host = f("hostname");
  EXPECT_TRUE(matches(host, R"("example.com")"));
  EXPECT_TRUE(matches(host, R"("a-1.b2.co")"));
  EXPECT_FALSE(matches(host, R"("-a.com")"));
  EXPECT_FALSE(matches(host, R"("a..b")"));
  EXPECT_FALSE(matches(host, R"("a.123")"));  // an all-numeric last label
  EXPECT_FALSE(matches(host, ("\"" + std::string(64, 'a') + "\"").c_str()));
  auto uri = f("uri");
  EXPECT_TRUE(matches(uri, R"("https://example.com/a/b.json?x=1&y=2#top")"));
  EXPECT_FALSE(matches(uri, R"("example.com/a")"));  // no scheme
  EXPECT_FALSE(matches(uri, R"("http://a b")"));
  auto v6 = f("ipv6");
  EXPECT_TRUE(matches(v6, R"("2001:db8:0:0:0:0:ff00:42")"));
  EXPECT_FALSE(matches(v6, R"("2001:db8:0:0:0:0:ff00")"));
  EXPECT_FALSE(matches(v6, R"("12345:0:0:0:0:0:0:0")"));
  auto ptr = f("json-pointer");
  EXPECT_TRUE(matches(ptr, R"("")"));
  EXPECT_TRUE(matches(ptr, R"("/a~1b/0/~0")"));
  EXPECT_FALSE(matches(ptr, R"("a")"));
  EXPECT_FALSE(matches(ptr, R"("/a~2")"));
  auto dur = f("duration");
  EXPECT_TRUE(matches(dur, R"("P3D")"));
  EXPECT_TRUE(matches(dur, R"("PT15M")"));
  EXPECT_FALSE(matches(dur, R"("P")"));
  EXPECT_TRUE(has(error_of(R"({"type":"string","format":"regex"})"), "format 'regex' is not supported"));
}

TEST(GrammarJsonSchemaKeywords, PatternProperties) {
  // Declared names matching a pattern also satisfy its schema; other keys come from the pattern.
  auto g = compact(R"({"type":"object","properties":{"x-a":{"type":"integer"},"b":{"type":"integer"}},
      "patternProperties":{"^x-":{"minimum":10}},"additionalProperties":false})");
  EXPECT_TRUE(matches(g, R"({"x-a": 10, "b": 1})"));
  EXPECT_FALSE(matches(g, R"({"x-a": 9})"));
  EXPECT_TRUE(matches(g, R"({"b": 1})"));
  // A declared name matches the pattern: pattern keys are not generated (they could repeat it).
  EXPECT_FALSE(matches(g, R"({"b": 1, "x-c": 11})"));
  auto p = compact(R"({"type":"object","properties":{"id":{"type":"string"}},"required":["id"],
      "patternProperties":{"^[a-z]+_[0-9]$":{"type":"integer"},"_9$":{"maximum":5}}})");
  // A generated key may match both patterns: its value satisfies both schemas.
  EXPECT_TRUE(matches(p, R"({"id": "q", "ab_1": 4})"));
  EXPECT_FALSE(matches(p, R"({"id": "q", "ab_1": 100})"));
  EXPECT_TRUE(matches(p, R"({"id": "q", "ab_1": 4, "c_2": 3})"));
  EXPECT_FALSE(matches(p, R"({"id": "q", "ab_9": 100})"));  // both patterns: integer and at most 5
  EXPECT_TRUE(matches(p, R"({"id": "q", "ab_9": 5})"));
  EXPECT_FALSE(matches(p, R"({"id": "q", "AB_1": 1})"));
  EXPECT_FALSE(matches(p, R"({"id": "q", "ab_1": "s"})"));
  // A required name that only a pattern allows takes the pattern's schema.
  auto r = compact(R"({"type":"object","required":["n_1"],"patternProperties":{"^n_":{"type":"boolean"}},"additionalProperties":false})");
  EXPECT_TRUE(matches(r, R"({"n_1": true})"));
  EXPECT_FALSE(matches(r, R"({"n_1": 1})"));
  EXPECT_TRUE(has(error_of(R"({"type":"object","required":["q"],"patternProperties":{"^n_":{}},"additionalProperties":false})"),
                  "required property 'q' is not allowed"));
  EXPECT_TRUE(has(error_of(R"({"type":"object","properties":{"é":{}},"patternProperties":{"^a":{}}})"),
                  "outside printable ASCII"));
  EXPECT_TRUE(has(error_of(R"j({"type":"object","patternProperties":{"(?=a)":{}}})j"), "#/patternProperties/(?=a): regex"));
}

TEST(GrammarJsonSchemaKeywords, MinAndMaxProperties) {
  auto g = compact(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"},"c":{"type":"integer"}},
      "minProperties":1,"maxProperties":2})");
  EXPECT_FALSE(matches(g, "{}"));
  EXPECT_TRUE(matches(g, R"({"b": 1})"));
  EXPECT_TRUE(matches(g, R"({"a": 1, "c": 2})"));
  EXPECT_FALSE(matches(g, R"({"a": 1, "b": 2, "c": 3})"));
  // Additional keys may repeat one another (a parser keeps one): they count towards
  // maxProperties, and towards minProperties as one at most.
  auto x = compact(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}},
      "additionalProperties":{"type":"null"},"minProperties":2,"maxProperties":3})");
  EXPECT_FALSE(matches(x, R"({"q": null})"));
  EXPECT_FALSE(matches(x, R"({"q": null, "r": null})"));
  EXPECT_FALSE(matches(x, R"({})"));
  EXPECT_TRUE(matches(x, R"({"a": 1, "q": null})"));
  EXPECT_TRUE(matches(x, R"({"b": 1, "q": null, "r": null})"));
  EXPECT_TRUE(matches(x, R"({"a": 1, "b": 2})"));
  EXPECT_FALSE(matches(x, R"({"a": 1, "b": 2, "q": null, "r": null})"));
  auto map = compact(R"({"type":"object","additionalProperties":{"type":"integer"},"minProperties":1})");
  EXPECT_FALSE(matches(map, "{}"));
  EXPECT_TRUE(matches(map, R"({"k": 1})"));
  EXPECT_TRUE(matches(map, R"({"k": 1, "j": 2})"));
  EXPECT_TRUE(has(error_of(R"({"type":"object","properties":{"a":{}},"additionalProperties":{},"minProperties":3})"),
                  "'minProperties' exceeds"));
  EXPECT_TRUE(has(error_of(R"({"type":"object","properties":{"a":{},"b":{}},"required":["a","b"],"maxProperties":1})"),
                  "more required properties than 'maxProperties'"));
}

TEST(GrammarJsonSchemaKeywords, PropertyNames) {
  auto g = compact(R"({"type":"object","properties":{"Bad":{"type":"integer"}},
      "propertyNames":{"pattern":"^[a-z]+$"},"additionalProperties":{"type":"boolean"}})");
  EXPECT_FALSE(matches(g, R"({"Bad": 1})"));  // its name is not valid: never written
  EXPECT_TRUE(matches(g, R"({"zz": true})"));
  EXPECT_FALSE(matches(g, R"({"z9": true})"));
  EXPECT_FALSE(matches(g, R"({"zz": 1})"));
  // A valid declared name could be repeated by a pattern key: no additional keys then.
  auto d = compact(R"({"type":"object","properties":{"ok":{"type":"integer"}},"propertyNames":{"pattern":"^[a-z]+$"},
      "additionalProperties":{"type":"boolean"}})");
  EXPECT_TRUE(matches(d, R"({"ok": 1})"));
  EXPECT_FALSE(matches(d, R"({"ok": 1, "zz": true})"));
  auto e = compact(R"({"type":"object","properties":{"a":{},"bb":{}},"propertyNames":{"enum":["a","c"]},"additionalProperties":{}})");
  EXPECT_TRUE(matches(e, R"({"a": 1})"));
  EXPECT_FALSE(matches(e, R"({"bb": 1})"));
  EXPECT_FALSE(matches(e, R"({"c": 1})"));  // extras are not generated beside an enum of names
  EXPECT_TRUE(has(error_of(R"({"type":"object","propertyNames":{"format":"email"}})"), "'propertyNames' with 'format' is not supported"));
  auto r = compact(R"({"type":"object","properties":{"ok":{},"NO":{}},"propertyNames":{"$ref":"#/$defs/n"},
      "$defs":{"n":{"type":"string","pattern":"^[a-z]+$"}}})");
  EXPECT_TRUE(matches(r, R"({"ok": 1})"));
  EXPECT_FALSE(matches(r, R"({"NO": 1})"));
}

TEST(GrammarJsonSchemaKeywords, Dependencies) {
  for (const char* kw : {"dependentRequired", "dependencies"}) {
    auto g = compact(std::string(R"({"type":"object","properties":{"card":{"type":"integer"},"name":{"type":"string"},
        "billing":{"type":"string"}},")") + kw + R"(":{"card":["billing"],"billing":["name"]}})");
    EXPECT_TRUE(matches(g, "{}"));
    EXPECT_TRUE(matches(g, R"({"name": "a"})"));
    EXPECT_TRUE(matches(g, R"({"card": 1, "name": "a", "billing": "b"})"));
    EXPECT_TRUE(matches(g, R"({"name": "a", "billing": "b"})"));
    EXPECT_FALSE(matches(g, R"({"card": 1})")) << kw;
    EXPECT_FALSE(matches(g, R"({"card": 1, "billing": "b"})")) << kw;  // billing needs name
    EXPECT_FALSE(matches(g, R"({"billing": "b"})")) << kw;
  }
  for (const char* kw : {"dependentSchemas", "dependencies"}) {
    auto g = compact(std::string(R"({"type":"object","properties":{"kind":{"type":"string"},"size":{"type":"integer"}},")") + kw +
                     R"(":{"kind":{"properties":{"size":{"minimum":10}},"required":["size"]}}})");
    EXPECT_TRUE(matches(g, R"({"size": 1})"));
    EXPECT_TRUE(matches(g, R"({"kind": "a", "size": 10})"));
    EXPECT_FALSE(matches(g, R"({"kind": "a", "size": 9})")) << kw;
    EXPECT_FALSE(matches(g, R"({"kind": "a"})")) << kw;
  }
  // A required key's dependency is always in force; an impossible one leaves the key out.
  EXPECT_TRUE(has(error_of(R"({"type":"object","properties":{"a":{},"b":{},"c":false},"required":["a"],
      "dependentRequired":{"a":["b"],"b":["c"]}})"), "no object satisfies the dependencies on 'b'"));
  EXPECT_TRUE(has(error_of(R"({"type":"object","properties":{"a":{},"c":false},"required":["a"],"dependentRequired":{"a":["c"]}})"),
                  "no object satisfies the dependencies on 'a'"));
  auto o = compact(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"},"c":false},
      "dependentRequired":{"a":["b"],"b":["c"]}})");
  EXPECT_TRUE(matches(o, "{}"));
  EXPECT_FALSE(matches(o, R"({"b": 1})"));
  EXPECT_FALSE(matches(o, R"({"a": 1, "b": 1})"));
}

TEST(GrammarJsonSchemaKeywords, TheTestValidatorRejectsWhatTheseKeywordsForbid) {
  using ojson = nlohmann::ordered_json;
  auto bad = [](const char* schema, const char* instance) { return validate_json(ojson::parse(schema), ojson::parse(instance)) != ""; };
  EXPECT_TRUE(bad(R"({"patternProperties":{"^a":{"type":"integer"}},"additionalProperties":false})", R"({"ab":"x"})"));
  EXPECT_TRUE(bad(R"({"patternProperties":{"^a":{"type":"integer"}},"additionalProperties":false})", R"({"b":1})"));
  EXPECT_FALSE(bad(R"({"patternProperties":{"^a":{"type":"integer"}},"additionalProperties":false})", R"({"ab":1})"));
  EXPECT_TRUE(bad(R"({"propertyNames":{"maxLength":1}})", R"({"ab":1})"));
  EXPECT_TRUE(bad(R"({"minProperties":2})", R"({"a":1})"));
  EXPECT_TRUE(bad(R"({"maxProperties":1})", R"({"a":1,"b":2})"));
  EXPECT_TRUE(bad(R"({"dependentRequired":{"a":["b"]}})", R"({"a":1})"));
  EXPECT_TRUE(bad(R"({"dependencies":{"a":{"required":["c"]}}})", R"({"a":1})"));
  EXPECT_FALSE(bad(R"({"dependencies":{"a":{"required":["c"]}}})", R"({"b":1})"));
  EXPECT_TRUE(bad(R"({"oneOf":[{"required":["a"]},{"required":["b"]}]})", R"({"a":1,"b":2})"));
  EXPECT_TRUE(bad(R"({"format":"hostname"})", R"("a..b")"));
  EXPECT_TRUE(bad(R"({"format":"uri"})", R"("no scheme")"));
  EXPECT_TRUE(bad(R"({"uniqueItems":true})", R"([{"a":1,"b":2},{"b":2,"a":1}])"));
  EXPECT_TRUE(bad(R"({"uniqueItems":true})", R"([1,1.0])"));
  EXPECT_FALSE(bad(R"({"uniqueItems":true})", R"([1,true])"));
  EXPECT_TRUE(bad(R"({"not":{"type":"string"}})", R"("s")"));
  EXPECT_FALSE(bad(R"({"not":{"type":"string"}})", "1"));
  EXPECT_TRUE(bad(R"({"if":{"required":["a"]},"then":{"required":["b"]}})", R"({"a":1})"));
  EXPECT_TRUE(bad(R"({"if":{"required":["a"]},"else":{"required":["b"]}})", R"({"c":1})"));
  EXPECT_FALSE(bad(R"({"if":{"required":["a"]},"else":{"required":["b"]}})", R"({"a":1})"));
}

TEST(GrammarJsonSchemaKeywords, PatternWithLengths) {
  auto g = compact(R"({"type":"string","pattern":"^[a-z]+$","minLength":2,"maxLength":4})");
  EXPECT_FALSE(matches(g, R"("a")"));
  EXPECT_TRUE(matches(g, R"("ab")"));
  EXPECT_TRUE(matches(g, R"("abcd")"));
  EXPECT_FALSE(matches(g, R"("abcde")"));
  EXPECT_FALSE(matches(g, R"("aB")"));
  // Several variable parts share the room; every string stays within the bounds.
  auto v = compact(R"({"type":"string","pattern":"^[A-Z][a-z]*-[0-9]*$","maxLength":6})");
  EXPECT_TRUE(matches(v, R"("A-")"));
  EXPECT_TRUE(matches(v, R"("Ab-1")"));
  EXPECT_FALSE(matches(v, R"("Abcdef-")"));
  EXPECT_FALSE(matches(v, R"("A-12345")"));
  // Unanchored patterns generate full matches; escapes count as one character.
  auto u = compact(R"({"type":"string","pattern":"\"[0-9]+","minLength":3,"maxLength":3})");
  EXPECT_TRUE(matches(u, R"("\"12")"));
  EXPECT_FALSE(matches(u, R"("\"1")"));
  EXPECT_FALSE(matches(u, R"("\"123")"));
  auto m = compact(R"({"type":"string","pattern":"^(ab)+$","minLength":3})");
  EXPECT_FALSE(matches(m, R"("ab")"));
  EXPECT_TRUE(matches(m, R"("abab")"));
  auto f = compact(R"({"type":"string","format":"hostname","maxLength":5})");
  EXPECT_TRUE(matches(f, R"("a.bc")"));
  EXPECT_FALSE(matches(f, R"("abc.de")"));
  EXPECT_FALSE(matches(f, R"("abcdef")"));
  auto s = compact(R"({"type":"string","pattern":"a","minLength":3,"maxLength":4})");  // around a match
  EXPECT_FALSE(matches(s, R"("a")"));
  EXPECT_TRUE(has(error_of(R"({"type":"string","pattern":"^[a-z]{5}$","maxLength":3})"), "#/pattern: no string both matches"));
}

TEST(GrammarJsonSchemaKeywords, UniqueItemsOverFiniteValues) {
  auto g = compact(R"({"type":"array","items":{"enum":["a","b","c",1,1.0]},"uniqueItems":true,"minItems":1})");
  EXPECT_TRUE(matches(g, R"(["a"])"));
  EXPECT_TRUE(matches(g, R"(["a", "c", 1])"));
  EXPECT_FALSE(matches(g, R"([])"));
  EXPECT_FALSE(matches(g, R"(["a", "a"])"));
  EXPECT_FALSE(matches(g, R"([1, 1.0])"));  // equal numbers
  EXPECT_FALSE(matches(g, R"(["a", "b", "c", 1, 1.0])"));
  auto b = compact(R"({"type":"array","items":{"type":"boolean"},"uniqueItems":true})");
  EXPECT_TRUE(matches(b, "[true, false]"));
  EXPECT_FALSE(matches(b, "[true, true]"));
  EXPECT_FALSE(matches(b, "[true, false, true]"));
  auto one = compact(R"({"type":"array","items":{"type":"string"},"uniqueItems":true,"maxItems":1})");
  EXPECT_TRUE(matches(one, R"(["x"])"));
  EXPECT_FALSE(matches(one, R"(["x", "y"])"));
  EXPECT_TRUE(has(error_of(R"({"type":"array","items":{"type":"string"},"uniqueItems":true})"),
                  "#: 'uniqueItems' is enforced only where the items take finitely many values"));
  EXPECT_TRUE(has(error_of(R"({"type":"array","items":{"enum":[1,2]},"uniqueItems":true,"minItems":3})"),
                  "'minItems' exceeds the distinct values"));
  EXPECT_EQ(error_of(R"({"type":"array","items":{"type":"string"},"uniqueItems":false})"), "");
}

TEST(GrammarJsonSchemaKeywords, NotOverSimpleSchemas) {
  auto t = compact(R"({"not":{"type":["string","integer"]}})");
  EXPECT_TRUE(matches(t, "null"));
  EXPECT_TRUE(matches(t, "[1]"));
  EXPECT_FALSE(matches(t, R"("s")"));
  EXPECT_FALSE(matches(t, "1"));
  EXPECT_FALSE(matches(t, "1.5"));  // numbers are left out with integers
  auto r = compact(R"({"type":"object","properties":{"site":{"type":"string"},"app":{"type":"string"}},"required":["site"],
      "not":{"allOf":[{"required":["site"]},{"required":["app"]}]}})");
  EXPECT_TRUE(matches(r, R"({"site": "x"})"));
  EXPECT_FALSE(matches(r, R"({"site": "x", "app": "y"})"));
  auto a = compact(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"},"c":{"type":"integer"}},
      "not":{"anyOf":[{"required":["a"]},{"required":["b"]}]}})");
  EXPECT_TRUE(matches(a, R"({"c": 1})"));
  EXPECT_FALSE(matches(a, R"({"a": 1})"));
  EXPECT_FALSE(matches(a, R"({"b": 1, "c": 1})"));
  auto e = compact(R"({"enum":["x","y",3],"not":{"enum":["y",3.0]}})");
  EXPECT_TRUE(matches(e, R"("x")"));
  EXPECT_FALSE(matches(e, R"("y")"));
  EXPECT_FALSE(matches(e, "3"));
  auto f = compact(R"({"type":"integer","not":false})");
  EXPECT_TRUE(matches(f, "4"));
  EXPECT_TRUE(has(error_of(R"({"not":{}})"), "#/not: 'not' of a schema every value satisfies"));
  EXPECT_TRUE(has(error_of(R"({"type":"string","not":{"pattern":"^a"}})"), "#/not: 'not' is enforced only over"));
  EXPECT_TRUE(has(error_of(R"({"type":"object","required":["a"],"not":{"required":["a"]}})"), "'not' forbids keys the schema requires"));
}

TEST(GrammarJsonSchemaKeywords, MultipleOfOneAndReasonsForUnsupportedKeywords) {
  auto g = compact(R"({"type":"number","multipleOf":1,"minimum":-2,"maximum":3.5})");
  EXPECT_TRUE(matches(g, "3"));
  EXPECT_TRUE(matches(g, "-2"));
  EXPECT_FALSE(matches(g, "1.5"));
  EXPECT_FALSE(matches(g, "4"));
  EXPECT_TRUE(has(error_of(R"({"type":"integer","multipleOf":5})"), "'multipleOf' is not supported: only multipleOf 1"));
  EXPECT_TRUE(has(error_of(R"({"if":{"minimum":3},"then":{"maximum":5}})"), "#/if: 'if' is enforced only for conditions"));
  EXPECT_TRUE(has(error_of(R"({"type":"array","contains":{"const":1}})"), "'contains' is not supported: a grammar does not count"));
}

TEST(GrammarJsonSchemaKeywords, LongStringsSharedAcrossProperties) {
  // 60 properties of up to 3,000 characters: one compiled rule, not 60 copies (which exceed
  // the automaton size limits).
  std::string s = R"({"type":"object","properties":{)";
  for (int i = 0; i < 60; ++i) {
    if (i > 0) s += ",";
    s += "\"p";
    s += std::to_string(i);
    s += R"(":{"type":"string","maxLength":3000})";
  }
  s += R"(},"required":["p59"]})";
  auto g = compact(s);
  std::string ok = "{\"p59\": \"";
  ok.append(3000, 'x');
  std::string too_long = ok;
  too_long += "x\"}";
  ok += "\"}";
  EXPECT_TRUE(matches(g, ok));
  EXPECT_FALSE(matches(g, too_long));
  EXPECT_TRUE(matches(g, R"({"p0": "a", "p59": ""})"));
}

TEST(GrammarJsonSchemaKeywords, RequiredKeysWithoutAPropertySchema) {
  // additionalProperties left out: a required undeclared key takes any value (no other extra keys).
  auto g = compact(R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a","id"]})");
  EXPECT_TRUE(matches(g, R"({"a": 1, "id": "x"})"));
  EXPECT_TRUE(matches(g, R"({"a": 1, "id": [1, {}]})"));
  EXPECT_FALSE(matches(g, R"({"a": 1})"));
  EXPECT_FALSE(matches(g, R"({"a": 1, "id": 2, "z": 3})"));
  EXPECT_TRUE(has(error_of(R"({"type":"object","required":["id"],"additionalProperties":false})"), "required property 'id' is not allowed"));
  // An anyOf branch that cannot hold is left out.
  auto b = compact(R"({"anyOf":[{"type":"object","required":["id"],"additionalProperties":false},{"type":"integer"}]})");
  EXPECT_TRUE(matches(b, "1"));
  EXPECT_FALSE(matches(b, "{}"));
}

TEST(GrammarJsonSchemaKeywords, IfThenElse) {
  // A discriminator the property lists: both cases.
  auto d = compact(R"({"type":"object","properties":{"kind":{"enum":["a","b"]},"n":{"type":"integer"},"s":{"type":"string"}},
      "required":["kind"],"if":{"properties":{"kind":{"const":"a"}}},"then":{"required":["n"]},"else":{"required":["s"]}})");
  EXPECT_TRUE(matches(d, R"({"kind": "a", "n": 1})"));
  EXPECT_TRUE(matches(d, R"({"kind": "b", "s": "x"})"));
  EXPECT_FALSE(matches(d, R"({"kind": "a", "s": "x"})"));
  EXPECT_FALSE(matches(d, R"({"kind": "b", "n": 1})"));
  // A free-text property: only objects where the condition holds (the key absent or equal).
  auto f = compact(R"({"type":"object","properties":{"t":{"type":"string"},"n":{"type":"integer"}},
      "if":{"properties":{"t":{"const":"x"}}},"then":{"required":["n"]}})");
  EXPECT_TRUE(matches(f, R"({"n": 1})"));
  EXPECT_TRUE(matches(f, R"({"t": "x", "n": 1})"));
  EXPECT_FALSE(matches(f, R"({"t": "y", "n": 1})"));
  EXPECT_FALSE(matches(f, R"({"t": "x"})"));
  // Required keys: the condition fails with a key left out.
  auto r = compact(R"({"type":["object","null"],"properties":{"a":{"type":"integer"},"b":{"type":"integer"}},
      "if":{"required":["a"]},"then":{"required":["b"]},"else":{"properties":{"b":{"minimum":10}}}})");
  EXPECT_TRUE(matches(r, R"({"a": 1, "b": 2})"));
  EXPECT_FALSE(matches(r, R"({"a": 1})"));
  EXPECT_TRUE(matches(r, R"({"b": 10})"));
  EXPECT_FALSE(matches(r, R"({"b": 9})"));
  EXPECT_TRUE(matches(r, "null"));
}
