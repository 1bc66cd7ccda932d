// Test helper shared by the engine tests: a small random-weight V4.1 model directory (config
// only; weights come from `--load-format random`) with the fixture tokenizer for text I/O, and
// an EngineConfig on it.
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "deepinfer/llm.h"

namespace deepinfer::testing_util {

inline std::string fixture(const std::string& name) { return std::string(DEEPINFER_TEST_DATA) + "/v41/" + name; }

// Created once per test process under the gtest temp dir.
inline std::string random_model_dir() {
  static const std::string dir = [] {
    // Per process: test executables may run in parallel and must not share the files.
    const std::string d = ::testing::TempDir() + "/engine_random_model_" + std::to_string(::getpid());
    std::filesystem::create_directories(d);
    nlohmann::json c = {{"vocab_size", 1024}, {"hidden_size", 64}, {"num_hidden_layers", 5}, {"num_attention_heads", 2},
                        {"head_dim", 32}, {"q_lora_rank", 32}, {"qk_rope_head_dim", 8}, {"o_groups", 2},
                        {"o_lora_rank", 16}, {"sliding_window", 16}, {"compress_ratios", {0, 2, 2, 1, 1}},
                        {"index_n_heads", 2}, {"index_head_dim", 32}, {"index_topk", 8}, {"candidate_block_size", 4},
                        {"candidate_topk_blocks", 4}, {"moe_intermediate_size", 32}, {"n_routed_experts", 4},
                        {"num_experts_per_tok", 2}, {"num_nextn_predict_layers", 0}, {"eos_token_id", 1}};
    std::ofstream(d + "/config.json") << c.dump(2);
    std::filesystem::copy_file(fixture("full") + "/tokenizer.json", d + "/tokenizer.json",
                               std::filesystem::copy_options::overwrite_existing);
    return d;
  }();
  return dir;
}

// An engine on that model with seeded random weights, 2 threads.
inline EngineConfig random_model_config(uint64_t seed) {
  EngineConfig c;
  c.model = random_model_dir();
  c.load_format = "random";
  c.seed = seed;
  c.threads = 2;
  return c;
}

}  // namespace deepinfer::testing_util
