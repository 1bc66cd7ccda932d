// A checkpoint directory: config.json plus safetensors (one file or index + shards), with
// tensor names mapped to one canonical scheme.
//
// Canonical names are the release scheme: `embed.weight`, `layers.N.attn.wq_a.weight`,
// `norm.weight`, `head.weight`, the DSpark draft stages' `mtp.S.*`. Transformers names
// (`model.` prefix, `lm_head.weight`) map onto them, and so do the Markov head's matrices as
// other ports name them (`mtp.S.markov_head.markov_w1` / `markov_w2` for `.embed` / `.head`).
// Tensors the text model never reads (`vision.*`, `aligner.*`, `image_*`) are ignored.
// Threading: read-only after open.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "loader/config.h"
#include "loader/safetensors.h"

namespace deepinfer::loader {

// Transformers or release name -> canonical name; "" for tensors the model ignores.
std::string canonical_tensor_name(const std::string& stored);

class Checkpoint {
 public:
  // Opens `dir`: config.json, then model.safetensors.index.json (shards) if present, else
  // every *.safetensors file in the directory.
  static std::unique_ptr<Checkpoint> open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  const ModelConfig& config() const { return config_; }
  // nullptr when absent.
  const TensorInfo* find(const std::string& canonical) const;
  const std::map<std::string, const TensorInfo*>& tensors() const { return by_name_; }

 private:
  std::string dir_;
  ModelConfig config_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorInfo*> by_name_;
};

// The first tensor (in name order) holding a value that is not finite — a NaN or infinite
// float (F32, BF16, F16), an e4m3 NaN code (F8_E4M3 0x7F / 0xFF) or a NaN scale (F8_E8M0 0xFF) —
// as "'NAME' (file F): element I is nan" ("" when every tensor is finite). Reads every byte of
// the mapped files: for a failure's message, not for every load.
std::string first_nonfinite_tensor(const Checkpoint& ck);

}  // namespace deepinfer::loader
