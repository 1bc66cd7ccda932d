// Engram: the compressed token map against the reference's (both tokenizers), the released
// bucket layout, and hashing across chunks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/error.h"
#include "core/npy.h"
#include "engine/load_model.h"
#include "loader/config.h"
#include "kernels/backend.h"
#include "loader/safetensors.h"
#include "model/engram.h"
#include "model/weights.h"
#include "tokenizer/engram_map.h"
#include "tokenizer/tokenizer.h"
#include "runner/batch_runner.h"

using namespace deepinfer;

namespace {
std::string data(const std::string& rel) { return std::string(DEEPINFER_TEST_DATA) + "/" + rel; }

void check_map(const std::string& name, int32_t expect_keys) {
  auto tok = tokenizer::Tokenizer::load(data("tokenizer/" + name + "/tokenizer.json"));
  auto m = tokenizer::build_engram_token_map(*tok);
  std::vector<int64_t> ref = core::read_npy_ints(data("tokenizer/" + name + "/engram_map.npy"));
  ASSERT_EQ(m.map.size(), ref.size());
  EXPECT_EQ(m.n_keys, expect_keys);
  // Keys in compressed-id order, from the reference's normalizers.
  std::ifstream keys(data("tokenizer/" + name + "/engram_keys.jsonl"));
  std::vector<std::string> ref_keys;
  for (std::string line; std::getline(keys, line);) ref_keys.push_back(line);
  int mismatches = 0;
  for (size_t i = 0; i < ref.size() && mismatches < 10; ++i) {
    if (m.map[i] != ref[i]) {
      ++mismatches;
      const int32_t one[1] = {static_cast<int32_t>(i)};
      ADD_FAILURE() << name << ": token " << i << " '" << tok->decode(one) << "' -> " << m.map[i] << ", reference "
                    << ref[i] << " (key " << (ref[i] < static_cast<int64_t>(ref_keys.size()) ? ref_keys[ref[i]] : "?")
                    << ", ours '" << tokenizer::engram_normalize(tok->decode(one)) << "')";
    }
  }
}
}  // namespace

TEST(Engram, FixtureTokenMapMatchesReference) { check_map("fixture", 756); }

TEST(Engram, DeepSeekTokenMapMatchesReference) { check_map("deepseek", 99092); }

TEST(Engram, ReleasedBucketLayout) {
  auto c = loader::parse_config(R"({"engram_layer_ids": [1, 14], "engram_num_embeddings": [384006168, 384016682]})", "released");
  std::vector<int32_t> map(static_cast<size_t>(c.vocab_size));
  for (size_t i = 0; i < map.size(); ++i) map[i] = static_cast<int32_t>(i % 99092);
  model::EngramHasher h(c, map, 99092);
  ASSERT_EQ(h.primes().size(), 2u);
  // Spec section 3.9: consecutive primes from 16,000,057, never reused.
  EXPECT_EQ(h.primes()[0][0], 16000057);
  EXPECT_EQ(h.primes()[0][7], 16000183);
  EXPECT_EQ(h.primes()[0][8], 16000189);
  EXPECT_EQ(h.primes()[0][23], 16000463);
  EXPECT_EQ(h.primes()[1][0], 16000477);
  EXPECT_EQ(h.primes()[1][23], 16000889);
  int64_t s0 = 0, s1 = 0;
  for (int64_t p : h.primes()[0]) s0 += p;
  for (int64_t p : h.primes()[1]) s1 += p;
  EXPECT_EQ(s0, 384006168);
  EXPECT_EQ(s1, 384016682);
  // Multipliers are odd and bounded so id * multiplier cannot overflow.
  for (const auto& row : h.multipliers())
    for (int64_t m : row) {
      EXPECT_EQ(m % 2, 1);
      EXPECT_LE(m, 2 * 46539438283891 + 1);
    }
  // A wrong row count or compressed vocabulary is a clear load error.
  auto bad = loader::parse_config(R"({"engram_layer_ids": [1, 14], "engram_num_embeddings": [384006168, 5]})", "bad");
  EXPECT_THROW(model::EngramHasher(bad, map, 99092), Error);
  EXPECT_THROW(model::EngramHasher(c, map, 99091), Error);
}

TEST(Engram, HashingIsIndependentOfChunking) {
  auto c = loader::parse_config(R"({"engram_layer_ids": [1, 14], "engram_num_embeddings": [384006168, 384016682]})", "released");
  std::vector<int32_t> map(static_cast<size_t>(c.vocab_size));
  for (size_t i = 0; i < map.size(); ++i) map[i] = static_cast<int32_t>(i % 99092);
  model::EngramHasher h(c, map, 99092);
  std::vector<int64_t> toks = {5, 99, 12, 7, 7, 100000, 3}, pos(toks.size());
  for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int64_t>(i);
  const int64_t w = h.n_layers() * h.n_cols();
  std::vector<int64_t> one(toks.size() * static_cast<size_t>(w)), split(one.size());
  std::vector<int32_t> hist1, hist2;
  h.hash(toks.data(), pos.data(), 7, hist1, one.data());
  h.hash(toks.data(), pos.data(), 3, hist2, split.data());
  h.hash(toks.data() + 3, pos.data() + 3, 4, hist2, split.data() + 3 * w);
  EXPECT_EQ(one, split);
  // Position 0's bigram pads its missing history; bucket ids land inside each layer's table.
  for (size_t i = 0; i < one.size(); ++i) {
    const size_t layer = (i / static_cast<size_t>(h.n_cols())) % 2;
    EXPECT_GE(one[i], 0);
    EXPECT_LT(one[i], layer == 0 ? 384006168 : 384016682);
  }
  // A DEAD entry (a position never written) blocks every longer look-back.
  std::vector<int32_t> hist3 = {static_cast<int32_t>(map[5]), model::EngramHasher::kDead};
  std::vector<int64_t> t2 = {12}, p2 = {2}, out(static_cast<size_t>(w)), ref(static_cast<size_t>(w));
  h.hash(t2.data(), p2.data(), 1, hist3, out.data());
  std::vector<int32_t> hist4;
  std::vector<int64_t> p0 = {0};
  h.hash(t2.data(), p0.data(), 1, hist4, ref.data());  // at position 0 every look-back is padded
  EXPECT_EQ(out, ref);
}

namespace {
namespace fs = std::filesystem;

// A small random-weight V4.1 checkpoint with Engram (32-wide rows) and the fixture tokenizer.
std::string make_engram_checkpoint(const std::string& name, bool fp8_table, bool composite) {
  const std::string dir = ::testing::TempDir() + "/" + name;
  fs::create_directories(dir);
  nlohmann::json text = {
      {"vocab_size", 1024}, {"hidden_size", 64}, {"num_hidden_layers", 4}, {"num_attention_heads", 2}, {"head_dim", 32},
      {"q_lora_rank", 32}, {"qk_rope_head_dim", 8}, {"o_groups", 2}, {"o_lora_rank", 16}, {"sliding_window", 8},
      {"index_n_heads", 2}, {"index_head_dim", 32}, {"index_topk", 4}, {"moe_intermediate_size", 32},
      {"n_routed_experts", 4}, {"num_experts_per_tok", 2}, {"num_nextn_predict_layers", 0},
      {"engram_layer_ids", {0, 2}}, {"engram_max_ngram_size", 3}, {"engram_n_heads", 2}, {"engram_head_dim", 32},
      {"engram_vocab_size", 61}, {"engram_compressed_vocab_size", 756}, {"engram_num_embeddings", {0, 0}}};
  // Rows from the prime layout: first compute it with a throwaway hasher call.
  // Table rows from the prime layout: consecutive primes above engram_vocab_size - 1 = 60,
  // (N-1) * heads of them per layer.
  std::vector<int64_t> rows;
  {
    int64_t cur = 60;
    for (int layer = 0; layer < 2; ++layer) {
      int64_t sum = 0;
      for (int n = 2; n <= 3; ++n) {
        for (int hh = 0; hh < 2; ++hh) {
          do ++cur; while (!model::is_prime_u64(static_cast<uint64_t>(cur)));
          sum += cur;
        }
      }
      rows.push_back(sum);
    }
  }
  text["engram_num_embeddings"] = rows;
  auto cfg = loader::parse_config(text.dump(), "test");
  model::Weights w = model::random_weights(cfg, 11);
  auto tensors = model::export_tensors(cfg, w);
  for (size_t k = 0; k < tensors.size(); ++k) {
    auto& t = tensors[k];
    if (t.name.find("engram.embed.weight") == std::string::npos) continue;
    // Quantise each 32-block to e4m3 with a power-of-two scale; the float variant stores
    // the dequantised values, so both checkpoints hold the same numbers.
    const int64_t n_rows = t.shape[0], dim = t.shape[1];
    std::vector<float> x(static_cast<size_t>(n_rows * dim));
    std::memcpy(x.data(), t.bytes.data(), t.bytes.size());
    std::vector<uint8_t> q(x.size()), sc(static_cast<size_t>(n_rows * dim / 32));
    for (int64_t b = 0; b < n_rows * dim / 32; ++b) {
      float amax = 1e-4f;
      for (int64_t i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[static_cast<size_t>(b * 32 + i)]));
      const float s = core::pow2_ceil(amax / 448.0f);
      sc[static_cast<size_t>(b)] = static_cast<uint8_t>(std::ilogb(s) + 127);
      for (int64_t i = 0; i < 32; ++i) {
        const size_t at = static_cast<size_t>(b * 32 + i);
        q[at] = core::f32_to_e4m3(x[at] / s);
        x[at] = core::e4m3_to_f32(q[at]) * s;
      }
    }
    if (fp8_table) {
      t.dtype = core::DType::F8_E4M3;
      t.bytes = q;
      tensors.push_back({std::string(t.name).replace(t.name.size() - 6, 6, "scale"), core::DType::F8_E8M0,
                         {n_rows, dim / 32}, sc});
    } else {
      std::memcpy(t.bytes.data(), x.data(), t.bytes.size());
    }
  }
  loader::write_safetensors(dir + "/model.safetensors", tensors);
  nlohmann::json cfg_json = composite ? nlohmann::json{{"text_config", text}, {"vision_config", nlohmann::json::object()}} : text;
  std::ofstream(dir + "/config.json") << cfg_json.dump(2);
  fs::copy_file(data("tokenizer/fixture/tokenizer.json"), dir + "/tokenizer.json", fs::copy_options::overwrite_existing);
  return dir;
}

std::vector<float> all_logits(const std::string& dir, const std::vector<int64_t>& toks) {
  auto be = kernels::make_cpu_backend(2);
  auto lm = engine::load_model(dir, *be);
  auto st = lm.model->new_state();
  std::vector<float> out(toks.size() * 1024);
  runner::BatchRunner(*lm.model).forward(toks.data(), static_cast<int64_t>(toks.size()), st, out.data());
  return out;
}
}  // namespace

TEST(Engram, Fp8TablesAndCompositeConfigGiveTheSameLogits) {
  std::vector<int64_t> toks;
  for (int i = 0; i < 30; ++i) toks.push_back((i * 37 + 5) % 1024);
  auto ref = all_logits(make_engram_checkpoint("engram_f32", false, false), toks);
  auto fp8 = all_logits(make_engram_checkpoint("engram_fp8", true, true), toks);
  for (float v : ref) ASSERT_TRUE(std::isfinite(v));
  EXPECT_EQ(std::memcmp(ref.data(), fp8.data(), ref.size() * sizeof(float)), 0);
}

TEST(Engram, FullFixtureWithCompositeConfig) {
  const std::string src = data("v41/full"), dir = ::testing::TempDir() + "/full_composite";
  fs::create_directories(dir);
  for (const char* f : {"model.safetensors", "tokenizer.json"})
    fs::copy_file(src + "/" + f, dir + "/" + f, fs::copy_options::overwrite_existing);
  std::ifstream in(src + "/config.json");
  nlohmann::json text = nlohmann::json::parse(in);
  std::ofstream(dir + "/config.json") << nlohmann::json{{"architectures", {"DeepseekV41ForCausalLM"}}, {"text_config", text},
                                                        {"vision_config", {{"hidden_size", 32}}}}.dump(2);
  std::vector<int64_t> toks = core::read_npy_ints(src + "/golden/tokens.npy");
  auto ours = all_logits(dir, toks);
  std::vector<float> ref = core::read_npy_f32(src + "/golden/logits_full.npy");
  double max_ref = 0, max_diff = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    max_ref = std::max(max_ref, static_cast<double>(std::fabs(ref[i])));
    max_diff = std::max(max_diff, static_cast<double>(std::fabs(ours[i] - ref[i])));
  }
  EXPECT_LE(max_diff / max_ref, 1e-4);
}
