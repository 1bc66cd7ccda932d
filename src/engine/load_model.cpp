#include "engine/load_model.h"

#include <filesystem>

#include "core/error.h"
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

LoadedModel load_model(const std::string& dir, kernels::Backend& backend, LoadFormat format, uint64_t seed) {
  LoadedModel lm;
  loader::ModelConfig cfg;
  model::Weights w;
  if (format == LoadFormat::kRandom) {
    cfg = loader::load_config((fs::path(dir) / "config.json").string());
    // Made in the device's memory directly unless they need host-side quantisation; the
    // matrices in bf16 when the backend computes in bf16 (the values its products use anyway,
    // at half the memory).
    const auto fmt = backend.precision() == kernels::Precision::kBF16 ? kernels::WeightFormat::kBF16
                                                                       : kernels::WeightFormat::kF32;
    w = model::random_weights(cfg, seed, cfg.quantization.present ? nullptr : &backend, fmt);
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

}  // namespace deepinfer::engine
