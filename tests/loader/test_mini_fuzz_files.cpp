// Deterministic mini-fuzz of the file readers (the CI counterpart of tests/fuzz/fuzz_config,
// fuzz_safetensors, fuzz_npy and fuzz_tokenizer): a few thousand fixed-seed mutations of
// fixture configs, small safetensors and .npy files and tokenizer.json texts. Every input
// must load or fail with deepinfer::Error (tests/fuzz/fuzz_files.h says what else is checked);
// the debug-asan preset runs the same inputs under ASan and UBSan.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "fuzz/fuzz_files.h"

namespace {

using nlohmann::json;
const std::string kData = DEEPINFER_TEST_DATA;

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << path;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Byte-level mutations: flips, inserted tokens (numbers at the edges of every range), cuts,
// splices from other seeds, duplicated pieces, and an overwritten 8-byte length field.
std::string mutate(std::string s, std::mt19937_64& rng, const std::vector<std::string>& pool) {
  static const char* kTokens[] = {"0", "-1", "1e9", "1e400", "18446744073709551615", "9223372036854775807",
                                  "4294967296", "-0.0", "1.5", "null", "[]", "{}", "\"", ",", ":", "[0,0]",
                                  "\"shape\":[0,1152921504606846976]", "\"id\":-7", "True", "(", ")", "\xC3", "\xFF"};
  const int n = 1 + static_cast<int>(rng() % 4);
  for (int k = 0; k < n; ++k) {
    const size_t pos = s.empty() ? 0 : rng() % (s.size() + 1);
    switch (rng() % 6) {
      case 0:
        if (pos < s.size()) s[pos] = static_cast<char>(rng() % 256);
        break;
      case 1:
        s.insert(pos, kTokens[rng() % (sizeof kTokens / sizeof *kTokens)]);
        break;
      case 2:
        if (pos < s.size()) s.erase(pos, 1 + rng() % std::min<size_t>(16, s.size() - pos));
        break;
      case 3: {
        const std::string& o = pool[rng() % pool.size()];
        if (!o.empty()) s.insert(pos, o.substr(rng() % o.size(), 1 + rng() % 32));
        break;
      }
      case 4:
        if (pos < s.size()) s.insert(pos, s.substr(pos, 1 + rng() % 8));
        break;
      default:
        if (s.size() >= 8) {
          const uint64_t v = rng() % 3 == 0 ? rng() : rng() % (2 * s.size() + 16);
          std::memcpy(s.data() + (rng() % 2 ? 0 : (rng() % (s.size() - 7))), &v, 8);
        }
    }
  }
  return s;
}

// Runs `iters` mutations of the seeds through `reader`; returns how many loaded.
template <typename Reader>
int run(const std::vector<std::string>& seeds, int iters, uint64_t seed, Reader reader) {
  std::mt19937_64 rng(seed);
  int accepted = 0;
  for (const std::string& s : seeds) accepted += reader(s) ? 1 : 0;
  for (int i = 0; i < iters; ++i) {
    const std::string in = mutate(seeds[static_cast<size_t>(i) % seeds.size()], rng, seeds);
    try {
      accepted += reader(in) ? 1 : 0;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "iteration " << i << ": a non-Error exception escaped: " << e.what();
      return accepted;
    }
  }
  return accepted;
}

std::vector<std::string> config_seeds() {
  std::vector<std::string> out;
  for (const char* d : {"swa", "ced-1src", "ced", "ced-reindex", "full", "full-q"}) out.push_back(slurp(kData + "/v41/" + d + "/config.json"));
  return out;
}

// Structured config mutations: a field of a fixture config set to a value at or past the
// edge of its range.
std::string mutate_field(const std::string& text, std::mt19937_64& rng) {
  json j = json::parse(text);
  json& t = j.contains("text_config") ? j["text_config"] : j;
  std::vector<std::string> keys;
  for (auto it = t.begin(); it != t.end(); ++it) keys.push_back(it.key());
  static const json kValues[] = {0, -1, 1, 2, 3, 1000000000, int64_t{1} << 40, -1e-6, 0.0, 0.5, 1e300, "x", nullptr,
                                 json::array(), json::array({1, 1}), json::array({0, 1000000}), UINT64_MAX,
                                 json::object({{"rope_type", "yarn"}, {"factor", 0}})};
  const int n = 1 + static_cast<int>(rng() % 3);
  for (int k = 0; k < n; ++k) t[keys[rng() % keys.size()]] = kValues[rng() % (sizeof kValues / sizeof *kValues)];
  return j.dump();
}

std::string st_seed(const std::vector<std::tuple<std::string, std::string, std::vector<int64_t>, size_t>>& ts) {
  json h = json::object();
  h["__metadata__"] = {{"format", "pt"}};
  size_t off = 0;
  for (const auto& [name, dtype, shape, n] : ts) {
    h[name] = {{"dtype", dtype}, {"shape", shape}, {"data_offsets", {off, off + n}}};
    off += n;
  }
  const std::string header = h.dump();
  std::string s(8, '\0');
  const uint64_t len = header.size();
  std::memcpy(s.data(), &len, 8);
  s += header;
  for (size_t i = 0; i < off; ++i) s += static_cast<char>(i * 13 + 5);
  return s;
}

}  // namespace

TEST(MiniFuzzFiles, Config) {
  const std::vector<std::string> seeds = config_seeds();
  const int accepted = run(seeds, 3000, 1, deepinfer::fuzz::config_bytes);
  EXPECT_GE(accepted, static_cast<int>(seeds.size()));  // the fixtures themselves load
  std::mt19937_64 rng(2);
  int field_accepted = 0;
  for (int i = 0; i < 3000; ++i) field_accepted += deepinfer::fuzz::config_bytes(mutate_field(seeds[static_cast<size_t>(i) % seeds.size()], rng));
  EXPECT_GT(field_accepted, 0);
}

TEST(MiniFuzzFiles, Safetensors) {
  const std::vector<std::string> seeds = {
      st_seed({{"a", "F32", {2, 3}, 24}, {"b", "BF16", {4}, 8}, {"c", "U8", {0, 5}, 0}}),
      st_seed({{"model.layers.0.attn.wq_a.weight", "F8_E4M3", {4, 8}, 32}, {"model.layers.0.attn.wq_a.scale", "F8_E8M0", {1, 1}, 1}}),
      st_seed({{"x", "I64", {}, 8}}),
  };
  const int accepted = run(seeds, 4000, 3, deepinfer::fuzz::safetensors_bytes);
  EXPECT_GE(accepted, static_cast<int>(seeds.size()));
}

TEST(MiniFuzzFiles, Npy) {
  const std::vector<std::string> seeds = {slurp(kData + "/v41/ced/golden/greedy_prompt.npy"),
                                          slurp(kData + "/tokenizer/fixture/doc_index.npy")};
  const int accepted = run(seeds, 4000, 4, deepinfer::fuzz::npy_bytes);
  EXPECT_GE(accepted, static_cast<int>(seeds.size()));
}

TEST(MiniFuzzFiles, Tokenizer) {
  const std::string small = R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "\u0120": 3, "<s>": 4, "c": 5},)"
                            R"( "merges": ["a b"], "unk_token": "c"}, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false},)"
                            R"( "decoder": {"type": "ByteLevel"}, "added_tokens": [{"id": 4, "content": "<s>", "special": true},)"
                            R"( {"id": 6, "content": "<|x|>", "lstrip": true, "rstrip": true}],)"
                            R"( "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>"}},)"
                            R"( {"Sequence": {"id": "A"}}], "special_tokens": {"<s>": {"id": "<s>", "ids": [4]}}}})";
  const int accepted = run({small}, 2000, 5, deepinfer::fuzz::tokenizer_bytes);
  EXPECT_GE(accepted, 1);
  // The fixture tokenizer (55 KB) a few hundred times.
  EXPECT_GE(run({slurp(kData + "/tokenizer/fixture/tokenizer.json")}, 200, 6, deepinfer::fuzz::tokenizer_bytes), 1);
}
