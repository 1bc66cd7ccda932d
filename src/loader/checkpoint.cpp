#include "loader/checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/error.h"

namespace deepinfer::loader {

namespace fs = std::filesystem;

std::string canonical_tensor_name(const std::string& stored) {
  std::string n = stored;
  if (n.rfind("model.", 0) == 0) n = n.substr(6);
  if (n == "lm_head.weight") return "head.weight";
  for (const char* ignored : {"vision.", "aligner.", "image_"})
    if (n.rfind(ignored, 0) == 0) return "";
  // The Markov head's matrices under the name other ports give them.
  if (n.rfind("mtp.", 0) == 0) {
    for (const auto& [from, to] : {std::pair<const char*, const char*>{".markov_head.markov_w1.", ".markov_head.embed."},
                                   {".markov_head.markov_w2.", ".markov_head.head."}}) {
      const size_t at = n.find(from);
      if (at != std::string::npos) n.replace(at, std::string(from).size(), to);
    }
  }
  return n;
}

std::unique_ptr<Checkpoint> Checkpoint::open(const std::string& dir) {
  if (!fs::is_directory(dir)) throw Error(dir + ": not a directory (expected a checkpoint directory with config.json)");
  auto ck = std::unique_ptr<Checkpoint>(new Checkpoint());
  ck->dir_ = dir;
  ck->config_ = load_config((fs::path(dir) / "config.json").string());
  std::vector<std::string> files;
  fs::path index = fs::path(dir) / "model.safetensors.index.json";
  if (fs::exists(index)) {
    std::ifstream f(index);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(f);
    } catch (const nlohmann::json::exception& e) {
      throw Error(index.string() + ": invalid JSON: " + e.what());
    }
    if (!j.contains("weight_map") || !j["weight_map"].is_object())
      throw Error(index.string() + ": field 'weight_map': expected an object of tensor name -> shard file");
    std::set<std::string> shard_set;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it.value().is_string()) throw Error(index.string() + ": weight_map['" + it.key() + "'] is not a file name");
      std::string s = it.value().get<std::string>();
      if (s.find('/') != std::string::npos || s.find("..") != std::string::npos)
        throw Error(index.string() + ": weight_map['" + it.key() + "'] names a file outside the directory: " + s);
      shard_set.insert(s);
    }
    for (const auto& s : shard_set) files.push_back((fs::path(dir) / s).string());
  } else {
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().extension() == ".safetensors") files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
  }
  if (files.empty()) throw Error(dir + ": no .safetensors files found");
  for (const auto& f : files) {
    ck->files_.push_back(std::make_unique<SafetensorsFile>(f));
    for (const auto& [name, ti] : ck->files_.back()->tensors()) {
      std::string c = canonical_tensor_name(name);
      if (c.empty()) continue;
      auto [it, inserted] = ck->by_name_.emplace(c, &ti);
      if (!inserted)
        throw Error(f + ": tensor '" + name + "' duplicates '" + it->second->name + "' in " + it->second->file);
    }
  }
  return ck;
}

const TensorInfo* Checkpoint::find(const std::string& canonical) const {
  auto it = by_name_.find(canonical);
  return it == by_name_.end() ? nullptr : it->second;
}

std::string first_nonfinite_tensor(const Checkpoint& ck) {
  for (const auto& [name, t] : ck.tensors()) {
    const core::DType d = t->dtype;
    if (d != core::DType::F32 && d != core::DType::BF16 && d != core::DType::F16 && d != core::DType::F8_E4M3 &&
        d != core::DType::F8_E8M0)
      continue;  // integers (packed FP4 codes): always finite
    const int64_t n = t->numel();
    for (int64_t i = 0; i < n; ++i) {
      float v = 0.0f;
      bool bad = false;
      switch (t->dtype) {
        case core::DType::F32: std::memcpy(&v, t->data + i * 4, 4); break;
        case core::DType::BF16: {
          uint16_t b;
          std::memcpy(&b, t->data + i * 2, 2);
          v = core::bf16_to_f32(b);
          break;
        }
        case core::DType::F16: {
          uint16_t b;
          std::memcpy(&b, t->data + i * 2, 2);
          v = core::f16_to_f32(b);
          break;
        }
        case core::DType::F8_E4M3: bad = (t->data[i] & 0x7F) == 0x7F; break;
        case core::DType::F8_E8M0: bad = t->data[i] == 0xFF; break;
        default: break;
      }
      if (bad || !std::isfinite(v))
        return "'" + name + "' (" + t->file + "): element " + std::to_string(i) + " is " +
               (bad || std::isnan(v) ? "nan" : "infinite");
    }
  }
  return "";
}

}  // namespace deepinfer::loader
