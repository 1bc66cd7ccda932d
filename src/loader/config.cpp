#include "loader/config.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace deepinfer::loader {

using nlohmann::json;

namespace {

std::string list_str(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

bool contains(const std::vector<int64_t>& v, int64_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

struct Reader {
  const json& j;
  const std::string& src;
  std::string prefix = "";  // e.g. "rope_parameters.main." for a nested object's fields
  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    throw Error(src + ": field '" + prefix + field + "': " + what);
  }
  bool has(const char* k) const { return j.contains(k) && !j.at(k).is_null(); }
  void get(const char* k, int64_t* out) const {
    if (!has(k)) return;
    const json& v = j.at(k);
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) fail(k, "integer too large: " + v.dump());
    else if (v.is_number_integer()) *out = v.get<int64_t>();
    else if (v.is_number_float() && std::fabs(v.get<double>()) < 9.0e18 &&
             v.get<double>() == static_cast<double>(static_cast<int64_t>(v.get<double>())))
      *out = static_cast<int64_t>(v.get<double>());
    else fail(k, "expected an integer, got " + v.dump());
  }
  void get(const char* k, double* out) const {
    if (!has(k)) return;
    const json& v = j.at(k);
    if (!v.is_number()) fail(k, "expected a number, got " + v.dump());
    *out = v.get<double>();
  }
  void get(const char* k, bool* out) const {
    if (!has(k)) return;
    const json& v = j.at(k);
    if (!v.is_boolean()) fail(k, "expected true or false, got " + v.dump());
    *out = v.get<bool>();
  }
  void get(const char* k, std::string* out) const {
    if (!has(k)) return;
    const json& v = j.at(k);
    if (!v.is_string()) fail(k, "expected a string, got " + v.dump());
    *out = v.get<std::string>();
  }
  bool get(const char* k, std::vector<int64_t>* out) const {
    if (!has(k)) return false;
    const json& v = j.at(k);
    if (!v.is_array()) fail(k, "expected a list of integers, got " + v.dump());
    out->clear();
    for (const json& e : v) {
      if (!e.is_number_integer()) fail(k, "expected a list of integers, found element " + e.dump());
      if (e.is_number_unsigned() && e.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
        fail(k, "integer too large: " + e.dump());
      out->push_back(e.get<int64_t>());
    }
    return true;
  }
};

void positive(const std::string& src, const char* field, int64_t v) {
  if (v <= 0) throw Error(src + ": field '" + field + "': must be > 0, got " + std::to_string(v));
}

// An integer field within [lo, hi] (the range the model can run; the bounds also keep every
// product of two fields inside int64).
void in_range(const std::string& src, const std::string& field, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo || v > hi)
    throw Error(src + ": field '" + field + "': must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
                std::to_string(v));
}

std::string num_str(double v) {
  std::ostringstream o;
  o.precision(10);
  o << v;
  return o.str();
}

// A floating-point field that must be finite and > 0 (or >= 0 with allow_zero).
void finite_positive(const std::string& src, const std::string& field, double v, bool allow_zero = false) {
  if (!std::isfinite(v) || v < 0 || (v == 0 && !allow_zero))
    throw Error(src + ": field '" + field + "': must be finite and " + (allow_zero ? ">= 0" : "> 0") + ", got " + num_str(v));
}

// Every entry of a list of layer ids in [0, n) and none twice.
void layer_ids(const std::string& src, const std::string& field, const std::vector<int64_t>& v, int64_t n) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] < 0 || v[i] >= n)
      throw Error(src + ": field '" + field + "': entry " + std::to_string(i) + " (" + std::to_string(v[i]) +
                  ") is out of range [0, " + std::to_string(n) + "): " + list_str(v));
    for (size_t k = 0; k < i; ++k)
      if (v[k] == v[i])
        throw Error(src + ": field '" + field + "': layer " + std::to_string(v[i]) + " is listed twice: " + list_str(v));
  }
}

// Limits of the integer fields (inclusive). Token ids are int32; the geometry bounds keep the
// weight shapes' products far from int64 overflow (the memory check then says whether a
// model fits).
constexpr int64_t kMaxLayers = 512, kMaxDraftLayers = 64, kMaxHeads = 4096, kMaxDim = 1 << 18, kMaxHeadDim = 1 << 16;
constexpr int64_t kMaxVocab = (int64_t{1} << 31) - 1, kMaxPositions = (int64_t{1} << 31) - 1;
constexpr int64_t kMaxExperts = 2048, kMaxHcMult = 64, kMaxSinkhornIters = 1000, kMaxRatio = 1 << 16;
constexpr int64_t kMaxEngramHeads = 64, kMaxEngramNgram = 16, kMaxEngramHeadDim = 8192;
constexpr int64_t kMaxEngramVocab = int64_t{1} << 32, kMaxEngramRows = int64_t{1} << 36;

RopeParams read_rope(const json& d, const std::string& src, const std::string& where) {
  if (!d.is_object()) throw Error(src + ": field '" + where + "': expected an object");
  Reader r{d, src, where + "."};
  RopeParams p;
  r.get("rope_type", &p.rope_type);
  if (d.contains("type") && !d.contains("rope_type")) r.get("type", &p.rope_type);
  r.get("rope_theta", &p.rope_theta);
  r.get("partial_rotary_factor", &p.partial_rotary_factor);
  p.has_factor = d.contains("factor") && !d["factor"].is_null();
  r.get("factor", &p.factor);
  r.get("beta_fast", &p.beta_fast);
  r.get("beta_slow", &p.beta_slow);
  r.get("original_max_position_embeddings", &p.original_max_position_embeddings);
  r.get("attention_factor", &p.attention_factor);
  r.get("truncate", &p.truncate);
  if (p.rope_type != "default" && p.rope_type != "yarn")
    throw Error(src + ": field '" + where + ".rope_type': expected \"default\" or \"yarn\", got \"" + p.rope_type + "\"");
  finite_positive(src, where + ".rope_theta", p.rope_theta);
  if (!std::isfinite(p.partial_rotary_factor) || p.partial_rotary_factor <= 0 || p.partial_rotary_factor > 1)
    throw Error(src + ": field '" + where + ".partial_rotary_factor': must be in (0, 1], got " + num_str(p.partial_rotary_factor));
  if (p.rope_type == "yarn") {
    if (p.has_factor) finite_positive(src, where + ".factor", p.factor);
    finite_positive(src, where + ".beta_fast", p.beta_fast);
    finite_positive(src, where + ".beta_slow", p.beta_slow);
    finite_positive(src, where + ".original_max_position_embeddings", p.original_max_position_embeddings, true);
    finite_positive(src, where + ".attention_factor", p.attention_factor);
  }
  return p;
}

}  // namespace

bool ModelConfig::is_kv_source(int64_t layer) const { return contains(kv_source_layer_ids, layer); }
bool ModelConfig::is_index_source(int64_t layer) const { return contains(index_source_layer_ids, layer); }
bool ModelConfig::has_engram(int64_t layer) const { return contains(engram_layer_ids, layer); }

int64_t ModelConfig::kv_source_of(int64_t layer) const {
  if (ratio(layer) == 0) return -1;
  int64_t best = -1;
  for (int64_t s : kv_source_layer_ids)
    if (s <= layer && s > best) best = s;
  return best;
}

int64_t ModelConfig::index_source_of(int64_t layer) const {
  if (ratio(layer) == 0) return -1;
  int64_t best = -1;
  for (int64_t s : index_source_layer_ids)
    if (s <= layer && s > best) best = s;
  return best;
}

int64_t ModelConfig::rope_dim(const RopeParams& p) const {
  return static_cast<int64_t>(static_cast<double>(head_dim) * p.partial_rotary_factor);
}

ModelConfig parse_config(const std::string& json_text, const std::string& src) {
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number like 1e400
    throw Error(src + ": invalid JSON: " + e.what());
  }
  if (!root.is_object()) throw Error(src + ": expected a JSON object at the top level");
  ModelConfig c;
  const json* tj = &root;
  if (root.contains("text_config")) {
    if (!root["text_config"].is_object()) throw Error(src + ": field 'text_config': expected an object");
    tj = &root["text_config"];
    c.composite = true;
  }
  if (root.contains("quantization_config") && !root["quantization_config"].is_null()) {
    const json& q = root["quantization_config"];
    if (!q.is_object()) throw Error(src + ": field 'quantization_config': expected an object");
    Reader qr{q, src};
    c.quantization.present = true;
    qr.get("quant_method", &c.quantization.quant_method);
    qr.get("scale_fmt", &c.quantization.scale_fmt);
    qr.get("expert_dtype", &c.quantization.expert_dtype);
    qr.get("weight_block_size", &c.quantization.weight_block_size);
  }
  const json& t = *tj;
  Reader r{t, src};
  std::string model_type;
  r.get("model_type", &model_type);
  r.get("vocab_size", &c.vocab_size);
  r.get("hidden_size", &c.hidden_size);
  r.get("num_hidden_layers", &c.num_hidden_layers);
  r.get("num_attention_heads", &c.num_attention_heads);
  r.get("head_dim", &c.head_dim);
  r.get("q_lora_rank", &c.q_lora_rank);
  r.get("qk_rope_head_dim", &c.qk_rope_head_dim);
  r.get("o_groups", &c.o_groups);
  r.get("o_lora_rank", &c.o_lora_rank);
  r.get("sliding_window", &c.sliding_window);
  r.get("max_position_embeddings", &c.max_position_embeddings);
  r.get("rope_theta", &c.rope_theta);
  r.get("compress_rope_theta", &c.compress_rope_theta);
  r.get("candidate_topk_blocks", &c.candidate_topk_blocks);
  r.get("candidate_block_size", &c.candidate_block_size);
  r.get("index_n_heads", &c.index_n_heads);
  r.get("index_head_dim", &c.index_head_dim);
  r.get("index_topk", &c.index_topk);
  r.get("moe_intermediate_size", &c.moe_intermediate_size);
  r.get("n_routed_experts", &c.n_routed_experts);
  r.get("num_experts_per_tok", &c.num_experts_per_tok);
  r.get("scoring_func", &c.scoring_func);
  r.get("gate_temp", &c.gate_temp);
  r.get("norm_topk_prob", &c.norm_topk_prob);
  r.get("routed_scaling_factor", &c.routed_scaling_factor);
  r.get("swiglu_limit", &c.swiglu_limit);
  r.get("hidden_act", &c.hidden_act);
  r.get("hc_mult", &c.hc_mult);
  r.get("hc_sinkhorn_iters", &c.hc_sinkhorn_iters);
  r.get("hc_eps", &c.hc_eps);
  r.get("rms_norm_eps", &c.rms_norm_eps);
  r.get("engram_layer_ids", &c.engram_layer_ids);
  bool has_engram_rows = r.get("engram_num_embeddings", &c.engram_num_embeddings);
  r.get("engram_vocab_size", &c.engram_vocab_size);
  r.get("engram_max_ngram_size", &c.engram_max_ngram_size);
  r.get("engram_n_heads", &c.engram_n_heads);
  r.get("engram_head_dim", &c.engram_head_dim);
  r.get("engram_pad_id", &c.engram_pad_id);
  r.get("engram_compressed_vocab_size", &c.engram_compressed_vocab_size);
  r.get("num_nextn_predict_layers", &c.num_nextn_predict_layers);
  r.get("dspark_block_size", &c.dspark_block_size);
  r.get("dspark_noise_token_id", &c.dspark_noise_token_id);
  r.get("dspark_markov_rank", &c.dspark_markov_rank);
  r.get("dspark_n_routed_experts", &c.dspark_n_routed_experts);
  // DeepSeek's own config spells the draft stages' top-k dspark_n_activated_experts.
  if (r.has("dspark_num_experts_per_tok") && r.has("dspark_n_activated_experts")) {
    int64_t a = 0, b = 0;
    r.get("dspark_num_experts_per_tok", &a);
    r.get("dspark_n_activated_experts", &b);
    if (a != b)
      r.fail("dspark_n_activated_experts", std::to_string(b) + " disagrees with dspark_num_experts_per_tok " + std::to_string(a));
  }
  r.get("dspark_num_experts_per_tok", &c.dspark_num_experts_per_tok);
  r.get("dspark_n_activated_experts", &c.dspark_num_experts_per_tok);
  r.get("bos_token_id", &c.bos_token_id);
  r.get("tie_word_embeddings", &c.tie_word_embeddings);
  if (r.has("eos_token_id")) {
    const json& e = t.at("eos_token_id");
    if (e.is_number_integer()) c.eos_token_ids = {e.get<int64_t>()};
    else if (!r.get("eos_token_id", &c.eos_token_ids)) {}
  } else {
    c.eos_token_ids = {1};
  }

  positive(src, "vocab_size", c.vocab_size);
  positive(src, "hidden_size", c.hidden_size);
  positive(src, "num_hidden_layers", c.num_hidden_layers);
  positive(src, "num_attention_heads", c.num_attention_heads);
  positive(src, "head_dim", c.head_dim);
  positive(src, "q_lora_rank", c.q_lora_rank);
  positive(src, "o_groups", c.o_groups);
  positive(src, "o_lora_rank", c.o_lora_rank);
  positive(src, "sliding_window", c.sliding_window);
  positive(src, "index_n_heads", c.index_n_heads);
  positive(src, "index_head_dim", c.index_head_dim);
  positive(src, "index_topk", c.index_topk);
  positive(src, "candidate_block_size", c.candidate_block_size);
  positive(src, "candidate_topk_blocks", c.candidate_topk_blocks);
  positive(src, "moe_intermediate_size", c.moe_intermediate_size);
  positive(src, "n_routed_experts", c.n_routed_experts);
  positive(src, "num_experts_per_tok", c.num_experts_per_tok);
  positive(src, "hc_mult", c.hc_mult);
  positive(src, "hc_sinkhorn_iters", c.hc_sinkhorn_iters);
  if (c.num_experts_per_tok > c.n_routed_experts)
    r.fail("num_experts_per_tok", "must be <= n_routed_experts (" + std::to_string(c.n_routed_experts) + "), got " +
                                      std::to_string(c.num_experts_per_tok));
  if (c.num_nextn_predict_layers < 0) r.fail("num_nextn_predict_layers", "must be >= 0");
  if (c.scoring_func != "sqrtsoftplus" && c.scoring_func != "softmax" && c.scoring_func != "sigmoid")
    r.fail("scoring_func", "expected \"sqrtsoftplus\", \"softmax\" or \"sigmoid\", got \"" + c.scoring_func + "\"");
  if (c.hidden_act != "silu") r.fail("hidden_act", "only \"silu\" is supported, got \"" + c.hidden_act + "\"");
  finite_positive(src, "gate_temp", c.gate_temp);

  // --- ranges (before anything is sized by a field) ---
  in_range(src, "vocab_size", c.vocab_size, 1, kMaxVocab);
  in_range(src, "hidden_size", c.hidden_size, 1, kMaxDim);
  in_range(src, "num_hidden_layers", c.num_hidden_layers, 1, kMaxLayers);
  in_range(src, "num_nextn_predict_layers", c.num_nextn_predict_layers, 0, kMaxDraftLayers);
  in_range(src, "num_attention_heads", c.num_attention_heads, 1, kMaxHeads);
  in_range(src, "head_dim", c.head_dim, 1, kMaxHeadDim);
  in_range(src, "q_lora_rank", c.q_lora_rank, 1, kMaxDim);
  in_range(src, "o_lora_rank", c.o_lora_rank, 1, kMaxDim);
  in_range(src, "o_groups", c.o_groups, 1, c.num_attention_heads);
  in_range(src, "max_position_embeddings", c.max_position_embeddings, 1, kMaxPositions);
  in_range(src, "sliding_window", c.sliding_window, 1, c.max_position_embeddings);
  in_range(src, "index_n_heads", c.index_n_heads, 1, kMaxHeads);
  in_range(src, "index_head_dim", c.index_head_dim, 1, kMaxHeadDim);
  in_range(src, "index_topk", c.index_topk, 1, kMaxPositions);
  in_range(src, "candidate_block_size", c.candidate_block_size, 1, kMaxPositions);
  in_range(src, "candidate_topk_blocks", c.candidate_topk_blocks, 1, kMaxPositions);
  in_range(src, "moe_intermediate_size", c.moe_intermediate_size, 1, kMaxDim);
  in_range(src, "n_routed_experts", c.n_routed_experts, 1, kMaxExperts);
  in_range(src, "hc_mult", c.hc_mult, 1, kMaxHcMult);
  in_range(src, "hc_sinkhorn_iters", c.hc_sinkhorn_iters, 1, kMaxSinkhornIters);
  finite_positive(src, "rms_norm_eps", c.rms_norm_eps);
  finite_positive(src, "hc_eps", c.hc_eps);
  finite_positive(src, "rope_theta", c.rope_theta);
  finite_positive(src, "compress_rope_theta", c.compress_rope_theta);
  finite_positive(src, "routed_scaling_factor", c.routed_scaling_factor);
  finite_positive(src, "swiglu_limit", c.swiglu_limit, true);  // 0: no clamp
  for (size_t i = 0; i < c.eos_token_ids.size(); ++i)
    if (c.eos_token_ids[i] < 0 || c.eos_token_ids[i] >= c.vocab_size)
      r.fail("eos_token_id", "token id " + std::to_string(c.eos_token_ids[i]) + " is outside the vocabulary [0, " +
                                 std::to_string(c.vocab_size) + ")");
  if (c.bos_token_id < -1 || c.bos_token_id >= c.vocab_size)
    r.fail("bos_token_id", "token id " + std::to_string(c.bos_token_id) + " is outside the vocabulary [0, " +
                               std::to_string(c.vocab_size) + ")");
  if (c.num_nextn_predict_layers > 0) {
    in_range(src, "dspark_block_size", c.dspark_block_size, 1, 1024);
    in_range(src, "dspark_noise_token_id", c.dspark_noise_token_id, 0, c.vocab_size - 1);
    in_range(src, "dspark_markov_rank", c.dspark_markov_rank, 1, kMaxDim);
    in_range(src, "dspark_n_routed_experts", c.dspark_n_routed_experts, 1, kMaxExperts);
    in_range(src, "dspark_num_experts_per_tok", c.dspark_num_experts_per_tok, 1, c.dspark_n_routed_experts);
  }
  if (!c.engram_layer_ids.empty()) {
    in_range(src, "engram_max_ngram_size", c.engram_max_ngram_size, 2, kMaxEngramNgram);
    in_range(src, "engram_n_heads", c.engram_n_heads, 1, kMaxEngramHeads);
    in_range(src, "engram_head_dim", c.engram_head_dim, 1, kMaxEngramHeadDim);
    in_range(src, "engram_vocab_size", c.engram_vocab_size, 2, kMaxEngramVocab);
    in_range(src, "engram_compressed_vocab_size", c.engram_compressed_vocab_size, 1, kMaxVocab);
    in_range(src, "engram_pad_id", c.engram_pad_id, 0, c.vocab_size - 1);
    for (size_t i = 0; i < c.engram_num_embeddings.size(); ++i)
      in_range(src, "engram_num_embeddings[" + std::to_string(i) + "]", c.engram_num_embeddings[i], 1, kMaxEngramRows);
  }

  const int64_t n = c.num_hidden_layers, n_nextn = c.num_nextn_predict_layers;
  // --- compress_ratios (backbone + trailing draft entries) ---
  std::vector<int64_t> ratios;
  static const std::vector<int64_t> kDefaultRatios = [] {
    std::vector<int64_t> v = {0, 0};
    for (int i = 0; i < 18; ++i) v.push_back(2);
    for (int i = 0; i < 20; ++i) v.push_back(1);
    return v;
  }();
  if (!r.get("compress_ratios", &ratios)) {
    if (n == static_cast<int64_t>(kDefaultRatios.size())) {
      ratios = kDefaultRatios;
    } else {
      int64_t n_slide = std::min<int64_t>(2, n);
      int64_t n_enc = std::max<int64_t>(0, (n - n_slide + 1) / 2);
      ratios.assign(static_cast<size_t>(n_slide), 0);
      ratios.insert(ratios.end(), static_cast<size_t>(n_enc), 2);
      ratios.insert(ratios.end(), static_cast<size_t>(std::max<int64_t>(0, n - n_slide - n_enc)), 1);
    }
  }
  if (static_cast<int64_t>(ratios.size()) < n)
    r.fail("compress_ratios", "needs at least num_hidden_layers (" + std::to_string(n) + ") entries, got " +
                                  std::to_string(ratios.size()));
  if (static_cast<int64_t>(ratios.size()) > n + n_nextn)
    r.fail("compress_ratios", "has " + std::to_string(ratios.size()) +
                                  " entries but num_hidden_layers + num_nextn_predict_layers = " + std::to_string(n + n_nextn));
  for (size_t i = 0; i < ratios.size(); ++i)
    if (ratios[i] < 0) r.fail("compress_ratios", "entry " + std::to_string(i) + " is negative");
    else if (ratios[i] > kMaxRatio)
      r.fail("compress_ratios", "entry " + std::to_string(i) + " (" + std::to_string(ratios[i]) + ") must be <= " +
                                    std::to_string(kMaxRatio));
  for (size_t i = static_cast<size_t>(n); i < ratios.size(); ++i)
    if (ratios[i] != 0)
      r.fail("compress_ratios", "entry " + std::to_string(i) + " (draft stage " + std::to_string(i - static_cast<size_t>(n)) +
                                    ") is " + std::to_string(ratios[i]) + ", but the DSpark stages are window-only (0)");
  ratios.resize(static_cast<size_t>(n + n_nextn), 0);
  c.compress_ratios = ratios;
  std::vector<int64_t> backbone(ratios.begin(), ratios.begin() + n);

  // --- sources ---
  static const std::vector<int64_t> kDefaultKv = {2, 8, 14, 20};
  static const std::vector<int64_t> kDefaultIndex = {2, 8, 14, 20, 24, 28, 32, 36};
  if (!r.get("kv_source_layer_ids", &c.kv_source_layer_ids)) {
    bool is_default = n <= static_cast<int64_t>(kDefaultRatios.size()) &&
                      std::equal(backbone.begin(), backbone.end(), kDefaultRatios.begin());
    if (is_default) {
      c.kv_source_layer_ids = kDefaultKv;
    } else {
      for (int64_t i = 0; i < n; ++i)
        if (backbone[i] > 0 && (i == 0 || backbone[i - 1] != backbone[i])) c.kv_source_layer_ids.push_back(i);
    }
  }
  if (!r.get("index_source_layer_ids", &c.index_source_layer_ids))
    c.index_source_layer_ids = c.kv_source_layer_ids == kDefaultKv ? kDefaultIndex : c.kv_source_layer_ids;
  if (!r.get("dspark_target_layer_ids", &c.dspark_target_layer_ids)) {
    std::vector<int64_t> nonsrc;
    for (int64_t i = 0; i < n; ++i)
      if (!c.is_kv_source(i)) nonsrc.push_back(i);
    size_t k = std::min<size_t>(3, nonsrc.size());
    c.dspark_target_layer_ids.assign(nonsrc.end() - static_cast<std::ptrdiff_t>(k), nonsrc.end());
  }
  const auto& kv = c.kv_source_layer_ids;
  const auto& idx = c.index_source_layer_ids;
  for (int64_t s : kv)
    if (s < 0 || s >= n) r.fail("kv_source_layer_ids", "out of range [0, " + std::to_string(n) + "): " + list_str(kv));
  for (int64_t s : kv)
    if (backbone[s] == 0) r.fail("kv_source_layer_ids", list_str(kv) + " must have compress_ratios[i] > 0 (layer " + std::to_string(s) + " has 0)");
  for (int64_t s : idx)
    if (s < 0 || s >= n) r.fail("index_source_layer_ids", "out of range [0, " + std::to_string(n) + "): " + list_str(idx));
  for (int64_t s : idx)
    if (backbone[s] == 0) r.fail("index_source_layer_ids", list_str(idx) + " must have compress_ratios[i] > 0 (layer " + std::to_string(s) + " has 0)");
  for (int64_t s : idx) {
    bool ok = contains(kv, s) || std::any_of(kv.begin(), kv.end(), [&](int64_t k2) { return k2 < s; });
    if (!ok) r.fail("index_source_layer_ids", list_str(idx) + ": layer " + std::to_string(s) + " needs a kv_source_layer_ids entry at or before it");
  }
  if (!r.has("candidate_source_layer_id")) c.candidate_source_layer_id = kv.empty() ? -1 : kv.back();
  else r.get("candidate_source_layer_id", &c.candidate_source_layer_id);
  if (c.candidate_source_layer_id >= 0 && !contains(idx, c.candidate_source_layer_id))
    r.fail("candidate_source_layer_id", std::to_string(c.candidate_source_layer_id) + " must be in index_source_layer_ids " + list_str(idx));
  for (int64_t i = 0; i < n; ++i)
    if (backbone[i] > 0 && !std::any_of(kv.begin(), kv.end(), [&](int64_t s) { return s <= i; }))
      r.fail("compress_ratios", "layer " + std::to_string(i) + " has ratio > 0 but no kv_source_layer_ids entry at or before it");
  if (c.engram_num_embeddings.empty() && !has_engram_rows) c.engram_num_embeddings.assign(c.engram_layer_ids.size(), 0);
  if (c.engram_num_embeddings.size() != c.engram_layer_ids.size())
    r.fail("engram_num_embeddings", "length " + std::to_string(c.engram_num_embeddings.size()) +
                                        " must match engram_layer_ids (length " + std::to_string(c.engram_layer_ids.size()) + ")");
  layer_ids(src, "engram_layer_ids", c.engram_layer_ids, n);
  layer_ids(src, "kv_source_layer_ids", kv, n);
  layer_ids(src, "index_source_layer_ids", idx, n);
  layer_ids(src, "dspark_target_layer_ids", c.dspark_target_layer_ids, n);
  if (!std::is_sorted(c.dspark_target_layer_ids.begin(), c.dspark_target_layer_ids.end()))
    r.fail("dspark_target_layer_ids", list_str(c.dspark_target_layer_ids) +
                                          " must be in layer order (main_proj reads the taps concatenated in that order)");
  if (n_nextn > 0 && c.dspark_target_layer_ids.empty())
    r.fail("dspark_target_layer_ids", "is empty, but the draft stages (num_nextn_predict_layers " + std::to_string(n_nextn) +
                                          ") read the hidden states of these layers");

  // --- implicit constraints the forward relies on ---
  for (int64_t i = 0; i < n; ++i) {
    int64_t s = c.kv_source_of(i);
    if (s >= 0 && backbone[i] != backbone[s])
      r.fail("compress_ratios", "layer " + std::to_string(i) + " has ratio " + std::to_string(backbone[i]) +
                                    " but its KV source (layer " + std::to_string(s) + ") has ratio " + std::to_string(backbone[s]));
    int64_t x = c.index_source_of(i);
    if (x >= 0 && c.kv_source_of(x) != s)
      r.fail("index_source_layer_ids", "layer " + std::to_string(i) + " would reuse the top-k of index source " +
                                           std::to_string(x) + ", which scores a different KV source's entries");
  }
  if (c.candidate_source_layer_id >= 0) {
    for (int64_t s : idx)
      if (s > c.candidate_source_layer_id && c.kv_source_of(s) != c.kv_source_of(c.candidate_source_layer_id))
        r.fail("candidate_source_layer_id", "index source " + std::to_string(s) +
                                                " scores a different KV source than the candidate source " +
                                                std::to_string(c.candidate_source_layer_id));
  }
  if (c.qk_rope_head_dim % 2 != 0 || c.qk_rope_head_dim <= 0) r.fail("qk_rope_head_dim", "must be even and > 0");
  if (c.qk_rope_head_dim > c.index_head_dim || c.qk_rope_head_dim > c.head_dim)
    r.fail("qk_rope_head_dim", "must be <= index_head_dim and head_dim");
  if ((c.num_attention_heads * c.head_dim) % c.o_groups != 0 || c.num_attention_heads % c.o_groups != 0)
    r.fail("o_groups", "num_attention_heads (" + std::to_string(c.num_attention_heads) + ") must be divisible by o_groups");

  // --- rope parameters ---
  bool have_nested = false;
  if (r.has("rope_parameters")) {
    const json& rp = t["rope_parameters"];
    if (!rp.is_object()) r.fail("rope_parameters", "expected an object with 'main' and 'compress', got " + rp.dump());
    if (!rp.contains("main") || !rp.contains("compress"))
      r.fail("rope_parameters", "needs both 'main' and 'compress' objects");
    c.rope_main = read_rope(rp["main"], src, "rope_parameters.main");
    c.rope_compress = read_rope(rp["compress"], src, "rope_parameters.compress");
    have_nested = true;
  }
  if (!have_nested) {
    double partial = static_cast<double>(c.qk_rope_head_dim) / static_cast<double>(c.head_dim);
    c.rope_main = RopeParams{};
    c.rope_main.rope_theta = c.rope_theta;
    c.rope_main.partial_rotary_factor = partial;
    json yarn = json::object();
    if (t.contains("rope_scaling") && t["rope_scaling"].is_object())
      for (auto it = t["rope_scaling"].begin(); it != t["rope_scaling"].end(); ++it)
        if (it.key() != "main" && it.key() != "compress") yarn[it.key()] = it.value();
    yarn["rope_theta"] = c.compress_rope_theta;
    yarn["partial_rotary_factor"] = partial;
    c.rope_compress = read_rope(yarn, src, "rope_scaling");
    if (!yarn.contains("attention_factor")) c.rope_compress.attention_factor = 1.0;
  }
  for (const RopeParams* p : {&c.rope_main, &c.rope_compress}) {
    int64_t rd = c.rope_dim(*p);
    if (rd != c.qk_rope_head_dim)
      r.fail("rope_parameters", "rotary dim int(head_dim * partial_rotary_factor) = " + std::to_string(rd) +
                                    " must equal qk_rope_head_dim (" + std::to_string(c.qk_rope_head_dim) + ")");
    if (p->rope_type == "yarn") {
      if (p->original_max_position_embeddings <= 0)
        r.fail(have_nested ? (p == &c.rope_main ? "rope_parameters.main" : "rope_parameters.compress") : "rope_scaling",
               "yarn needs original_max_position_embeddings > 0");
      if (p->attention_factor != 1.0)
        r.fail("rope_parameters", "yarn attention_factor other than 1.0 is not supported");
    }
  }
  return c;
}

ModelConfig load_config(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw Error(path + ": cannot open (config.json expected): " + std::strerror(errno));
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_config(ss.str(), path);
}

}  // namespace deepinfer::loader
