// Opening a model from a checkpoint directory: config, weights (or seeded random ones), the
// tokenizer, and, for Engram layers, the hash state derived from the tokenizer.
//
// Purpose: the one place that composes loader, tokenizer and model, used by the API, the CLI,
// the tests and the benchmarks. It sits above the model so that the model room needs no
// tokenizer: Engram's compressed token map is defined on the tokenizer, so it is built here
// (tokenizer/engram_map) and handed to the model as plain data (model::EngramHasher takes the
// map as a vector). A checkpoint with engram layers must therefore ship tokenizer.json.
// Invariants: model is set on return; checkpoint is null with random weights; tokenizer is null
// when the directory has no tokenizer.json; nothing is allocated for a model whose memory plan
// does not fit.
// Threading: returns immutable objects.
#pragma once

#include <memory>
#include <string>

#include "kernels/backend.h"
#include "loader/checkpoint.h"
#include "model/deepseek_v41.h"
#include "model/memory_plan.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::engine {

struct LoadedModel {
  std::unique_ptr<loader::Checkpoint> checkpoint;      // null with random weights
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;     // null when the directory has none
  std::unique_ptr<model::DeepseekV41> model;
  model::MemoryPlan memory;                            // checked before anything was allocated
  model::MemoryAvailable available;                    // the memory available then
};

enum class LoadFormat { kAuto, kRandom };

// What the memory check at load compares (model/memory_plan.h).
struct MemoryOptions {
  int64_t state_tokens = 0;          // one sequence's context the state must hold (0: max_position_embeddings)
  int64_t state_budget_bytes = 0;    // the engine's state budget (0: none)
  double memory_fraction = 0;        // or this fraction of the memory free after loading (0: none)
  std::string device;                // the device's name in messages ("": the backend's name)
  bool engram_tables_on_host = true;  // device backends: Engram tables stay in host memory (model::ModelOptions)
  // DSpark speculative decoding: the model runs its draft stages (model::ModelOptions.dspark; an
  // Error when the checkpoint has none), and each sequence's state holds their rings.
  bool dspark = false;
  model::MemoryAvailable available;  // -1 fields: asked now of the backend (device) and the host
};

// Plans the model's memory and checks it against what is available before allocating any of it
// (an Error says what it needs and what there is), then loads. Errors (Error) name the
// file/field/tensor that is wrong.
LoadedModel load_model(const std::string& dir, kernels::Backend& backend, LoadFormat format = LoadFormat::kAuto,
                       uint64_t seed = 0, const MemoryOptions& memory = {});

// The Engram hash state from a tokenizer (null when the config has no engram layers).
std::shared_ptr<const model::EngramHasher> make_engram_hasher(const loader::ModelConfig& c,
                                                              const tokenizer::Tokenizer* tok, const std::string& dir);

}  // namespace deepinfer::engine
