#include "engine/load_model.h"

#include <filesystem>
#include <new>

#include "core/error.h"
#include "model/info.h"
#include "tokenizer/engram_map.h"

namespace deepinfer::engine {

namespace fs = std::filesystem;

std::shared_ptr<const model::EngramHasher> make_engram_hasher(const loader::ModelConfig& c,
                                                              const tokenizer::Tokenizer* tok, const std::string& dir) {
  if (c.engram_layer_ids.empty()) return nullptr;
  if (!tok)
    throw Error(dir + ": config.json has engram_layer_ids but the directory has no tokenizer.json (Engram's hashing is "
                "defined on the tokenizer)");
  tokenizer::EngramTokenMap m = tokenizer::build_engram_token_map(*tok);
  return std::make_shared<const model::EngramHasher>(c, std::move(m.map), m.n_keys);
}

namespace {

// Random weights are allocated in full: refuse a config whose weights (plus one sequence's
// first tokens of state) do not fit in the memory available now, before allocating any of it.
// A device backend makes them in its own memory (release formats included), so only host
// backends are checked, at float32 per parameter (what the host makes before converting).
// Device memory is not queried here (the backend reports its own allocation failures).
void check_random_memory(const loader::ModelConfig& c, const kernels::Backend& backend, const std::string& config_path) {
  if (!backend.host_memory()) return;
  const model::MemoryNeed need = model::random_weights_memory(c, 4.0);
  const int64_t avail = model::host_memory_available();
  if (avail < 0 || need.total() <= static_cast<double>(avail)) return;
  throw Error(config_path + ": the model does not fit in memory: it needs " + model::human_bytes(need.total()) +
              " (random float32 weights " + model::human_bytes(need.weights) + " + one sequence's state at " + std::to_string(model::kStateTokens) + " tokens " +
              model::human_bytes(need.state) + ") but " + model::human_bytes(static_cast<double>(avail)) +
              " is available (see `deepinfer info`)");
}

LoadedModel load_model_unchecked(const std::string& dir, kernels::Backend& backend, LoadFormat format, uint64_t seed) {
  LoadedModel lm;
  loader::ModelConfig cfg;
  model::Weights w;
  if (format == LoadFormat::kRandom) {
    const std::string config_path = (fs::path(dir) / "config.json").string();
    cfg = loader::load_config(config_path);
    check_random_memory(cfg, backend, config_path);
    // Made in a device's memory directly (release formats quantised there too); without a
    // quantization_config the matrices are in bf16 when the backend computes in bf16 (the
    // values its products use anyway, at half the memory).
    const auto fmt = backend.precision() == kernels::Precision::kBF16 ? kernels::WeightFormat::kBF16
                                                                       : kernels::WeightFormat::kF32;
    w = model::random_weights(cfg, seed, &backend, fmt);
  } else {
    lm.checkpoint = loader::Checkpoint::open(dir);
    cfg = lm.checkpoint->config();
    w = model::load_weights(*lm.checkpoint);
  }
  if (fs::exists(fs::path(dir) / "tokenizer.json")) lm.tokenizer = tokenizer::Tokenizer::load(dir);
  auto hasher = make_engram_hasher(cfg, lm.tokenizer.get(), dir);
  lm.model = std::make_unique<model::DeepseekV41>(std::move(cfg), std::move(w), backend, std::move(hasher));
  return lm;
}

}  // namespace

LoadedModel load_model(const std::string& dir, kernels::Backend& backend, LoadFormat format, uint64_t seed) {
  try {
    return load_model_unchecked(dir, backend, format, seed);
  } catch (const std::bad_alloc&) {
    throw Error(dir + ": out of memory while loading the model (`deepinfer info --model " + dir +
                "` shows what it needs; " + model::human_bytes(static_cast<double>(model::host_memory_available())) +
                " is available now)");
  }
}

}  // namespace deepinfer::engine
