// Tokenizer throughput, single-threaded: encode and decode MB/s over the 1.3 MB mixed corpus
// (tests/data/tokenizer/deepseek) with the real DeepSeek tokenizer. The same measurement for
// Hugging Face `tokenizers` is tools/bench_tokenizer_hf.py; run both on one machine.
//
// usage: bench_tokenizer [--tokenizer FILE] [--corpus FILE.jsonl] [--reps N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"

using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  std::string dir = std::string(DEEPINFER_TEST_DATA) + "/tokenizer/deepseek";
  std::string tok_path = dir + "/tokenizer.json", corpus_path = dir + "/corpus.jsonl";
  int reps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--tokenizer") tok_path = argv[i + 1];
    else if (a == "--corpus") corpus_path = argv[i + 1];
    else if (a == "--reps") reps = std::stoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  std::vector<std::string> docs;
  std::ifstream in(corpus_path);
  size_t bytes = 0;
  for (std::string line; std::getline(in, line);) {
    docs.push_back(nlohmann::json::parse(line).get<std::string>());
    bytes += docs.back().size();
  }
  auto t0 = Clock::now();
  auto tok = deepinfer::tokenizer::Tokenizer::load(tok_path);
  const double load_s = std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf("corpus: %zu documents, %.2f MB; tokenizer loaded in %.2f s (vocab %d)\n", docs.size(), static_cast<double>(bytes) / 1e6,
              load_s, tok->vocab_size());
  std::vector<std::vector<int32_t>> ids(docs.size());
  double best_enc = 1e30, first_enc = 0, best_dec = 1e30;
  size_t n_ids = 0;
  for (int r = 0; r < reps; ++r) {
    auto ts = Clock::now();
    for (size_t d = 0; d < docs.size(); ++d) ids[d] = tok->encode(docs[d]);
    const double enc = std::chrono::duration<double>(Clock::now() - ts).count();
    if (r == 0) first_enc = enc;
    best_enc = std::min(best_enc, enc);
    ts = Clock::now();
    size_t out_bytes = 0;
    for (size_t d = 0; d < docs.size(); ++d) out_bytes += tok->decode(ids[d]).size();
    best_dec = std::min(best_dec, std::chrono::duration<double>(Clock::now() - ts).count());
    if (out_bytes != bytes) std::printf("warning: decoded %zu bytes, corpus has %zu\n", out_bytes, bytes);
  }
  for (const auto& v : ids) n_ids += v.size();
  std::printf("encode: %.2f MB/s (best of %d; first pass with a cold piece cache %.2f MB/s), %zu ids\n",
              static_cast<double>(bytes) / best_enc / 1e6, reps, static_cast<double>(bytes) / first_enc / 1e6, n_ids);
  std::printf("decode: %.2f MB/s (best of %d)\n", static_cast<double>(bytes) / best_dec / 1e6, reps);
  return 0;
}
