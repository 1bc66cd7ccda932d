// Deterministic mini-fuzz (the CI counterpart of tests/fuzz): a few thousand mutations of
// the corpus schemas, regexes and grammars through every front end, then compile and
// match. Each input must compile or fail with deepinfer::Error; an allowed token must be
// accepted; sanitizers (debug-asan) catch memory errors.
#include <gtest/gtest.h>

#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "grammar/ebnf_parser.h"
#include "grammar/json_schema.h"
#include "grammar/regex_parser.h"
#include "grammar_test_util.h"
#include "json_validator.h"

using namespace deepinfer;
using namespace deepinfer::grammar;
using namespace deepinfer::grammar::testing;

namespace {

std::vector<std::string> seeds(const char* file, const char* key) {
  std::vector<std::string> out;
  std::ifstream in(test_data(std::string("grammar/") + file));
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::ordered_json::parse(line);
    out.push_back(j[key].is_string() && std::string(key) == "pattern" ? j[key].get<std::string>() : j[key].dump());
  }
  return out;
}

std::string mutate(std::string s, std::mt19937_64& rng, const std::vector<std::string>& pool) {
  static const char* kTokens[] = {"{", "}", "[", "]", "(", ")", "\"", "\\", "|", "*", "+", "?", "{2,3}", "::=", "$ref",
                                  "\"#\"", "-", "^", "$", ".", "\\u00", "\xC3", "\xFF", "0", "1e9", "-1", "null", ",", ":"};
  const int n = 1 + static_cast<int>(rng() % 4);
  for (int k = 0; k < n; ++k) {
    const size_t pos = s.empty() ? 0 : rng() % (s.size() + 1);
    switch (rng() % 5) {
      case 0:
        if (!s.empty() && pos < s.size()) s[pos] = static_cast<char>(rng() % 256);
        break;
      case 1:
        s.insert(pos, kTokens[rng() % (sizeof kTokens / sizeof *kTokens)]);
        break;
      case 2:
        if (!s.empty() && pos < s.size()) s.erase(pos, 1 + rng() % std::min<size_t>(8, s.size() - pos));
        break;
      case 3: {  // splice from another seed
        const std::string& o = pool[rng() % pool.size()];
        if (!o.empty()) {
          size_t b = rng() % o.size();
          s.insert(pos, o.substr(b, 1 + rng() % 24));
        }
        break;
      }
      default:
        if (pos < s.size()) s.insert(pos, s.substr(pos, 1 + rng() % 6));  // duplicate a piece
    }
  }
  return s;
}

// A structural mutation of a JSON schema: replace, delete, graft or add keywords.
std::string mutate_schema(const std::string& text, std::mt19937_64& rng, const std::vector<std::string>& pool) {
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(text);
  static const char* kKeys[] = {"type", "minimum", "maximum", "exclusiveMinimum", "minLength", "maxLength", "pattern",
                                "format", "items", "prefixItems", "minItems", "maxItems", "enum", "const", "anyOf",
                                "allOf", "oneOf", "$ref", "properties", "required", "additionalProperties", "$defs"};
  auto random_value = [&]() -> nlohmann::ordered_json {
    switch (rng() % 10) {
      case 0: return static_cast<int>(rng() % 40) - 10;
      case 1: return (static_cast<double>(rng() % 2000) - 1000) / 8;
      case 2: return std::vector<std::string>{"string", "integer", "object", "array", "number", "null", "boolean", "x"}[rng() % 8];
      case 3: return rng() % 2 == 0;
      case 4: return nullptr;
      case 5: return std::vector<std::string>{"#", "#/$defs/a", "#/properties", "^a+$", "date", "(", "[a-"}[rng() % 7];
      case 6: return nlohmann::ordered_json::array({static_cast<int>(rng() % 5), "a"});
      case 7: return nlohmann::ordered_json::object();
      default: return nlohmann::ordered_json::parse(pool[rng() % pool.size()]);
    }
  };
  for (int k = 0, n = 1 + static_cast<int>(rng() % 3); k < n; ++k) {
    nlohmann::ordered_json* node = &j;  // walk down a random path
    for (int d = 0; d < 6 && (node->is_object() || node->is_array()) && !node->empty() && rng() % 3 != 0; ++d) {
      auto it = node->begin();
      std::advance(it, static_cast<std::ptrdiff_t>(rng() % node->size()));
      node = &*it;
    }
    if (node->is_object() && rng() % 2 == 0) {
      (*node)[kKeys[rng() % (sizeof kKeys / sizeof *kKeys)]] = random_value();
    } else if (node->is_object() && !node->empty() && rng() % 2 == 0) {
      auto it = node->begin();
      std::advance(it, static_cast<std::ptrdiff_t>(rng() % node->size()));
      node->erase(it.key());
    } else {
      *node = random_value();
    }
  }
  return j.dump();
}

// Compiles with tight limits and walks a few tokens; false when the front end rejected it.
bool exercise(const Grammar& g, std::mt19937_64& rng) {
  CompileOptions o;
  o.max_nfa_states = 20000;
  o.max_dfa_states = 3000;
  o.precompute = false;
  std::shared_ptr<const CompiledGrammar> cg;
  try {
    cg = CompiledGrammar::compile(g, byte_vocab({"\":", "{\"", "\"}", "ab"}), o);
  } catch (const Error&) {
    return false;
  }
  bool finished = false;
  random_walk(cg, rng, static_cast<int>(rng() % 12), nullptr, &finished, 40);
  return true;
}

template <class F>
void run(const std::vector<std::string>& pool, int n, uint64_t seed, F&& front_end, int* n_ok) {
  std::mt19937_64 rng(seed);
  for (int i = 0; i < n; ++i) {
    std::string input = mutate(pool[rng() % pool.size()], rng, pool);
    try {
      Grammar g = front_end(input);
      *n_ok += exercise(g, rng) ? 1 : 0;
    } catch (const Error&) {
    } catch (const std::exception& e) {
      ADD_FAILURE() << "non-Error exception " << e.what() << " for input: " << input;
    }
  }
}

}  // namespace

TEST(GrammarMiniFuzz, JsonSchemas) {
  auto pool = seeds("schemas_hand.jsonl", "schema");
  for (auto& s : seeds("schemas_invalid.jsonl", "schema")) pool.push_back(s);
  int ok = 0;
  run(pool, 1000, 1, [](const std::string& t) { return json_schema_to_grammar(t); }, &ok);
  // Structural mutations keep the JSON valid, so the compiler itself is exercised.
  std::mt19937_64 rng(11);
  int ok2 = 0;
  for (int i = 0; i < 2000; ++i) {
    std::string input = mutate_schema(pool[rng() % pool.size()], rng, pool);
    try {
      ok2 += exercise(json_schema_to_grammar(input), rng) ? 1 : 0;
    } catch (const Error&) {
    } catch (const std::exception& e) {
      ADD_FAILURE() << "non-Error exception " << e.what() << " for input: " << input;
    }
  }
  EXPECT_GT(ok2, 300) << ok;
}

TEST(GrammarMiniFuzz, Regexes) {
  auto pool = seeds("regexes.jsonl", "pattern");
  int ok = 0;
  run(pool, 2500, 2, [](const std::string& t) { return regex_to_grammar(t); }, &ok);
  EXPECT_GT(ok, 300);
}

TEST(GrammarMiniFuzz, Ebnf) {
  std::vector<std::string> pool = {"root ::= \"a\" b*\nb ::= [0-9] | \"(\" root \")\"",
                                   "root ::= x{2,5} \"\\u00e9\" .\nx ::= [^\"\\\\]",
                                   "root ::= obj\nobj ::= \"{\" (str \":\" val (\",\" str \":\" val)*)? \"}\"\n"
                                   "str ::= \"\\\"\" [a-z]* \"\\\"\"\nval ::= str | obj | [0-9]+"};
  pool.push_back(builtin_json_grammar().to_ebnf());
  pool.push_back(json_schema_to_grammar(R"({"type":"object","properties":{"a":{"type":"integer","minimum":-5,"maximum":70}}})").to_ebnf());
  int ok = 0;
  run(pool, 2500, 3, [](const std::string& t) { return parse_ebnf(t); }, &ok);
  EXPECT_GT(ok, 100);
}

// Deep and wide inputs from a fixed-seed generator: long chains of rules, deep expression
// and document nesting, many properties, long names, big numbers, random oneOf. Each must
// compile or fail with deepinfer::Error (no stack overflow, no abort); a schema's finished
// outputs must validate against it (oneOf exactly once).
namespace {

std::string deep_ebnf(std::mt19937_64& rng) {
  const int n = 1 + static_cast<int>(rng() % 1500);
  std::string t;
  switch (rng() % 4) {
    case 0:  // a chain of rules
      for (int i = 0; i < n; ++i) {
        const std::string a = "r" + std::to_string(i), b = "r" + std::to_string(i + 1);
        switch (rng() % 4) {
          case 0: t += a + " ::= " + b + "\n"; break;
          case 1: t += a + " ::= \"x\" " + b + "\n"; break;
          case 2: t += a + " ::= " + b + " | [0-9]\n"; break;
          default: t += a + " ::= (" + b + " \",\")?\n"; break;
        }
      }
      t += "r" + std::to_string(n) + " ::= \"e\"\nroot ::= r0\n";
      return t;
    case 1: return "root ::= \"a\"" + std::string(static_cast<size_t>(n), "?*+"[rng() % 3]) + "\n";
    case 2: return "root ::= " + std::string(static_cast<size_t>(n % 400), '(') + "\"a\"" + std::string(static_cast<size_t>(n % 400), ')') + "\n";
    default: {
      t = "root ::= ";
      for (int i = 0; i < n; ++i) t += "\"" + std::to_string(i % 10) + "\" | ";
      return t + "\"z\"\n";
    }
  }
}

nlohmann::ordered_json deep_schema(std::mt19937_64& rng, bool* exact_numbers) {
  using oj = nlohmann::ordered_json;
  const int n = 1 + static_cast<int>(rng() % 400);
  switch (rng() % 7) {
    case 0: {  // nested objects / arrays / anyOf
      oj s = {{"type", "integer"}, {"minimum", 0}, {"maximum", 9}};
      for (int i = 0; i < n % 260; ++i) {
        switch (rng() % 3) {
          case 0: s = {{"type", "object"}, {"properties", {{"a", s}}}, {"required", {"a"}}}; break;
          case 1: s = {{"type", "array"}, {"items", s}, {"maxItems", 2}}; break;
          default: s = {{"anyOf", {s, {{"type", "null"}}}}}; break;
        }
      }
      return s;
    }
    case 1: {  // many properties
      oj s = {{"type", "object"}, {"properties", oj::object()}, {"required", oj::array()}};
      for (int i = 0; i < n * 4; ++i) {
        s["properties"]["p" + std::to_string(i)] = {{"type", rng() % 2 ? "integer" : "boolean"}};
        if (rng() % 2) s["required"].push_back("p" + std::to_string(i));
      }
      if (rng() % 2) s["additionalProperties"] = false;
      return s;
    }
    case 2:  // a long property name next to additional properties
      return {{"type", "object"}, {"properties", {{std::string(static_cast<size_t>(n), 'k'), {{"type", "null"}}}}}, {"additionalProperties", true}};
    case 3: {  // a deep const value
      oj v = 1;
      for (int i = 0; i < n; ++i) v = rng() % 2 ? oj::array({v}) : oj{{"k", v}};
      return {{"const", v}};
    }
    case 4: {  // big numbers
      *exact_numbers = false;
      auto digits = [&](int len) {
        std::string d(1, static_cast<char>('1' + rng() % 9));
        for (int i = 1; i < len; ++i) d += static_cast<char>('0' + rng() % 10);
        return d;
      };
      const std::string lo = digits(1 + static_cast<int>(rng() % 30)), hi = digits(1 + static_cast<int>(rng() % 30));
      return oj::parse("{\"type\":\"integer\",\"minimum\":" + lo + ",\"maximum\":" + hi + "}");
    }
    case 5: {  // oneOf: random branches, exclusive or not
      oj branches = oj::array();
      const char* types[] = {"integer", "number", "string", "null", "boolean", "object", "array"};
      for (int i = 0; i < 2 + n % 5; ++i) {
        switch (rng() % 4) {
          case 0: branches.push_back({{"type", types[rng() % 7]}}); break;
          case 1: branches.push_back({{"const", static_cast<int>(rng() % 4)}}); break;
          case 2: branches.push_back({{"enum", {static_cast<int>(rng() % 4), "a"}}}); break;
          default:
            branches.push_back({{"type", "object"}, {"properties", {{"k", {{"const", static_cast<int>(rng() % 4)}}}}},
                                {"required", {"k"}}});
        }
      }
      return {{"oneOf", branches}};
    }
    default: {  // a chain of $refs
      oj defs = oj::object();
      for (int i = 0; i < n; ++i) defs["d" + std::to_string(i)] = {{"$ref", "#/$defs/d" + std::to_string(i + 1)}};
      defs["d" + std::to_string(n)] = {{"type", "boolean"}};
      return {{"$ref", "#/$defs/d0"}, {"$defs", defs}};
    }
  }
}

std::string deep_regex(std::mt19937_64& rng) {
  const auto n = static_cast<size_t>(1 + rng() % 400);
  switch (rng() % 3) {
    case 0: return std::string(n, '(') + "a" + std::string(n, ')');
    case 1: {
      std::string r;
      for (size_t i = 0; i < n; ++i) r += "(b|";
      return r + "c" + std::string(n, ')');
    }
    default: {
      std::string r;
      for (size_t i = 0; i < n; ++i) r += "[a-f]{1,2}";
      return r;
    }
  }
}

template <class F>
void deep_case(const char* what, const std::string& input, F&& make, std::mt19937_64& rng, int* ok,
               const nlohmann::ordered_json* schema = nullptr) {
  try {
    Grammar g = make();
    CompileOptions o;
    o.precompute = false;
    auto cg = CompiledGrammar::compile(g, byte_vocab(), o);
    ++*ok;
    for (int w = 0; w < 3; ++w) {
      bool finished = false;
      const std::string out = random_walk(cg, rng, 200, nullptr, &finished);
      if (!finished || !schema) continue;
      EXPECT_EQ(validate_json(*schema, nlohmann::ordered_json::parse(out)), "") << what << ": " << input.substr(0, 300) << " -> " << out.substr(0, 300);
    }
  } catch (const Error&) {
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": non-Error exception " << e.what() << " for input: " << input.substr(0, 300);
  }
}

}  // namespace

TEST(GrammarMiniFuzz, DeepAndWide) {
  std::mt19937_64 rng(2026);
  int ok_ebnf = 0, ok_schema = 0, ok_regex = 0;
  for (int i = 0; i < 80; ++i) {
    const std::string text = deep_ebnf(rng);
    deep_case("ebnf", text, [&] { return parse_ebnf(text); }, rng, &ok_ebnf);
  }
  for (int i = 0; i < 150; ++i) {
    bool exact = true;
    const nlohmann::ordered_json s = deep_schema(rng, &exact);
    const std::string text = s.dump();
    JsonSchemaOptions o;
    o.any_whitespace = false;
    deep_case("schema", text, [&] { return json_schema_to_grammar(text, o); }, rng, &ok_schema, exact ? &s : nullptr);
  }
  for (int i = 0; i < 80; ++i) {
    const std::string text = deep_regex(rng);
    deep_case("regex", text, [&] { return regex_to_grammar(text); }, rng, &ok_regex);
  }
  EXPECT_GT(ok_ebnf, 20);
  EXPECT_GT(ok_schema, 40);
  EXPECT_GT(ok_regex, 20);
}
