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
  run(pool, 1500, 1, [](const std::string& t) { return json_schema_to_grammar(t); }, &ok);
  EXPECT_GT(ok, 50);  // the mutations are not all rejected
}

TEST(GrammarMiniFuzz, Regexes) {
  auto pool = seeds("regexes.jsonl", "pattern");
  int ok = 0;
  run(pool, 1500, 2, [](const std::string& t) { return regex_to_grammar(t); }, &ok);
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
  run(pool, 1500, 3, [](const std::string& t) { return parse_ebnf(t); }, &ok);
  EXPECT_GT(ok, 100);
}
