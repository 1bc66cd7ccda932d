// Tests of config.json parsing (src/loader/config.h): the fixture configs, the default layer
// schedule for any layer count (spec section 1.2), flat vs composite configs, the flat
// rope_scaling -> rope_compress fold (section 1.3), and a table of invalid configs, each of
// which must give an Error whose message names the offending field.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "loader/config.h"

namespace {

using deepinfer::Error;
using deepinfer::loader::load_config;
using deepinfer::loader::ModelConfig;
using deepinfer::loader::parse_config;
using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using V = std::vector<int64_t>;

const std::string kData = DEEPINFER_TEST_DATA;

json read_json(const std::string& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << path;
  return json::parse(f);
}

// Parses `j` expecting an Error; returns its message ("" and a test failure otherwise).
std::string error_of(const json& j, const std::string& source = "test-config.json") {
  try {
    parse_config(j.dump(), source);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "parse_config accepted " << j.dump();
  return "";
}

// Parses `j` into *out; on an Error records a failure with its message and returns false.
bool parses(const json& j, ModelConfig* out) {
  try {
    *out = parse_config(j.dump());
    return true;
  } catch (const Error& e) {
    ADD_FAILURE() << "parse_config rejected " << j.dump() << ": " << e.what();
    return false;
  }
}

// A 7-layer config that parses: ratios [0,0,2,2,2,1,1], no draft layers, default geometry.
json seven_layers() {
  return json{{"num_hidden_layers", 7},
              {"num_nextn_predict_layers", 0},
              {"compress_ratios", {0, 0, 2, 2, 2, 1, 1}},
              {"kv_source_layer_ids", {2, 5}},
              {"index_source_layer_ids", {2, 5}},
              {"candidate_source_layer_id", 5}};
}

// ---------------------------------------------------------------------------------------
// Fixture configs

class FixtureConfig : public ::testing::TestWithParam<const char*> {};

TEST_P(FixtureConfig, DerivesWhatConfigJsonSays) {
  const std::string path = kData + "/v41/" + GetParam() + "/config.json";
  const json j = read_json(path);
  const ModelConfig c = load_config(path);
  const int64_t L = j["num_hidden_layers"].get<int64_t>();
  const int64_t nn = j["num_nextn_predict_layers"].get<int64_t>();
  EXPECT_EQ(c.num_hidden_layers, L);
  EXPECT_FALSE(c.composite);
  ASSERT_EQ(c.compress_ratios.size(), static_cast<size_t>(L + nn));
  const V ratios = j["compress_ratios"].get<V>();
  EXPECT_EQ(V(c.compress_ratios.begin(), c.compress_ratios.begin() + static_cast<std::ptrdiff_t>(ratios.size())), ratios);
  for (size_t i = ratios.size(); i < c.compress_ratios.size(); ++i) EXPECT_EQ(c.compress_ratios[i], 0) << i;
  EXPECT_EQ(c.kv_source_layer_ids, j["kv_source_layer_ids"].get<V>());
  EXPECT_EQ(c.index_source_layer_ids, j["index_source_layer_ids"].get<V>());
  EXPECT_EQ(c.candidate_source_layer_id, j["candidate_source_layer_id"].get<int64_t>());
  EXPECT_EQ(c.dspark_target_layer_ids, j["dspark_target_layer_ids"].get<V>());
  EXPECT_EQ(c.vocab_size, j["vocab_size"].get<int64_t>());
  EXPECT_EQ(c.sliding_window, j["sliding_window"].get<int64_t>());
  // layer_types: KV sources own the compressed cache.
  const auto types = j["layer_types"].get<std::vector<std::string>>();
  for (int64_t i = 0; i < L; ++i)
    EXPECT_EQ(c.is_kv_source(i), types[static_cast<size_t>(i)] == "shared_compressed_attention") << "layer " << i;
  // rope: nested main/compress dicts are used verbatim.
  const json& m = j["rope_parameters"]["main"];
  const json& k = j["rope_parameters"]["compress"];
  EXPECT_EQ(c.rope_main.rope_type, m["rope_type"].get<std::string>());
  EXPECT_DOUBLE_EQ(c.rope_main.rope_theta, m["rope_theta"].get<double>());
  EXPECT_DOUBLE_EQ(c.rope_main.partial_rotary_factor, m["partial_rotary_factor"].get<double>());
  EXPECT_EQ(c.rope_compress.rope_type, k["rope_type"].get<std::string>());
  EXPECT_DOUBLE_EQ(c.rope_compress.rope_theta, k["rope_theta"].get<double>());
  EXPECT_DOUBLE_EQ(c.rope_compress.factor, k["factor"].get<double>());
  EXPECT_TRUE(c.rope_compress.has_factor);
  EXPECT_DOUBLE_EQ(c.rope_compress.original_max_position_embeddings,
                   k["original_max_position_embeddings"].get<double>());
  EXPECT_DOUBLE_EQ(c.rope_compress.attention_factor, 1.0);
  EXPECT_EQ(c.rope_dim(c.rope_main), c.qk_rope_head_dim);
  EXPECT_EQ(c.rope_dim(c.rope_compress), c.qk_rope_head_dim);
}

INSTANTIATE_TEST_SUITE_P(V41, FixtureConfig, ::testing::Values("swa", "ced-1src", "ced", "ced-reindex"),
                         [](const ::testing::TestParamInfo<const char*>& p) {
                           std::string s = p.param;
                           for (char& ch : s)
                             if (ch == '-') ch = '_';
                           return s;
                         });

TEST(Config, FixtureValuesAndGrouping) {
  const ModelConfig swa = load_config(kData + "/v41/swa/config.json");
  EXPECT_THAT(swa.compress_ratios, ElementsAre(0, 0, 0));
  EXPECT_TRUE(swa.kv_source_layer_ids.empty());
  EXPECT_EQ(swa.candidate_source_layer_id, -1);

  const ModelConfig ced = load_config(kData + "/v41/ced/config.json");
  EXPECT_THAT(ced.compress_ratios, ElementsAre(0, 0, 2, 2, 2, 1, 1, 1));
  EXPECT_THAT(ced.kv_source_layer_ids, ElementsAre(2, 5));
  EXPECT_EQ(ced.candidate_source_layer_id, 5);
  EXPECT_EQ(ced.rope_compress.rope_type, "yarn");
  EXPECT_EQ(ced.rope_main.rope_type, "default");

  const ModelConfig re = load_config(kData + "/v41/ced-reindex/config.json");
  EXPECT_THAT(re.index_source_layer_ids, ElementsAre(1, 3, 5, 7));
  EXPECT_EQ(re.kv_source_of(0), -1);
  EXPECT_EQ(re.index_source_of(0), -1);
  EXPECT_EQ(re.kv_source_of(4), 1);
  EXPECT_EQ(re.index_source_of(4), 3);
  EXPECT_EQ(re.kv_source_of(8), 5);
  EXPECT_EQ(re.index_source_of(8), 7);
}

// ---------------------------------------------------------------------------------------
// Default schedule derivation

TEST(Config, Default40LayerSchedule) {
  const ModelConfig c = parse_config(json{{"num_hidden_layers", 40}, {"num_nextn_predict_layers", 0}}.dump());
  V expect = {0, 0};
  expect.insert(expect.end(), 18, 2);
  expect.insert(expect.end(), 20, 1);
  EXPECT_EQ(c.compress_ratios, expect);
  EXPECT_THAT(c.kv_source_layer_ids, ElementsAre(2, 8, 14, 20));
  EXPECT_THAT(c.index_source_layer_ids, ElementsAre(2, 8, 14, 20, 24, 28, 32, 36));
  EXPECT_EQ(c.candidate_source_layer_id, 20);
  EXPECT_THAT(c.dspark_target_layer_ids, ElementsAre(37, 38, 39));
  EXPECT_EQ(c.kv_source_of(13), 8);
  EXPECT_EQ(c.index_source_of(27), 24);
  EXPECT_EQ(c.kv_source_of(39), 20);

  // Default num_nextn_predict_layers is 3: the draft entries are appended as zeros.
  const ModelConfig d = parse_config(json{{"num_hidden_layers", 40}}.dump());
  EXPECT_EQ(d.num_nextn_predict_layers, 3);
  expect.insert(expect.end(), 3, 0);
  EXPECT_EQ(d.compress_ratios, expect);
  EXPECT_THAT(d.kv_source_layer_ids, ElementsAre(2, 8, 14, 20));
  EXPECT_THAT(d.dspark_target_layer_ids, ElementsAre(37, 38, 39));
}

// The draft stages' keys: defaults are the release's; DeepSeek's own config names the stages'
// top-k dspark_n_activated_experts.
TEST(Config, DsparkKeys) {
  const ModelConfig d = parse_config(json{{"num_hidden_layers", 40}}.dump());
  EXPECT_EQ(d.dspark_markov_rank, 256);
  EXPECT_EQ(d.dspark_n_routed_experts, 128);
  EXPECT_EQ(d.dspark_num_experts_per_tok, 3);
  EXPECT_EQ(d.dspark_block_size, 5);
  json j = seven_layers();
  j.merge_patch({{"num_nextn_predict_layers", 2}, {"dspark_markov_rank", 16}, {"dspark_n_routed_experts", 8},
                 {"dspark_n_activated_experts", 2}});
  const ModelConfig c = parse_config(j.dump());
  EXPECT_EQ(c.dspark_markov_rank, 16);
  EXPECT_EQ(c.dspark_n_routed_experts, 8);
  EXPECT_EQ(c.dspark_num_experts_per_tok, 2);
  j["dspark_num_experts_per_tok"] = 2;  // both spellings, agreeing
  EXPECT_EQ(parse_config(j.dump()).dspark_num_experts_per_tok, 2);
}

TEST(Config, ExplicitShortRatiosArePaddedForDraftLayers) {
  json j = seven_layers();
  j["num_nextn_predict_layers"] = 2;
  const ModelConfig c = parse_config(j.dump());
  EXPECT_THAT(c.compress_ratios, ElementsAre(0, 0, 2, 2, 2, 1, 1, 0, 0));
}

TEST(Config, Default7LayerSchedule) {
  const ModelConfig c = parse_config(json{{"num_hidden_layers", 7}, {"num_nextn_predict_layers", 0}}.dump());
  // n_slide = 2, n_enc = (7 - 2 + 1) // 2 = 3, the rest ratio 1.
  EXPECT_THAT(c.compress_ratios, ElementsAre(0, 0, 2, 2, 2, 1, 1));
  EXPECT_THAT(c.kv_source_layer_ids, ElementsAre(2, 5));   // first layer of each run
  EXPECT_EQ(c.index_source_layer_ids, c.kv_source_layer_ids);
  EXPECT_EQ(c.candidate_source_layer_id, 5);                // last KV source
  EXPECT_THAT(c.dspark_target_layer_ids, ElementsAre(3, 4, 6));  // last 3 non-KV-source layers
}

TEST(Config, DefaultScheduleForOtherLayerCounts) {
  const ModelConfig six = parse_config(json{{"num_hidden_layers", 6}, {"num_nextn_predict_layers", 0}}.dump());
  // n_enc = (6 - 2 + 1) // 2 = 2
  EXPECT_THAT(six.compress_ratios, ElementsAre(0, 0, 2, 2, 1, 1));
  EXPECT_THAT(six.kv_source_layer_ids, ElementsAre(2, 4));
  EXPECT_THAT(six.index_source_layer_ids, ElementsAre(2, 4));
  EXPECT_EQ(six.candidate_source_layer_id, 4);
}

// Spec 1.2.2: the default KV sources [2, 8, 14, 20] apply only when the backbone ratios
// *equal* the 40-layer default; a shorter backbone that is merely a prefix of it (L <= 3
// by default, or explicit ratios such as [0,0,2,2,2,2,2,2,2,2]) derives its sources from
// the runs of equal ratio like any other schedule.
// The reference compares only the first L ratios with the 40-layer default
// (`compress_ratios[:n] == default_compress_ratios[:n]`), so a short backbone that is a prefix
// of the default gets the default KV sources [2, 8, 14, 20] and then fails their range check.
// DeepInfer enforces the same constraints, so these configs are errors naming the field.
TEST(Config, BackboneThatIsAPrefixOfTheDefaultGetsDefaultSourcesLikeTheReference) {
  for (int64_t L : {1, 2, 3}) {
    const std::string msg = error_of(json{{"num_hidden_layers", L}, {"num_nextn_predict_layers", 0}});
    EXPECT_THAT(msg, HasSubstr("kv_source_layer_ids")) << "L=" << L;
    EXPECT_THAT(msg, HasSubstr("out of range")) << "L=" << L;
  }
  const json explicit_ratios = {{"num_hidden_layers", 10},
                                {"num_nextn_predict_layers", 0},
                                {"compress_ratios", {0, 0, 2, 2, 2, 2, 2, 2, 2, 2}}};
  EXPECT_THAT(error_of(explicit_ratios), HasSubstr("kv_source_layer_ids"));
  // Not a prefix of the default: the first layer of each run becomes a source.
  ModelConfig c;
  ASSERT_TRUE(parses(json{{"num_hidden_layers", 4}, {"num_nextn_predict_layers", 0}, {"compress_ratios", {0, 2, 2, 1}}}, &c));
  EXPECT_THAT(c.kv_source_layer_ids, ElementsAre(1, 3));
}

// ---------------------------------------------------------------------------------------
// Composite config and rope

TEST(Config, CompositeParsesLikeFlat) {
  json text = seven_layers();
  text["hidden_size"] = 1024;
  text["vocab_size"] = 4096;
  const json composite = {{"text_config", text},
                          {"vision_config", {{"hidden_size", 32}, {"patch_size", 14}}},
                          {"image_token_id", 129264},
                          {"quantization_config",
                           {{"quant_method", "fp8"},
                            {"scale_fmt", "ue8m0"},
                            {"expert_dtype", "fp4"},
                            {"weight_block_size", {128, 128}}}}};
  const ModelConfig flat = parse_config(text.dump());
  const ModelConfig comp = parse_config(composite.dump());
  EXPECT_FALSE(flat.composite);
  EXPECT_FALSE(flat.quantization.present);
  EXPECT_TRUE(comp.composite);
  EXPECT_EQ(comp.hidden_size, 1024);
  EXPECT_EQ(comp.vocab_size, flat.vocab_size);
  EXPECT_EQ(comp.num_hidden_layers, flat.num_hidden_layers);
  EXPECT_EQ(comp.compress_ratios, flat.compress_ratios);
  EXPECT_EQ(comp.kv_source_layer_ids, flat.kv_source_layer_ids);
  EXPECT_EQ(comp.index_source_layer_ids, flat.index_source_layer_ids);
  EXPECT_EQ(comp.candidate_source_layer_id, flat.candidate_source_layer_id);
  EXPECT_EQ(comp.dspark_target_layer_ids, flat.dspark_target_layer_ids);
  EXPECT_EQ(comp.rope_compress.rope_type, flat.rope_compress.rope_type);
  EXPECT_TRUE(comp.quantization.present);
  EXPECT_EQ(comp.quantization.quant_method, "fp8");
  EXPECT_EQ(comp.quantization.scale_fmt, "ue8m0");
  EXPECT_EQ(comp.quantization.expert_dtype, "fp4");
  EXPECT_THAT(comp.quantization.weight_block_size, ElementsAre(128, 128));
  // Errors inside text_config still name the field.
  json bad = composite;
  bad["text_config"]["num_experts_per_tok"] = 1000;
  EXPECT_THAT(error_of(bad), HasSubstr("num_experts_per_tok"));
}

TEST(Config, FlatRopeScalingFoldsIntoCompressRope) {
  json j = seven_layers();
  j["rope_theta"] = 12345.0;
  j["compress_rope_theta"] = 98765.0;
  j["rope_scaling"] = {{"type", "yarn"},
                       {"factor", 16.0},
                       {"original_max_position_embeddings", 65536},
                       {"beta_fast", 24},
                       {"beta_slow", 2}};
  const ModelConfig c = parse_config(j.dump());
  EXPECT_EQ(c.rope_main.rope_type, "default");
  EXPECT_DOUBLE_EQ(c.rope_main.rope_theta, 12345.0);
  EXPECT_DOUBLE_EQ(c.rope_main.factor, 1.0);
  EXPECT_FALSE(c.rope_main.has_factor);
  EXPECT_DOUBLE_EQ(c.rope_main.partial_rotary_factor, 64.0 / 512.0);
  EXPECT_EQ(c.rope_compress.rope_type, "yarn");
  EXPECT_DOUBLE_EQ(c.rope_compress.rope_theta, 98765.0);
  EXPECT_DOUBLE_EQ(c.rope_compress.factor, 16.0);
  EXPECT_TRUE(c.rope_compress.has_factor);
  EXPECT_DOUBLE_EQ(c.rope_compress.original_max_position_embeddings, 65536.0);
  EXPECT_DOUBLE_EQ(c.rope_compress.beta_fast, 24.0);
  EXPECT_DOUBLE_EQ(c.rope_compress.beta_slow, 2.0);
  EXPECT_DOUBLE_EQ(c.rope_compress.attention_factor, 1.0);
  EXPECT_DOUBLE_EQ(c.rope_compress.partial_rotary_factor, 64.0 / 512.0);
  EXPECT_EQ(c.rope_dim(c.rope_compress), 64);

  // Without rope_scaling both ropes are default, with their own thetas.
  const ModelConfig p = parse_config(seven_layers().dump());
  EXPECT_EQ(p.rope_compress.rope_type, "default");
  EXPECT_DOUBLE_EQ(p.rope_compress.rope_theta, 160000.0);
  EXPECT_DOUBLE_EQ(p.rope_main.rope_theta, 10000.0);
}

// ---------------------------------------------------------------------------------------
// Validation errors: each names the field (and the source file).

TEST(Config, InvalidJson) {
  try {
    parse_config("{\"hidden_size\": 12,", "broken.json");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("broken.json"));
    EXPECT_THAT(e.what(), HasSubstr("invalid JSON"));
  }
  EXPECT_THROW(parse_config("[1, 2]"), Error);
}

TEST(Config, LoadConfigMissingFile) {
  try {
    load_config(kData + "/no-such-dir/config.json");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("no-such-dir/config.json"));
  }
}

// Each case patches the valid 7-layer config (JSON merge patch) and lists substrings the
// Error's message must contain; the first always names the field.
struct ErrorCase {
  const char* name;
  json patch;
  std::vector<std::string> expect;
};

const ErrorCase kErrorCases[] = {
    {"RatiosTooShort", {{"compress_ratios", {0, 0, 2, 2, 2, 1}}},
     {"'compress_ratios'", "at least num_hidden_layers (7)"}},
    {"RatiosTooLong", {{"num_nextn_predict_layers", 1}, {"compress_ratios", {0, 0, 2, 2, 2, 1, 1, 0, 0}}},
     {"'compress_ratios'", "has 9 entries but num_hidden_layers + num_nextn_predict_layers = 8"}},
    {"NegativeRatio", {{"compress_ratios", {0, 0, 2, 2, 2, 1, -1}}}, {"'compress_ratios'", "entry 6 is negative"}},
    {"KvSourceOutOfRange", {{"kv_source_layer_ids", {2, 7}}}, {"'kv_source_layer_ids'", "out of range [0, 7)"}},
    {"KvSourceNegative", {{"kv_source_layer_ids", {-1, 2, 5}}}, {"'kv_source_layer_ids'", "out of range"}},
    {"KvSourceRatioZero", {{"kv_source_layer_ids", {1, 2, 5}}}, {"'kv_source_layer_ids'", "layer 1 has 0"}},
    {"IndexSourceRatioZero", {{"index_source_layer_ids", {0, 2, 5}}}, {"'index_source_layer_ids'", "layer 0 has 0"}},
    {"IndexSourceOutOfRange", {{"index_source_layer_ids", {2, 5, 9}}}, {"'index_source_layer_ids'", "out of range"}},
    {"IndexSourceBeforeKvSource", {{"kv_source_layer_ids", {3, 5}}, {"index_source_layer_ids", {2, 5}}},
     {"'index_source_layer_ids'", "layer 2 needs a kv_source_layer_ids entry at or before it"}},
    {"CandidateNotIndexSource", {{"candidate_source_layer_id", 3}},
     {"'candidate_source_layer_id'", "3 must be in index_source_layer_ids [2, 5]"}},
    {"CompressedLayerWithoutKvSource", {{"kv_source_layer_ids", {3, 5}}, {"index_source_layer_ids", {3, 5}}},
     {"'compress_ratios'", "layer 2 has ratio > 0 but no kv_source_layer_ids entry at or before it"}},
    {"EngramLengthMismatch", {{"engram_layer_ids", {1, 4}}, {"engram_num_embeddings", {1000}}},
     {"'engram_num_embeddings'", "length 1 must match engram_layer_ids (length 2)"}},
    {"EngramLayerOutOfRange", {{"engram_layer_ids", {8}}}, {"'engram_layer_ids'", "out of range"}},
    {"HiddenSizeString", {{"hidden_size", "big"}}, {"'hidden_size'", "expected an integer, got \"big\""}},
    {"HiddenSizeFraction", {{"hidden_size", 64.5}}, {"'hidden_size'", "expected an integer"}},
    {"HiddenSizeHuge", {{"hidden_size", 1e30}}, {"'hidden_size'", "expected an integer"}},
    {"HiddenSizeZero", {{"hidden_size", 0}}, {"'hidden_size'", "must be > 0"}},
    {"RatiosNotIntegers", {{"compress_ratios", {0, 0, "two", 2, 2, 1, 1}}}, {"'compress_ratios'", "list of integers"}},
    {"BoolAsNumber", {{"norm_topk_prob", 1}}, {"'norm_topk_prob'", "expected true or false"}},
    {"ThetaString", {{"rope_theta", "ten thousand"}}, {"'rope_theta'", "expected a number"}},
    {"TooManyExpertsPerToken", {{"n_routed_experts", 8}, {"num_experts_per_tok", 9}},
     {"'num_experts_per_tok'", "must be <= n_routed_experts (8), got 9"}},
    {"GroupRatioDiffersFromSource",
     {{"compress_ratios", {0, 0, 2, 2, 1, 1, 1}}, {"kv_source_layer_ids", {2}}, {"index_source_layer_ids", {2}},
      {"candidate_source_layer_id", 2}},
     {"'compress_ratios'", "layer 4 has ratio 1 but its KV source (layer 2) has ratio 2"}},
    {"YarnWithoutOriginal", {{"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}}}},
     {"'rope_scaling'", "original_max_position_embeddings"}},
    {"TextConfigNotObject", {{"text_config", 3}}, {"'text_config'", "expected an object"}},
    // Sizes and counts beyond what the model can run are refused before anything is sized by them.
    {"LayersHuge", {{"num_hidden_layers", 1e9}}, {"'num_hidden_layers'", "must be in [1, 512], got 1000000000"}},
    {"SinkhornItersHuge", {{"hc_sinkhorn_iters", 1e9}}, {"'hc_sinkhorn_iters'", "must be in [1, 1000], got 1000000000"}},
    {"HeadsHuge", {{"num_attention_heads", 1 << 20}}, {"'num_attention_heads'", "must be in [1, 4096]"}},
    {"HiddenTooLarge", {{"hidden_size", 1 << 20}}, {"'hidden_size'", "must be in [1, 262144], got 1048576"}},
    {"HeadDimHuge", {{"head_dim", int64_t{1} << 40}}, {"'head_dim'", "must be in [1, 65536]"}},
    {"ExpertsHuge", {{"n_routed_experts", 1000000}}, {"'n_routed_experts'", "must be in [1, 2048]"}},
    {"VocabHuge", {{"vocab_size", int64_t{1} << 33}}, {"'vocab_size'", "must be in [1, 2147483647]"}},
    {"HcMultHuge", {{"hc_mult", 100000}}, {"'hc_mult'", "must be in [1, 64]"}},
    {"DraftLayersHuge", {{"num_nextn_predict_layers", 1e8}}, {"'num_nextn_predict_layers'", "[0, 64]"}},
    {"OGroupsAboveHeads", {{"o_groups", 128}}, {"'o_groups'", "must be in [1, 64], got 128"}},
    {"PositionsHuge", {{"max_position_embeddings", 1e12}}, {"'max_position_embeddings'", "[1, 2147483647]"}},
    {"WindowBeyondPositions", {{"sliding_window", 4096}, {"max_position_embeddings", 1024}},
     {"'sliding_window'", "must be in [1, 1024], got 4096"}},
    {"IndexTopkHuge", {{"index_topk", int64_t{1} << 32}}, {"'index_topk'", "[1, 2147483647]"}},
    {"RatioHuge", {{"compress_ratios", {0, 0, 2, 2, 2, 1, 1 << 20}}}, {"'compress_ratios'", "entry 6 (1048576) must be <= 65536"}},
    {"UnsignedOverflow", {{"moe_intermediate_size", UINT64_MAX}}, {"'moe_intermediate_size'", "integer too large"}},
    {"UnsignedOverflowInList", {{"compress_ratios", {0, 0, 2, 2, 2, 1, UINT64_MAX}}}, {"'compress_ratios'", "integer too large"}},
    // Values that make the model meaningless (NaN logits) are the config's fault, named as such.
    {"NegativeRmsEps", {{"rms_norm_eps", -1e-6}}, {"'rms_norm_eps'", "must be finite and > 0, got -1e-06"}},
    {"ZeroRmsEps", {{"rms_norm_eps", 0}}, {"'rms_norm_eps'", "must be finite and > 0, got 0"}},
    {"NegativeHcEps", {{"hc_eps", -1}}, {"'hc_eps'", "> 0"}},
    {"ZeroRopeTheta", {{"rope_theta", 0}}, {"'rope_theta'", "> 0"}},
    {"NegativeCompressTheta", {{"compress_rope_theta", -5}}, {"'compress_rope_theta'", "> 0"}},
    {"NegativeScaling", {{"routed_scaling_factor", -1.5}}, {"'routed_scaling_factor'", "> 0"}},
    {"NegativeSwigluLimit", {{"swiglu_limit", -10}}, {"'swiglu_limit'", ">= 0"}},
    {"GateTempZero", {{"gate_temp", 0}}, {"'gate_temp'", "> 0"}},
    {"YarnFactorZero",
     {{"rope_scaling", {{"rope_type", "yarn"}, {"factor", 0}, {"original_max_position_embeddings", 256}}}},
     {"'rope_scaling.factor'", "must be finite and > 0, got 0"}},
    {"YarnFactorNegative",
     {{"rope_scaling", {{"rope_type", "yarn"}, {"factor", -4}, {"original_max_position_embeddings", 256}}}},
     {"'rope_scaling.factor'", "got -4"}},
    {"YarnBetaFastZero",
     {{"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4}, {"beta_fast", 0}, {"original_max_position_embeddings", 256}}}},
     {"'rope_scaling.beta_fast'", "> 0"}},
    {"YarnOriginalNegative",
     {{"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4}, {"original_max_position_embeddings", -256}}}},
     {"'rope_scaling.original_max_position_embeddings'", ">= 0"}},
    {"NestedPartialRotaryZero",
     {{"rope_parameters", {{"main", {{"rope_theta", 10000}, {"partial_rotary_factor", 0}}}, {"compress", {{"rope_theta", 10000}}}}}},
     {"'rope_parameters.main.partial_rotary_factor'", "must be in (0, 1], got 0"}},
    {"NestedFactorString",
     {{"rope_parameters", {{"main", {{"rope_theta", 10000}, {"partial_rotary_factor", 0.125}}},
                           {"compress", {{"rope_theta", 10000}, {"factor", "4"}}}}}},
     {"'rope_parameters.compress.factor'", "expected a number, got \"4\""}},
    {"NestedYarnWithoutOriginal",
     {{"rope_parameters", {{"main", {{"rope_theta", 10000}, {"partial_rotary_factor", 0.125}}},
                           {"compress", {{"rope_theta", 10000}, {"rope_type", "yarn"}, {"factor", 4}, {"partial_rotary_factor", 0.125}}}}}},
     {"'rope_parameters.compress'", "yarn needs original_max_position_embeddings > 0"}},
    {"RopeParametersNotObject", {{"rope_parameters", 5}}, {"'rope_parameters'", "expected an object"}},
    {"RopeParametersMainOnly", {{"rope_parameters", {{"main", {{"rope_theta", 10000}}}}}},
     {"'rope_parameters'", "needs both 'main' and 'compress'"}},
    {"DuplicateEngramLayers", {{"engram_layer_ids", {1, 1}}, {"engram_num_embeddings", {10, 10}}},
     {"'engram_layer_ids'", "layer 1 is listed twice: [1, 1]"}},
    {"DuplicateKvSources", {{"kv_source_layer_ids", {2, 2, 5}}}, {"'kv_source_layer_ids'", "layer 2 is listed twice"}},
    {"DuplicateIndexSources", {{"index_source_layer_ids", {2, 5, 5}}}, {"'index_source_layer_ids'", "layer 5 is listed twice"}},
    {"DsparkTargetOutOfRange", {{"dspark_target_layer_ids", {3, 9}}}, {"'dspark_target_layer_ids'", "entry 1 (9)"}},
    {"EngramNgramHuge", {{"engram_layer_ids", {1}}, {"engram_num_embeddings", {10}}, {"engram_max_ngram_size", 100000}},
     {"'engram_max_ngram_size'", "must be in [2, 16]"}},
    {"EngramHeadsHuge", {{"engram_layer_ids", {1}}, {"engram_num_embeddings", {10}}, {"engram_n_heads", 1e9}},
     {"'engram_n_heads'", "must be in [1, 64]"}},
    {"EngramRowsZero", {{"engram_layer_ids", {1}}, {"engram_num_embeddings", {0}}}, {"'engram_num_embeddings[0]'", "got 0"}},
    {"EngramPadOutOfVocab", {{"engram_layer_ids", {1}}, {"engram_num_embeddings", {10}}, {"engram_pad_id", -3}},
     {"'engram_pad_id'", "got -3"}},
    {"EosOutOfVocab", {{"vocab_size", 1000}, {"eos_token_id", 1000}}, {"'eos_token_id'", "token id 1000 is outside the vocabulary [0, 1000)"}},
    {"EosListOutOfVocab", {{"vocab_size", 1000}, {"eos_token_id", {1, -2}}}, {"'eos_token_id'", "token id -2"}},
    {"BosOutOfVocab", {{"vocab_size", 1000}, {"bos_token_id", 5000}}, {"'bos_token_id'", "token id 5000"}},
    {"DsparkNoiseOutOfVocab",
     {{"vocab_size", 1000}, {"num_nextn_predict_layers", 1}, {"compress_ratios", {0, 0, 2, 2, 2, 1, 1, 0}},
      {"dspark_noise_token_id", 128799}},
     {"'dspark_noise_token_id'", "must be in [0, 999], got 128799"}},
    {"DsparkStageCompressed", {{"num_nextn_predict_layers", 2}, {"compress_ratios", {0, 0, 2, 2, 2, 1, 1, 0, 2}}},
     {"'compress_ratios'", "entry 8 (draft stage 1) is 2, but the DSpark stages are window-only (0)"}},
    {"DsparkTopkAboveExperts",
     {{"num_nextn_predict_layers", 1}, {"dspark_n_routed_experts", 4}, {"dspark_num_experts_per_tok", 5}},
     {"'dspark_num_experts_per_tok'", "must be in [1, 4], got 5"}},
    {"DsparkActivatedDisagrees",
     {{"num_nextn_predict_layers", 1}, {"dspark_num_experts_per_tok", 3}, {"dspark_n_activated_experts", 4}},
     {"'dspark_n_activated_experts'", "4 disagrees with dspark_num_experts_per_tok 3"}},
    {"DsparkRankZero", {{"num_nextn_predict_layers", 1}, {"dspark_markov_rank", 0}}, {"'dspark_markov_rank'", "got 0"}},
    {"DsparkTargetsOutOfOrder", {{"dspark_target_layer_ids", {4, 3}}}, {"'dspark_target_layer_ids'", "[4, 3] must be in layer order"}},
    {"DsparkTargetsEmpty", {{"num_nextn_predict_layers", 1}, {"dspark_target_layer_ids", json::array()}},
     {"'dspark_target_layer_ids'", "is empty"}},
};

class ConfigError : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(ConfigError, MessageNamesTheField) {
  json j = seven_layers();
  j.merge_patch(GetParam().patch);
  const std::string m = error_of(j);
  EXPECT_THAT(m, HasSubstr("test-config.json: field "));
  for (const std::string& e : GetParam().expect) EXPECT_THAT(m, HasSubstr(e));
}

INSTANTIATE_TEST_SUITE_P(Config, ConfigError, ::testing::ValuesIn(kErrorCases),
                         [](const ::testing::TestParamInfo<ErrorCase>& p) { return std::string(p.param.name); });

// Boundary values next to the error cases parse.
TEST(Config, BoundaryValuesParse) {
  json j = seven_layers();
  j.merge_patch({{"num_nextn_predict_layers", 1}, {"compress_ratios", {0, 0, 2, 2, 2, 1, 1, 0}}});
  EXPECT_EQ(parse_config(j.dump()).compress_ratios.size(), 8u);  // exactly L + n_nextn
  j = seven_layers();
  j.merge_patch({{"n_routed_experts", 8}, {"num_experts_per_tok", 8}, {"hidden_size", 1024.0}});
  const ModelConfig c = parse_config(j.dump());
  EXPECT_EQ(c.num_experts_per_tok, 8);
  EXPECT_EQ(c.hidden_size, 1024);  // an integral float is an integer
  j = seven_layers();
  j["candidate_source_layer_id"] = -1;  // < 0 disables the two-level top-k
  EXPECT_EQ(parse_config(j.dump()).candidate_source_layer_id, -1);
  j = seven_layers();
  j["engram_layer_ids"] = {1, 4};  // absent rows default to zeros
  EXPECT_THAT(parse_config(j.dump()).engram_num_embeddings, ElementsAre(0, 0));
  // The limits themselves parse.
  j = seven_layers();
  j.merge_patch({{"hc_sinkhorn_iters", 1000}, {"hidden_size", 262144}, {"sliding_window", 1024},
                 {"max_position_embeddings", 1024}, {"swiglu_limit", 0}, {"eos_token_id", {0, 129279}}, {"bos_token_id", -1}});
  EXPECT_EQ(parse_config(j.dump()).hc_sinkhorn_iters, 1000);
}

// A number the JSON library cannot hold is an invalid-JSON error naming the file, never a
// library exception escaping.
TEST(Config, NumberOverflowNamesTheFile) {
  try {
    parse_config("{\"num_hidden_layers\": 7, \"rms_norm_eps\": 1e400}", "over.json");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("over.json: invalid JSON"));
    EXPECT_THAT(e.what(), HasSubstr("number overflow"));
  }
}

}  // namespace
