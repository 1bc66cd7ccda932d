// The DSpark fixture (tests/data/v41/dspark, made by tools/make_dspark_fixture.py): the `full`
// fixture's backbone with three draft stages. Its folder holds the config and the stages'
// tensors (mtp.safetensors) only; a checkpoint directory is assembled in a temporary folder
// with links to `full`'s weights and tokenizer.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "loader/config.h"

namespace deepinfer::testing {

inline std::string v41_fixture(const std::string& n) { return std::string(DEEPINFER_TEST_DATA) + "/v41/" + n; }

// A checkpoint directory `name` in the test's temporary folder: `full`'s model.safetensors and
// tokenizer, the dspark fixture's config.json and, with `mtp`, its mtp.safetensors.
inline std::string dspark_checkpoint(const std::string& name = "dspark", bool mtp = true) {
  namespace fs = std::filesystem;
  const std::string dir = ::testing::TempDir() + "/" + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const char* f : {"model.safetensors", "tokenizer.json", "tokenizer_config.json"})
    fs::create_symlink(v41_fixture("full") + "/" + f, dir + "/" + f);
  fs::copy_file(v41_fixture("dspark") + "/config.json", dir + "/config.json");
  if (mtp) fs::create_symlink(v41_fixture("dspark") + "/mtp.safetensors", dir + "/mtp.safetensors");
  return dir;
}

// full-q's config (the release formats: a quantization_config) with the dspark fixture's draft
// stages.
inline nlohmann::json dspark_release_config_json() {
  std::ifstream q(v41_fixture("full-q") + "/config.json"), d(v41_fixture("dspark") + "/config.json");
  nlohmann::json j = nlohmann::json::parse(q), draft = nlohmann::json::parse(d);
  for (const char* k : {"num_nextn_predict_layers", "dspark_block_size", "dspark_n_routed_experts", "dspark_num_experts_per_tok",
                        "dspark_markov_rank", "dspark_noise_token_id", "dspark_target_layer_ids"})
    j["text_config"][k] = draft[k];
  return j;
}

}  // namespace deepinfer::testing
