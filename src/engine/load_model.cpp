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

model::MemoryAvailable measure(const kernels::Backend& backend, model::MemoryAvailable a) {
  if (a.device < 0 && !backend.host_memory()) a.device = backend.memory_available();
  if (a.host < 0) a.host = model::host_memory_available();
  return a;
}

model::PlanOptions plan_options(const kernels::Backend& backend, const MemoryOptions& m) {
  model::PlanOptions o;
  o.host_backend = backend.host_memory();
  o.precision = backend.precision();
  o.device = m.device.empty() ? backend.name() : m.device;
  o.state_tokens = m.state_tokens;
  o.state_budget_bytes = m.state_budget_bytes;
  o.memory_fraction = m.memory_fraction;
  o.engram_tables_on_host = m.engram_tables_on_host;
  o.dspark = m.dspark;
  return o;
}

LoadedModel load_model_unchecked(const std::string& dir, kernels::Backend& backend, LoadFormat format, uint64_t seed,
                                 const MemoryOptions& memory) {
  LoadedModel lm;
  loader::ModelConfig cfg;
  model::Weights w;
  lm.available = measure(backend, memory.available);
  if (format == LoadFormat::kRandom) {
    const std::string config_path = (fs::path(dir) / "config.json").string();
    cfg = loader::load_config(config_path);
    lm.memory = model::plan_memory(cfg, nullptr, plan_options(backend, memory));
    model::check_memory_plan(lm.memory, lm.available, config_path);
    // Made in a device's memory directly (release formats quantised there too); without a
    // quantization_config the matrices are in bf16 when the backend computes in bf16 (the
    // values its products use anyway, at half the memory).
    const bool on_device = model::random_weights_on_device(cfg, backend.host_memory());
    w = model::random_weights(cfg, seed, on_device ? &backend : nullptr, model::random_matmul_format(backend.precision()),
                              memory.engram_tables_on_host);
  } else {
    lm.checkpoint = loader::Checkpoint::open(dir);
    cfg = lm.checkpoint->config();
    lm.memory = model::plan_memory(cfg, lm.checkpoint.get(), plan_options(backend, memory));
    model::check_memory_plan(lm.memory, lm.available, dir);
    w = model::load_weights(*lm.checkpoint);
  }
  if (fs::exists(fs::path(dir) / "tokenizer.json")) lm.tokenizer = tokenizer::Tokenizer::load(dir);
  auto hasher = make_engram_hasher(cfg, lm.tokenizer.get(), dir);
  lm.model = std::make_unique<model::DeepseekV41>(std::move(cfg), std::move(w), backend, std::move(hasher),
                                                  model::ModelOptions{.engram_tables_on_host = memory.engram_tables_on_host,
                                                                      .dspark = memory.dspark});
  return lm;
}

}  // namespace

LoadedModel load_model(const std::string& dir, kernels::Backend& backend, LoadFormat format, uint64_t seed,
                       const MemoryOptions& memory) {
  try {
    return load_model_unchecked(dir, backend, format, seed, memory);
  } catch (const std::bad_alloc&) {
    throw Error(dir + ": out of memory while loading the model (`deepinfer info --model " + dir +
                "` shows what it needs; " + model::human_bytes(static_cast<double>(model::host_memory_available())) +
                " is available now)");
  }
}

}  // namespace deepinfer::engine
