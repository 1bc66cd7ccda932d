#include "loader/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace deepinfer::loader {

namespace fs = std::filesystem;

std::string canonical_tensor_name(const std::string& stored) {
  std::string n = stored;
  if (n.rfind("model.", 0) == 0) n = n.substr(6);
  if (n == "lm_head.weight") return "head.weight";
  for (const char* ignored : {"mtp.", "vision.", "aligner.", "image_"})
    if (n.rfind(ignored, 0) == 0) return "";
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

}  // namespace deepinfer::loader
