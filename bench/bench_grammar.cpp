// Structured-output benchmark: compile time per schema and per-token mask time
// (Matcher::fill_next_token_bitmask) on the real DeepSeek vocabulary (129,280 tokens).
//
// For each schema of the corpus (tests/data/grammar, plus "any JSON object"): compile
// (schema -> grammar -> tables -> every mask-cache entry, one thread), then random walks
// (uniform allowed tokens for --budget tokens, then the shortest completion), timing every
// mask fill. Prints per-schema figures and the distribution over all steps, next to the
// floor: copying one vocabulary-sized bitmask (what any mask fill must at least write).
// --dump-walks / --dump-vocab write the token sequences and the vocabulary so that
// tools/bench_grammar_py.py replays the same steps with xgrammar and llguidance.
//
// --lazy skips the precomputation: compile time is then tables only, and each mask-cache
// entry is computed on first use inside the timed mask fill (llguidance's model).
//
//   ./build/cpu/bench/bench_grammar [--schemas F.jsonl ...] [--walks 2] [--budget 48]
//       [--limit N] [--lazy] [--dump-walks FILE] [--dump-vocab FILE] [--verbose]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
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
using Clock = std::chrono::steady_clock;

namespace {

double us_since(Clock::time_point t0) { return std::chrono::duration<double, std::micro>(Clock::now() - t0).count(); }

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

// One walk: returns the accepted token ids; appends each mask fill's time (us) to `times`.
std::vector<int32_t> walk(const std::shared_ptr<const CompiledGrammar>& g, std::mt19937_64& rng, int budget,
                          std::vector<double>& times) {
  const Vocabulary& v = g->vocabulary();
  Matcher m(g);
  std::vector<uint32_t> bits(static_cast<size_t>(v.bitmask_words()));
  std::vector<int32_t> allowed, tokens;
  for (int step = 0; step < budget + 4000 && !m.is_terminated(); ++step) {
    auto t0 = Clock::now();
    m.fill_next_token_bitmask(bits);
    times.push_back(us_since(t0));
    allowed.clear();
    for (size_t w = 0; w < bits.size(); ++w) {
      for (uint32_t x = bits[w]; x; x &= x - 1) allowed.push_back(static_cast<int32_t>(w * 32 + static_cast<size_t>(__builtin_ctz(x))));
    }
    if (allowed.empty()) break;
    int32_t pick = allowed[rng() % allowed.size()];
    if (step >= budget) {
      if (m.can_end()) {
        pick = v.stop_ids()[0];
      } else {
        int64_t best = INT64_MAX;
        for (int32_t c : allowed) {
          if (v.token(c).size() != 1) continue;
          m.accept_token(c);
          int64_t d = m.min_bytes_to_end();
          m.rollback(1);
          if (d < best) best = d, pick = c;
        }
      }
    }
    if (!m.accept_token(pick)) {
      std::fprintf(stderr, "internal error: an allowed token was rejected\n");
      std::exit(1);
    }
    tokens.push_back(pick);
  }
  return tokens;
}

std::string hex(const std::string& s) {
  static const char* d = "0123456789abcdef";
  std::string o;
  for (unsigned char c : s) {
    o += d[c >> 4];
    o += d[c & 15];
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  std::string data = DEEPINFER_TEST_DATA;
  std::string vocab_path = data + "/tokenizer/deepseek/tokenizer.json";
  std::vector<std::string> schema_files;
  std::string dump_walks, dump_vocab;
  int walks = 2, budget = 48, limit = 1 << 30;
  bool verbose = false, lazy = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_grammar: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--vocab") vocab_path = next();
    else if (a == "--schemas") schema_files.push_back(next());
    else if (a == "--walks") walks = std::stoi(next());
    else if (a == "--budget") budget = std::stoi(next());
    else if (a == "--limit") limit = std::stoi(next());
    else if (a == "--dump-walks") dump_walks = next();
    else if (a == "--dump-vocab") dump_vocab = next();
    else if (a == "--verbose") verbose = true;
    else if (a == "--lazy") lazy = true;
    else {
      std::fprintf(stderr, "bench_grammar: unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  if (schema_files.empty()) {
    schema_files = {data + "/grammar/schemas_hand.jsonl", data + "/grammar/schemas_generated.jsonl"};
  }
  auto tok = tokenizer::Tokenizer::load(vocab_path);
  auto vocab = Vocabulary::from_tokenizer(*tok);
  std::printf("vocabulary: %d tokens (%d bitmask words), longest token %d bytes\n", vocab->size(), vocab->bitmask_words(),
              vocab->max_token_bytes());
  if (!dump_vocab.empty()) {
    nlohmann::json j;
    j["tokens_hex"] = nlohmann::json::array();
    j["special"] = nlohmann::json::array();
    for (int32_t id = 0; id < vocab->size(); ++id) {
      j["tokens_hex"].push_back(hex(vocab->token(id)));
      j["special"].push_back(tok->is_special(id) || vocab->token(id).empty());
    }
    j["stop_ids"] = vocab->stop_ids();
    std::ofstream(dump_vocab) << j.dump();
  }
  // The floor: writing one bitmask.
  std::vector<uint32_t> a(static_cast<size_t>(vocab->bitmask_words()), 1), b(a.size());
  std::vector<double> copy_us;
  for (int i = 0; i < 2000; ++i) {
    auto t0 = Clock::now();
    std::memcpy(b.data(), a.data(), a.size() * 4);
    copy_us.push_back(us_since(t0));
    a[static_cast<size_t>(i) % a.size()] += b[0];
  }
  struct Entry {
    std::string name;
    nlohmann::ordered_json schema;
  };
  std::vector<Entry> entries;
  for (const auto& f : schema_files) {
    std::ifstream in(f);
    if (!in) {
      std::fprintf(stderr, "bench_grammar: cannot read %s\n", f.c_str());
      return 2;
    }
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      auto j = nlohmann::ordered_json::parse(line);
      entries.push_back({j["name"], j["schema"]});
    }
  }
  entries.push_back({"json_object", nullptr});
  if (static_cast<int>(entries.size()) > limit) entries.resize(static_cast<size_t>(limit));
  std::ofstream walks_out;
  if (!dump_walks.empty()) walks_out.open(dump_walks);
  std::vector<double> all_mask, compile_ms, first_fill;
  std::mt19937_64 rng(12345);
  if (verbose) std::printf("%-36s %9s %9s %7s %7s %6s %8s %8s\n", "schema", "compile", "precomp", "states", "classes", "steps", "mask p50", "mask p99");
  for (const auto& e : entries) {
    auto t0 = Clock::now();
    std::shared_ptr<const CompiledGrammar> g;
    try {
      Grammar gr = e.schema.is_null() ? builtin_json_grammar(true) : json_schema_to_grammar(e.schema);
      CompileOptions co;
      co.precompute = !lazy;
      g = CompiledGrammar::compile(gr, vocab, co);
    } catch (const Error& err) {
      std::printf("%s: %s\n", e.name.c_str(), err.what());
      continue;
    }
    const double ms = us_since(t0) / 1000;
    compile_ms.push_back(ms);
    std::vector<double> times;
    for (int w = 0; w < walks; ++w) {
      std::vector<int32_t> tokens = walk(g, rng, budget, times);
      if (walks_out) {
        nlohmann::ordered_json j = {{"name", e.name}, {"schema", e.schema}, {"tokens", tokens}};
        walks_out << j.dump() << "\n";
      }
    }
    all_mask.insert(all_mask.end(), times.begin(), times.end());
    if (verbose) {
      const auto s = g->stats();
      std::printf("%-36s %7.1fms %7.1fms %7d %7d %6zu %6.2fus %6.2fus\n", e.name.c_str(), ms, s.precompute_ms, s.n_states,
                  s.n_mask_classes, times.size(), percentile(times, 0.5), percentile(times, 0.99));
    }
  }
  double sum = 0;
  for (double x : all_mask) sum += x;
  std::printf("schemas: %zu, mask fills: %zu\n", compile_ms.size(), all_mask.size());
  std::printf("mask time per token: p50 %.2f us, p99 %.2f us, mean %.2f us, max %.1f us\n", percentile(all_mask, 0.5),
              percentile(all_mask, 0.99), sum / static_cast<double>(std::max<size_t>(1, all_mask.size())),
              percentile(all_mask, 1.0));
  double csum = 0;
  for (double x : compile_ms) csum += x;
  std::printf("compile time per schema (schema -> grammar -> tables%s, 1 thread): p50 %.1f ms, p99 %.1f ms, mean %.1f ms, max %.1f ms\n",
              lazy ? ", mask cache on first use" : " -> full mask cache",
              percentile(compile_ms, 0.5), percentile(compile_ms, 0.99), csum / static_cast<double>(std::max<size_t>(1, compile_ms.size())),
              percentile(compile_ms, 1.0));
  std::printf("floor: copying one %d-word bitmask takes p50 %.2f us\n", vocab->bitmask_words(), percentile(copy_us, 0.5));
  return 0;
}
