// Schema coverage driver for tools/schema_coverage.py: compiles JSON schemas and runs seeded
// generations through the grammar, writing one JSON line per schema.
//
// Input: file paths, one per line, on stdin (each file holds one JSON schema). For each:
// compile (schema -> grammar -> tables, masks computed lazily), then --walks generations on
// a stand-in model: fixed random logits (seeded per schema and walk) over the vocabulary,
// a temperature-1 draw among the allowed tokens for --budget tokens, then the shortest
// completion (the allowed token that leaves the fewest bytes to the end), then EOS.
// Output (stdout): {"file", "ok", "error", "compile_ms", "outputs": [text...],
// "finished": [bool...]}. A schema that throws while walking is reported with its error.
//
//   ./build/ci/bench/schema_walk [--vocab tokenizer.json] [--walks 3] [--budget 64]
//       [--strict-keywords] < files.txt
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "grammar/compiled_grammar.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "tokenizer/tokenizer.h"

using namespace deepinfer;
using namespace deepinfer::grammar;

namespace {

std::string walk(const std::shared_ptr<const CompiledGrammar>& g, uint64_t seed, int budget, bool* finished) {
  const Vocabulary& v = g->vocabulary();
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> logits(static_cast<size_t>(v.size()));
  for (auto& x : logits) x = nd(rng);
  std::uniform_real_distribution<double> uni(1e-12, 1.0);
  Matcher m(g);
  std::vector<uint32_t> bits(static_cast<size_t>(v.bitmask_words()));
  std::vector<int32_t> allowed;
  std::string out;
  const int32_t eos = v.stop_ids()[0];
  for (int step = 0; step < budget + 4096; ++step) {
    m.fill_next_token_bitmask(bits);
    allowed.clear();
    for (size_t w = 0; w < bits.size(); ++w) {
      for (uint32_t x = bits[w]; x; x &= x - 1) allowed.push_back(static_cast<int32_t>(w * 32 + static_cast<size_t>(__builtin_ctz(x))));
    }
    if (allowed.empty()) break;
    int32_t pick = -1;
    if (step < budget) {
      double best = -1e300;
      for (int32_t id : allowed) {
        double s = logits[static_cast<size_t>(id)] - std::log(-std::log(uni(rng)));
        if (s > best) best = s, pick = id;
      }
    } else if (m.can_end()) {
      pick = eos;
    } else {
      int64_t best = INT64_MAX;
      std::vector<int32_t> cands;
      for (int32_t id : allowed) {
        if (v.token(id).size() <= 2) cands.push_back(id);
      }
      for (int i = 0; i < 16; ++i) cands.push_back(allowed[rng() % allowed.size()]);
      for (int32_t c : cands) {
        if (!m.accept_token(c)) continue;
        int64_t d = m.min_bytes_to_end();
        m.rollback(1);
        if (d < best) best = d, pick = c;
      }
      if (pick < 0) break;
    }
    if (!m.accept_token(pick)) break;
    if (pick == eos) break;
    out += v.token(pick);
  }
  *finished = m.is_terminated();
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string vocab_path = std::string(DEEPINFER_TEST_DATA) + "/tokenizer/fixture/tokenizer.json";
  int walks = 3, budget = 64;
  bool strict_keywords = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "schema_walk: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--vocab") vocab_path = next();
    else if (a == "--walks") walks = std::stoi(next());
    else if (a == "--budget") budget = std::stoi(next());
    else if (a == "--strict-keywords") strict_keywords = true;
    else {
      std::fprintf(stderr, "schema_walk: unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  auto vocab = Vocabulary::from_tokenizer(*tokenizer::Tokenizer::load(vocab_path));
  CompileOptions co;
  co.precompute = false;
  JsonSchemaOptions jo;
  jo.any_whitespace = false;
  jo.strict_keywords = strict_keywords;
  std::string file;
  uint64_t index = 0;
  while (std::getline(std::cin, file)) {
    if (file.empty()) continue;
    nlohmann::json rec;
    rec["file"] = file;
    std::ifstream in(file);
    std::stringstream ss;
    ss << in.rdbuf();
    const auto t0 = std::chrono::steady_clock::now();
    try {
      auto g = CompiledGrammar::compile(json_schema_to_grammar(ss.str(), jo), vocab, co);
      rec["compile_ms"] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      rec["outputs"] = nlohmann::json::array();
      rec["finished"] = nlohmann::json::array();
      for (int w = 0; w < walks; ++w) {
        bool finished = false;
        rec["outputs"].push_back(walk(g, index * 1000 + static_cast<uint64_t>(w), budget * (w + 1) / walks, &finished));
        rec["finished"].push_back(finished);
      }
      rec["ok"] = true;
    } catch (const std::exception& e) {
      rec["ok"] = false;
      rec["error"] = e.what();
    }
    std::cout << rec.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n" << std::flush;
    ++index;
  }
  return 0;
}
