// config.json of a DeepSeek-V4.1 checkpoint: parsing and the derived layer schedule.
//
// Purpose: read a flat text config or a composite one (`text_config` + `vision_config` +
// optional `quantization_config`), apply the reference's defaults, derive the schedule
// (compress_ratios for any layer count, KV sources, index sources, candidate source, DSpark
// targets, main/compress rope parameters) and enforce the reference's constraints plus the
// implicit ones the forward relies on. Every violation is an Error naming the field.
// Invariants: a ModelConfig that parse returned is valid; the model never re-checks it.
// Threading: immutable after parsing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace deepinfer::loader {

struct RopeParams {
  std::string rope_type = "default";  // "default" or "yarn"
  double rope_theta = 10000.0;
  double partial_rotary_factor = 1.0;
  double factor = 1.0;                // yarn
  bool has_factor = false;            // absent: max_position_embeddings / original
  double beta_fast = 32.0, beta_slow = 1.0;
  double original_max_position_embeddings = 0.0;
  double attention_factor = 1.0;
  bool truncate = true;
};

struct QuantizationConfig {
  bool present = false;
  std::string quant_method, scale_fmt, expert_dtype;
  std::vector<int64_t> weight_block_size;
};

struct ModelConfig {
  // geometry
  int64_t vocab_size = 129280;
  int64_t hidden_size = 5120;
  int64_t num_hidden_layers = 40;
  int64_t num_attention_heads = 64;
  int64_t head_dim = 512;
  int64_t q_lora_rank = 1280;
  int64_t qk_rope_head_dim = 64;
  int64_t o_groups = 8;
  int64_t o_lora_rank = 1024;
  int64_t sliding_window = 128;
  int64_t max_position_embeddings = 1048576;
  double rope_theta = 10000.0;
  double compress_rope_theta = 160000.0;
  // compressed sparse attention
  std::vector<int64_t> compress_ratios;         // backbone + draft entries (L + n_nextn)
  std::vector<int64_t> kv_source_layer_ids;
  std::vector<int64_t> index_source_layer_ids;
  int64_t candidate_source_layer_id = -1;
  int64_t candidate_topk_blocks = 2048;
  int64_t candidate_block_size = 8;
  int64_t index_n_heads = 32;
  int64_t index_head_dim = 128;
  int64_t index_topk = 512;
  // MoE
  int64_t moe_intermediate_size = 2304;
  int64_t n_routed_experts = 384;
  int64_t num_experts_per_tok = 6;
  std::string scoring_func = "sqrtsoftplus";
  double gate_temp = 1.0;
  bool norm_topk_prob = true;
  double routed_scaling_factor = 1.5;
  double swiglu_limit = 10.0;
  std::string hidden_act = "silu";
  // mHC
  int64_t hc_mult = 4;
  int64_t hc_sinkhorn_iters = 20;
  double hc_eps = 1e-6;
  double rms_norm_eps = 1e-20;
  // Engram
  std::vector<int64_t> engram_layer_ids;
  std::vector<int64_t> engram_num_embeddings;
  int64_t engram_vocab_size = 16000000;
  int64_t engram_max_ngram_size = 4;
  int64_t engram_n_heads = 8;
  int64_t engram_head_dim = 256;
  int64_t engram_pad_id = 2;
  int64_t engram_compressed_vocab_size = 99092;
  // DSpark
  int64_t num_nextn_predict_layers = 3;
  int64_t dspark_block_size = 5;
  int64_t dspark_noise_token_id = 128799;
  std::vector<int64_t> dspark_target_layer_ids;  // taps: layers whose input (hc mean) conditions the drafts
  int64_t dspark_markov_rank = 256;              // the Markov head's transition rank
  int64_t dspark_n_routed_experts = 128;         // each stage's own experts
  int64_t dspark_num_experts_per_tok = 3;        // (the official config's dspark_n_activated_experts)
  // tokens
  std::vector<int64_t> eos_token_ids;
  int64_t bos_token_id = -1;
  bool tie_word_embeddings = false;
  // derived
  RopeParams rope_main, rope_compress;
  QuantizationConfig quantization;
  bool composite = false;  // config.json had text_config

  int64_t ratio(int64_t layer) const { return compress_ratios[static_cast<size_t>(layer)]; }
  bool is_kv_source(int64_t layer) const;
  bool is_index_source(int64_t layer) const;
  bool has_engram(int64_t layer) const;
  // The KV source whose compressed cache `layer` attends over (-1 if none / ratio 0).
  int64_t kv_source_of(int64_t layer) const;
  // The index source whose top-k `layer` reuses (-1 if none).
  int64_t index_source_of(int64_t layer) const;
  // Rotary channel count: int(head_dim * partial_rotary_factor), as the reference computes.
  int64_t rope_dim(const RopeParams& p) const;
};

// Parses config.json text; `source` names the file in error messages.
ModelConfig parse_config(const std::string& json_text, const std::string& source = "config.json");
ModelConfig load_config(const std::string& path);

}  // namespace deepinfer::loader
