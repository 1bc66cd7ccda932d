// The schema and regex corpora (tests/data/grammar): for every schema, random walks through
// the matcher (temperature-1 draws, then the shortest completion) on the fixture and the
// real DeepSeek vocabularies produce text that parses as JSON and validates against the
// schema (our own validator, json_validator.h); every regex walk fully matches (PCRE2).
// With DEEPINFER_GRAMMAR_SAMPLES=FILE the outputs are written as JSONL for
// tools/validate_structured_outputs.py (Python `jsonschema`, `re`).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <mutex>

#include <nlohmann/json.hpp>

#include "grammar/json_schema.h"
#include "grammar/regex_parser.h"
#include "grammar_test_util.h"
#include "json_validator.h"

using namespace deepinfer;
using namespace deepinfer::grammar;
using namespace deepinfer::grammar::testing;
using ojson = nlohmann::ordered_json;

namespace {

std::vector<ojson> read_jsonl(const std::string& rel) {
  std::ifstream in(test_data(rel));
  EXPECT_TRUE(in) << rel;
  std::vector<ojson> out;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) out.push_back(ojson::parse(line));
  }
  return out;
}

void record(const ojson& sample) {
  static std::mutex mu;
  static std::ofstream out = [] {
    const char* path = std::getenv("DEEPINFER_GRAMMAR_SAMPLES");
    return path ? std::ofstream(path, std::ios::app) : std::ofstream();
  }();
  std::lock_guard<std::mutex> lock(mu);
  if (out) out << sample.dump() << "\n";
}

// Sanitizer builds run a sample of the DeepSeek-vocabulary walks (they are ~10x slower).
#if defined(__SANITIZE_ADDRESS__)
constexpr size_t kDeepSeekStride = 6;
#else
constexpr size_t kDeepSeekStride = 1;
#endif

struct WalkPlan {
  int budget;
  bool use_logits;
};

void walk_schema(const ojson& entry, const std::shared_ptr<const Vocabulary>& vocab, const std::vector<WalkPlan>& plans,
                 uint64_t seed, const char* vocab_name) {
  const std::string name = entry["name"];
  const ojson& schema = entry["schema"];
  JsonSchemaOptions opts;
  opts.any_whitespace = (seed % 3) != 0;  // both layouts across the corpus
  opts.max_whitespace = 3;
  std::shared_ptr<const CompiledGrammar> g;
  try {
    g = CompiledGrammar::compile(json_schema_to_grammar(schema, opts), vocab);
  } catch (const Error& e) {
    ADD_FAILURE() << name << ": " << e.what();
    return;
  }
  std::vector<float> logits = random_logits(vocab->size(), seed);
  std::mt19937_64 rng(seed);
  for (const auto& plan : plans) {
    bool finished = false;
    std::string out = random_walk(g, rng, plan.budget, plan.use_logits ? &logits : nullptr, &finished);
    ASSERT_TRUE(finished) << name << ": walk did not finish: " << out;
    ojson value;
    try {
      value = ojson::parse(out);
    } catch (const std::exception& e) {
      ADD_FAILURE() << name << " (" << vocab_name << "): output is not JSON: " << out << "\n" << e.what();
      continue;
    }
    std::string err = validate_json(schema, value);
    EXPECT_EQ(err, "") << name << " (" << vocab_name << "): " << out;
    record({{"kind", "json_schema"}, {"name", name}, {"vocab", vocab_name}, {"schema", schema}, {"output", out}});
  }
}

}  // namespace

TEST(GrammarCorpus, HasAtLeast200Schemas) {
  EXPECT_GE(read_jsonl("grammar/schemas_hand.jsonl").size() + read_jsonl("grammar/schemas_generated.jsonl").size(), 200u);
}

TEST(GrammarCorpus, HandWrittenSchemasOnTheFixtureVocabulary) {
  auto v = fixture_vocab();
  uint64_t seed = 1;
  for (const auto& e : read_jsonl("grammar/schemas_hand.jsonl")) {
    walk_schema(e, v, {{0, false}, {8, true}, {24, true}, {64, false}, {200, true}}, seed++, "fixture");
  }
}

TEST(GrammarCorpus, GeneratedSchemasOnTheFixtureVocabulary) {
  auto v = fixture_vocab();
  uint64_t seed = 1000;
  for (const auto& e : read_jsonl("grammar/schemas_generated.jsonl")) {
    walk_schema(e, v, {{4, true}, {32, false}, {96, true}}, seed++, "fixture");
  }
}

// The keywords beyond the core set (patternProperties, propertyNames, min/maxProperties,
// dependencies, oneOf told apart by required keys, formats, unknown keywords): many walks
// on both vocabularies and on single bytes, so that an admitted invalid document shows.
TEST(GrammarCorpus, KeywordSchemas) {
  uint64_t seed = 7000;
  for (const auto& e : read_jsonl("grammar/schemas_keywords.jsonl")) {
    walk_schema(e, fixture_vocab(), {{0, false}, {6, true}, {16, false}, {32, true}, {64, false}, {128, true}}, seed++, "fixture");
    walk_schema(e, byte_vocab(), {{8, false}, {40, false}, {120, false}, {300, false}}, seed++, "bytes");
    walk_schema(e, deepseek_vocab(), {{24, true}}, seed++, "deepseek");
  }
}

TEST(GrammarCorpus, AllSchemasOnTheDeepSeekVocabulary) {
  auto v = deepseek_vocab();
  uint64_t seed = 5000;
  auto hand = read_jsonl("grammar/schemas_hand.jsonl");
  auto gen = read_jsonl("grammar/schemas_generated.jsonl");
  for (size_t i = 0; i < hand.size(); i += kDeepSeekStride) walk_schema(hand[i], v, {{16, false}, {48, true}}, seed++, "deepseek");
  for (size_t i = 0; i < gen.size(); i += kDeepSeekStride) walk_schema(gen[i], v, {{32, false}}, seed++, "deepseek");
}

TEST(GrammarCorpus, RegexOutputsFullyMatch) {
  uint64_t seed = 9000;
  for (const auto& vocab : {fixture_vocab(), deepseek_vocab()}) {
    for (const auto& e : read_jsonl("grammar/regexes.jsonl")) {
      const std::string pattern = e["pattern"];
      auto g = CompiledGrammar::compile(regex_to_grammar(pattern), vocab);
      std::mt19937_64 rng(seed++);
      for (int budget : {0, 4, 16, 40}) {
        bool finished = false;
        std::string out = random_walk(g, rng, budget, nullptr, &finished);
        ASSERT_TRUE(finished) << pattern;
        EXPECT_TRUE(regex_matches(pattern, out, true)) << "/" << pattern << "/ vs '" << out << "'";
        record({{"kind", "regex"}, {"name", e["name"]}, {"pattern", pattern}, {"output", out}});
      }
    }
  }
}

TEST(GrammarCorpus, AnyJsonOutputsParse) {
  for (bool object_only : {false, true}) {
    auto g = CompiledGrammar::compile(builtin_json_grammar(object_only), fixture_vocab());
    std::mt19937_64 rng(object_only ? 77 : 78);
    for (int budget : {0, 10, 50, 150, 300}) {
      bool finished = false;
      std::string out = random_walk(g, rng, budget, nullptr, &finished);
      ASSERT_TRUE(finished);
      ojson v;
      EXPECT_NO_THROW(v = ojson::parse(out)) << out;
      if (object_only) {
        EXPECT_TRUE(v.is_object()) << out;
      }
      record({{"kind", "json_object"}, {"name", object_only ? "json_object" : "json_value"}, {"object_only", object_only}, {"output", out}});
    }
  }
}
