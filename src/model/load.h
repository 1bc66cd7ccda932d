// Opening a model from a checkpoint directory: config, weights (or seeded random ones),
// and, for Engram layers, the tokenizer-derived hash state.
//
// Purpose: one place that composes loader, tokenizer and model, used by the CLI, the tests
// and (later) the engine. Engram's compressed token map is defined on the tokenizer, so a
// checkpoint with engram layers must ship tokenizer.json.
// Threading: returns immutable objects.
#pragma once

#include <memory>
#include <string>

#include "kernels/backend.h"
#include "loader/checkpoint.h"
#include "model/deepseek_v41.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::model {

struct LoadedModel {
  std::unique_ptr<loader::Checkpoint> checkpoint;      // null with random weights
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;     // null when the directory has none
  std::unique_ptr<DeepseekV41> model;
};

enum class LoadFormat { kAuto, kRandom };

// Errors (Error) name the file/field/tensor that is wrong.
LoadedModel load_model(const std::string& dir, kernels::Backend& backend, LoadFormat format = LoadFormat::kAuto,
                       uint64_t seed = 0);

// The Engram hash state from a tokenizer (null when the config has no engram layers).
std::shared_ptr<const EngramHasher> make_engram_hasher(const loader::ModelConfig& c, const tokenizer::Tokenizer* tok,
                                                       const std::string& dir);

}  // namespace deepinfer::model
