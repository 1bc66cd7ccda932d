// Structured outputs end to end: a random-weight model with the fixture tokenizer at
// temperature 1.0 (and greedy, and n > 1) under JSON Schema, regex, EBNF grammar and
// json_object constraints: every output parses and validates, generation stops when the
// grammar completes, a bad schema fails only its request, and one source compiles once.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "api/batch_file.h"
#include "deepinfer/llm.h"
#include "engine/random_model.h"
#include "grammar/compiled_grammar.h"
#include "grammar/grammar_cache.h"
#include "grammar/json_validator.h"
#include "grammar/matcher.h"
#include "sample/sampler.h"
#include "tokenizer/tokenizer.h"

using namespace deepinfer;
using ojson = nlohmann::ordered_json;

namespace {

using testing_util::fixture;
using testing_util::random_model_dir;

LLM& llm() {
  static LLM l(testing_util::random_model_config(3));
  return l;
}

void record(const ojson& sample) {
  static std::ofstream out = [] {
    const char* path = std::getenv("DEEPINFER_GRAMMAR_SAMPLES");
    return path ? std::ofstream(path, std::ios::app) : std::ofstream();
  }();
  if (out) out << sample.dump() << "\n";
}

StructuredOutput json_schema(const std::string& schema) {
  StructuredOutput so;
  so.kind = StructuredOutput::Kind::kJsonSchema;
  so.source = schema;
  so.any_whitespace = false;  // finite languages: every output completes within max_tokens
  return so;
}

// Schemas with finite languages (bounded strings, arrays, numbers; compact layout).
const std::vector<std::string> kSchemas = {
    R"({"type":"object","properties":{"name":{"type":"string","maxLength":8},"age":{"type":"integer","minimum":0,"maximum":120},
        "ok":{"type":"boolean"}},"required":["name","age"]})",
    R"({"type":"array","items":{"enum":["red","green","blue"]},"minItems":1,"maxItems":4})",
    R"({"type":"object","properties":{"id":{"type":"string","format":"uuid"},"when":{"type":"string","format":"date-time"},
        "ip":{"type":"string","format":"ipv4"}},"required":["id","when"]})",
    R"({"anyOf":[{"type":"integer","minimum":-5,"maximum":5},{"type":"null"},{"const":"x"},{"type":"number","minimum":0.5,"maximum":0.75}]})",
    R"({"type":"object","properties":{"items":{"type":"array","maxItems":2,"items":{"type":"object","properties":{
        "sku":{"type":"string","pattern":"^[A-Z]{2}-[0-9]{3}$"},"qty":{"type":"integer","minimum":1,"maximum":99}},
        "required":["sku","qty"]}},"note":{"type":["string","null"],"maxLength":5}},"required":["items"]})",
    R"({"$defs":{"leaf":{"type":"string","minLength":1,"maxLength":3}},"type":"array","prefixItems":[{"$ref":"#/$defs/leaf"},
        {"type":"boolean"}],"items":false,"minItems":2})",
    R"({"oneOf":[{"type":"object","properties":{"kind":{"const":"a"},"v":{"type":"integer","minimum":0,"maximum":9}},"required":["kind","v"]},
        {"type":"object","properties":{"kind":{"const":"b"},"w":{"type":"boolean"}},"required":["kind","w"]}]})",
};

}  // namespace

TEST(EngineStructured, JsonSchemaOutputsParseAndValidate) {
  std::vector<Prompt> prompts;
  std::vector<SamplingParams> params;
  for (size_t i = 0; i < kSchemas.size(); ++i) {
    for (float temp : {1.0f, 1.0f, 0.0f}) {
      SamplingParams p;
      p.temperature = temp;
      p.max_tokens = 600;
      p.n = temp > 0 ? 2 : 1;
      p.seed = 100 + prompts.size();
      p.structured_output = json_schema(kSchemas[i]);
      prompts.push_back(Prompt::from_text("Answer in JSON: " + std::to_string(i)));
      params.push_back(p);
    }
  }
  auto outs = llm().generate(prompts, params);
  ASSERT_EQ(outs.size(), prompts.size());
  for (size_t r = 0; r < outs.size(); ++r) {
    const std::string& schema_text = params[r].structured_output->source;
    const ojson schema = ojson::parse(schema_text);
    ASSERT_EQ(outs[r].error, "");
    ASSERT_EQ(outs[r].outputs.size(), static_cast<size_t>(params[r].n));
    for (const auto& c : outs[r].outputs) {
      EXPECT_EQ(c.finish_reason, FinishReason::kStop) << c.text;
      ojson value;
      try {
        value = ojson::parse(c.text);
      } catch (const std::exception& e) {
        ADD_FAILURE() << "not JSON: " << c.text;
        continue;
      }
      EXPECT_EQ(grammar::testing::validate_json(schema, value), "") << c.text;
      record({{"kind", "json_schema"}, {"name", "engine_" + std::to_string(r)}, {"schema", schema}, {"output", c.text}});
    }
  }
}

TEST(EngineStructured, RegexGrammarAndJsonObject) {
  SamplingParams re;
  re.temperature = 1.0f;
  re.max_tokens = 200;
  re.n = 3;
  re.structured_output = StructuredOutput{StructuredOutput::Kind::kRegex, "(yes|no|maybe)-[0-9]{2,4}\\.", true};
  SamplingParams gr = re;
  gr.structured_output = StructuredOutput{StructuredOutput::Kind::kGrammar,
                                          "root ::= \"(\" expr \")\"\nexpr ::= [0-9] | \"(\" expr \"+\" expr \")\"", true};
  gr.max_tokens = 2000;
  SamplingParams obj = re;
  obj.structured_output = StructuredOutput{StructuredOutput::Kind::kJsonObject, "", true};
  obj.max_tokens = 48;
  auto outs = llm().generate({Prompt::from_text("a"), Prompt::from_text("b"), Prompt::from_text("c")}, {re, gr, obj});
  ASSERT_EQ(outs.size(), 3u);
  for (const auto& c : outs[0].outputs) {
    EXPECT_EQ(c.finish_reason, FinishReason::kStop);
    EXPECT_TRUE(grammar::testing::regex_matches("(yes|no|maybe)-[0-9]{2,4}\\.", c.text, true)) << c.text;
    record({{"kind", "regex"}, {"name", "engine_regex"}, {"pattern", "(yes|no|maybe)-[0-9]{2,4}\\."}, {"output", c.text}});
  }
  // Balanced parentheses: a prefix of the grammar, complete when it stopped.
  auto tok = tokenizer::Tokenizer::load(random_model_dir());
  auto vocab = grammar::Vocabulary::from_tokenizer(*tok);
  auto g = grammar::CompiledGrammar::compile(grammar::grammar_of(*gr.structured_output), vocab);
  for (const auto& c : outs[1].outputs) {
    grammar::Matcher m(g);
    for (int32_t t : c.token_ids) EXPECT_TRUE(m.accept_token(t)) << c.text;
    if (c.finish_reason == FinishReason::kStop) {
      EXPECT_TRUE(m.is_terminated() || m.is_completed()) << c.text;
    }
  }
  // json_object: a valid prefix; a finished one is a JSON object.
  auto jo = grammar::CompiledGrammar::compile(grammar::grammar_of(*obj.structured_output), vocab);
  for (const auto& c : outs[2].outputs) {
    grammar::Matcher m(jo);
    for (int32_t t : c.token_ids) EXPECT_TRUE(m.accept_token(t)) << c.text;
    if (c.finish_reason == FinishReason::kStop) {
      ojson v;
      EXPECT_NO_THROW(v = ojson::parse(c.text)) << c.text;
      EXPECT_TRUE(v.is_object()) << c.text;
    }
  }
}

TEST(EngineStructured, InvalidSourceFailsOnlyThatRequest) {
  SamplingParams ok;
  ok.max_tokens = 100;
  ok.structured_output = json_schema(R"({"type":"boolean"})");
  SamplingParams bad_schema = ok;
  bad_schema.structured_output = json_schema(R"({"type":"integer","multipleOf":2})");
  SamplingParams bad_regex = ok;
  bad_regex.structured_output = StructuredOutput{StructuredOutput::Kind::kRegex, "(a)\\1", true};
  SamplingParams bad_grammar = ok;
  bad_grammar.structured_output = StructuredOutput{StructuredOutput::Kind::kGrammar, "root ::= undefined_rule", true};
  SamplingParams empty = ok;
  empty.structured_output = StructuredOutput{StructuredOutput::Kind::kRegex, "", true};
  auto outs = llm().generate({Prompt::from_text("x"), Prompt::from_text("x"), Prompt::from_text("x"), Prompt::from_text("x"),
                              Prompt::from_text("x")},
                             {ok, bad_schema, bad_regex, bad_grammar, empty});
  ASSERT_EQ(outs.size(), 5u);
  EXPECT_EQ(outs[0].error, "");
  ASSERT_EQ(outs[0].outputs.size(), 1u);
  EXPECT_TRUE(outs[0].outputs[0].text == "true" || outs[0].outputs[0].text == "false") << outs[0].outputs[0].text;
  EXPECT_NE(outs[1].error.find("keyword 'multipleOf' is not supported"), std::string::npos) << outs[1].error;
  EXPECT_NE(outs[2].error.find("back-reference"), std::string::npos) << outs[2].error;
  EXPECT_NE(outs[3].error.find("rule 'undefined_rule' is not defined"), std::string::npos) << outs[3].error;
  EXPECT_NE(outs[4].error.find("structured_output.source is empty"), std::string::npos) << outs[4].error;
}

TEST(EngineStructured, OneCompilePerSource) {
  LLM l(testing_util::random_model_config(0));
  SamplingParams a;
  a.max_tokens = 4;
  a.structured_output = json_schema(R"({"type":"array","items":{"type":"integer"}})");
  SamplingParams b = a;
  b.structured_output = json_schema(R"({"type":"string"})");
  std::vector<Prompt> prompts(300, Prompt::from_ids({5, 6, 7}));
  std::vector<SamplingParams> params(300, a);
  params[150] = b;
  auto outs = l.generate(prompts, params);
  for (const auto& o : outs) EXPECT_EQ(o.error, "");
  EXPECT_EQ(l.last_stats().grammar_compiles, 2);
  l.generate({Prompt::from_ids({5})}, a);  // a later run reuses the compiled grammar
  EXPECT_EQ(l.last_stats().grammar_compiles, 2);
}

TEST(EngineStructured, RunBatchResponseFormat) {
  const std::vector<std::string> lines = {
      R"({"custom_id":"s","body":{"prompt":"p","max_tokens":300,"temperature":1.0,"seed":7,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object","properties":{"a":{"type":"integer","minimum":1,"maximum":3}},"required":["a"]}}}}})",
      R"({"custom_id":"o","body":{"prompt":"p","max_tokens":8,"response_format":{"type":"json_object"}}})",
      R"({"custom_id":"t","body":{"prompt":"p","max_tokens":3,"response_format":{"type":"text"}}})",
      R"({"custom_id":"g","body":{"prompt":"p","max_tokens":50,"guided_regex":"[ab]{3}"}})",
      R"({"custom_id":"j","body":{"prompt":"p","max_tokens":50,"guided_json":{"enum":[1,2]}}})",
      R"({"custom_id":"v","body":{"prompt":"p","max_tokens":50,"structured_outputs":{"grammar":"root ::= \"x\"+ \"y\"","disable_any_whitespace":true}}})",
      R"({"custom_id":"bad1","body":{"prompt":"p","response_format":{"type":"xml"}}})",
      R"({"custom_id":"bad2","body":{"prompt":"p","response_format":{"type":"json_schema"}}})",
      R"({"custom_id":"bad3","body":{"prompt":"p","guided_regex":"a","guided_json":{}}})",
      R"({"custom_id":"bad4","body":{"prompt":"p","response_format":{"type":"json_schema","json_schema":{"schema":{"type":"nope"}}}}})"};
  std::vector<Request> reqs;
  for (size_t i = 0; i < lines.size(); ++i) reqs.push_back(api::parse_batch_line(lines[i], i + 1));
  EXPECT_NE(reqs[6].error.find("response_format.type: expected text, json_object or json_schema"), std::string::npos) << reqs[6].error;
  EXPECT_NE(reqs[7].error.find("response_format.json_schema"), std::string::npos) << reqs[7].error;
  EXPECT_NE(reqs[8].error.find("at most one of"), std::string::npos) << reqs[8].error;
  EXPECT_FALSE(reqs[2].params.structured_output.has_value());
  auto outs = llm().run(reqs);
  ASSERT_EQ(outs.size(), lines.size());
  ASSERT_EQ(outs[0].error, "");
  auto v = ojson::parse(outs[0].outputs[0].text);
  EXPECT_TRUE(v["a"].is_number_integer() && v["a"] >= 1 && v["a"] <= 3) << outs[0].outputs[0].text;
  EXPECT_EQ(outs[1].error, "");
  EXPECT_EQ(outs[1].outputs[0].text.substr(0, 1), "{");
  EXPECT_EQ(outs[3].outputs[0].text.size(), 3u);
  EXPECT_EQ(outs[3].outputs[0].text.find_first_not_of("ab"), std::string::npos) << outs[3].outputs[0].text;
  EXPECT_TRUE(outs[4].outputs[0].text == "1" || outs[4].outputs[0].text == "2") << outs[4].outputs[0].text;
  EXPECT_EQ(outs[5].outputs[0].text.back(), 'y');
  EXPECT_NE(outs[9].error.find("unknown type 'nope'"), std::string::npos) << outs[9].error;
  const std::string line = api::format_batch_output("s", outs[0]);
  EXPECT_NE(line.find("\"finish_reason\":\"stop\""), std::string::npos) << line;
}

TEST(EngineStructured, SamplerAppliesTheMaskBeforePenaltiesAndSampling) {
  std::vector<float> logits(70);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(i % 7);
  std::vector<uint32_t> mask = {0u, 1u << 3 | 1u << 10, 0u};  // tokens 35 and 42 only
  SamplingParams greedy;
  greedy.temperature = 0;
  greedy.logprobs = 2;
  sample::SampleRequest r;
  r.logits = logits;
  r.params = &greedy;
  r.allowed_bitmask = mask;
  sample::Sampler s;
  auto res = s.sample(r);
  EXPECT_TRUE(res.token == 35 || res.token == 42);
  EXPECT_EQ(res.token, 35);  // both have logit 0: ties go to the lower id
  ASSERT_TRUE(res.logprob);
  EXPECT_NEAR(res.logprob->logprob, std::log(0.5f), 1e-6);  // masked row: two equal survivors
  SamplingParams temp;
  temp.temperature = 1.0f;
  temp.repetition_penalty = 1.5f;
  r.params = &temp;
  std::vector<int32_t> prompt = {35};
  r.prompt_ids = prompt;
  for (uint64_t step = 0; step < 200; ++step) {
    r.step = step;
    int32_t t = s.sample(r).token;
    EXPECT_TRUE(t == 35 || t == 42) << t;
  }
  std::vector<double> dist(logits.size());
  s.distribution(r, dist);
  for (size_t i = 0; i < dist.size(); ++i) {
    if (i != 35 && i != 42) {
      EXPECT_EQ(dist[i], 0.0) << i;
    }
  }
}
