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
